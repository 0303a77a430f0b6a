// The engine: one repository's components on one device, loaded when a generation first needs
// them and kept for the next one, within the memory plan (h3_components_spec.md §5;
// ENGINEERING.md "The picture").
//
// The pipeline asks for a component with `conditioner()`, `transformer()`, ... and tells the
// engine when a stage is over (`finished_with_conditioner()`, `finished_generation()`). What is
// kept, released and reloaded is the engine's business, decided by its MemoryPlan:
// - sequential start (the plan's `sequential`): the conditioner is released as soon as the prompt
//   is encoded and before the DiT or a VAE is loaded; a later generation reloads it (and releases
//   the DiT and VAEs first when they do not fit beside it); a plan that streams the conditioner
//   (stream-conditioner, cpu-offload) releases it the same way until its layers stream;
// - the DiT streams its blocks from pinned host memory when the plan says so (`cpu_offload`);
// - otherwise everything stays loaded between generations.
// A second generation in the same process always works: whatever was released is reloaded.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/device.h"
#include "core/receipt.h"
#include "io/repo.h"
#include "models/audio_vae/audio_vae_model.h"
#include "models/h3_dit/dit_model.h"
#include "models/qwen3_vl/qwen3_vl_model.h"
#include "models/video_vae/video_vae_model.h"
#include "pipeline/memory_plan.h"

namespace h3::pipeline {

// A LoRA adapter read and checked against the repository's transformer, with its scale.
struct EngineLora {
  dit::LoraSpec spec;
  std::shared_ptr<const dit::LoraAdapter> adapter;
};
// Reads each `--lora FILE[:SCALE]` against the config of the repository's transformer/ (or
// transformer_ref/ when that is the only one): every refusal of dit::read_lora happens here,
// before any weight is loaded or any generation starts.
std::vector<EngineLora> read_loras(const io::Repository& repo,
                                   const std::vector<dit::LoraSpec>& specs, bool allow_unmatched);
// The file of the first adapter that sets every block's FastH3 gate, for the preset.
std::optional<std::string> lora_gates_source(const std::vector<EngineLora>& loras);

struct EngineOptions {
  Device device = Device::cpu();
  SequentialLoad sequential = SequentialLoad::kAuto;
  bool cpu_offload = false;  // DiT weights stay in pinned host memory, streamed block by block
  // Streaming for devices where the models do not fit resident (set by the memory plan):
  // the conditioner's decoder layers stay in pinned host memory and stream through two device
  // slots (qwen3_vl::Qwen3VlLoadOptions::stream_layers); the DiT keeps blocks [0, n) on the
  // device and streams the rest (dit::DitOptions::resident_blocks; unset: all resident, or none
  // with cpu_offload). CUDA devices only.
  bool stream_conditioner = false;
  std::optional<int64_t> dit_resident_blocks{};
  // Numerics. The CPU default is the float32 oracle; on CUDA the DiT runs bf16 and the video VAE
  // decodes under the reference's fp16 autocast.
  std::optional<dit::DitPrecision> dit_precision;
  // Where the bf16 DiT rounds (dit_model.h): on CUDA the fused single-rounding kernels (the
  // reference's optional fusions, within its tolerance, and what `h3 bench dit` times); elsewhere
  // the eager reference's roundings, the bf16 emulation that measures the GPU's floor.
  std::optional<dit::DitRounding> dit_rounding;
  // --dit-dtype fp8 (dit::DitOptions::fp8): FP8 GEMMs in the DiT blocks.
  bool dit_fp8 = false;
  // --fp8-scaling: the FP8 DiT's weights in 128 x 128 blocks with activations per token and 128
  // columns (the default: faster GEMMs and no larger error, bench/RESULTS.md), or per output
  // channel with activations per token (DitOptions::fp8_scaling).
  ops::Fp8WeightScaling dit_fp8_scaling = ops::Fp8WeightScaling::kPerBlock;
  // --text-encoder-dtype fp8 (qwen3_vl::Qwen3VlLoadOptions::fp8): FP8 GEMMs in the conditioner.
  bool text_encoder_fp8 = false;
  std::optional<video_vae::VaePrecision> vae_precision;
  // --vae-attention: the video VAE decoder's attention kernel (VideoVaeOptions::attention).
  ops::AttentionKernel vae_attention = ops::AttentionKernel::kAuto;
  // --vae-dtype fp8 (video_vae::VideoVaeOptions::decoder_fp8); implies the f16-autocast policy.
  bool vae_fp8 = false;
  // --vae-tile-batch (video_vae::VideoVaeOptions::tile_batch): 0 automatic.
  int64_t vae_tile_batch = 0;
  // The conditioner's compute dtype; default bf16 on CUDA (the released encoder's own dtype, the
  // reference's policy) and float32 on the CPU (the oracle).
  std::optional<DType> conditioner_dtype;
  dit::DitAttentionBackend attention = dit::DitAttentionBackend::kDense;
  dit::DitVsaOptions vsa{};
  // LoRA adapters applied to the transformer when it loads (dit_lora.h). `lora_restorable` keeps
  // the original tensors a fused adapter rewrites in host memory, so that set_loras() can change
  // the set without reading the checkpoint again (the server); otherwise a change reloads it.
  std::vector<EngineLora> loras;
  dit::LoraMode lora_mode = dit::LoraMode::kFused;
  bool lora_restorable = false;
  // What the next generations need; sizes the plan (the activations of the largest request).
  PlanRequest plan_request{};
};

class Engine {
 public:
  // Opens the repository (headers only) and makes the memory plan; throws before loading anything
  // when the plan cannot fit (check_fits) or the repository is malformed.
  Engine(const std::string& model_dir, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const io::Repository& repo() const { return repo_; }
  const EngineOptions& options() const { return options_; }
  const MemoryPlan& plan() const { return plan_; }
  Device device() const { return options_.device; }
  // The DiT's rounding policy in force (EngineOptions::dit_rounding or the device's default).
  dit::DitRounding dit_rounding() const;

  // Each returns the component, loading it first when needed (a receipt stage "load <name>" with
  // bytes, seconds and GB/s). `with_vision`: the conditioner's vision tower is needed (FL2VA and
  // Ref2VA); `reference`: the transformer_ref/ partition (Ref2VA); `encoder`: the VAE's encoder
  // is needed (keyframes, references).
  qwen3_vl::Qwen3VlModel& conditioner(Receipt& rc, bool with_vision = true);
  dit::DitModel& transformer(Receipt& rc, bool reference = false);
  video_vae::VideoVae& video_vae(Receipt& rc, bool encoder = false);
  audio_vae::AudioVae& audio_vae(Receipt& rc, bool encoder = false);

  // Replaces the adapter set for the next generations. A loaded transformer gets the new set at
  // once (a stage "apply lora" in `rc`): removed and applied again, or reloaded when the old set
  // was fused without its originals. The same set again changes nothing.
  void set_loras(std::vector<EngineLora> loras, Receipt& rc);
  const std::vector<EngineLora>& loras() const { return options_.loras; }

  // The pipeline's stage boundaries: the engine releases what the plan says may go.
  void finished_with_conditioner(Receipt& rc);
  void finished_generation(Receipt& rc);

  // Drops every loaded component (the next request reloads them).
  void release_all();
  // What is resident now, for tests and the log: "conditioner", "transformer", ...
  bool is_loaded(const std::string& component) const;

 private:
  struct Loaded;
  bool releases_conditioner() const;
  void apply_loras(dit::DitModel& model, bool reference, Receipt& rc);
  std::string model_dir_;
  EngineOptions options_;
  io::Repository repo_;
  MemoryPlan plan_;
  std::unique_ptr<Loaded> loaded_;
};

}  // namespace h3::pipeline
