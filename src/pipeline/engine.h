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

struct EngineOptions {
  Device device = Device::cpu();
  SequentialLoad sequential = SequentialLoad::kAuto;
  bool cpu_offload = false;  // DiT weights stay in pinned host memory, streamed block by block
  // Numerics. The CPU default is the float32 oracle; on CUDA the DiT runs bf16 and the video VAE
  // decodes under the reference's fp16 autocast.
  std::optional<dit::DitPrecision> dit_precision;
  std::optional<video_vae::VaePrecision> vae_precision;
  // The conditioner's compute dtype; default bf16 on CUDA (the released encoder's own dtype, the
  // reference's policy) and float32 on the CPU (the oracle).
  std::optional<DType> conditioner_dtype;
  dit::DitAttentionBackend attention = dit::DitAttentionBackend::kDense;
  dit::DitVsaOptions vsa{};
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

  // Each returns the component, loading it first when needed (a receipt stage "load <name>" with
  // bytes, seconds and GB/s). `with_vision`: the conditioner's vision tower is needed (FL2VA and
  // Ref2VA); `reference`: the transformer_ref/ partition (Ref2VA); `encoder`: the VAE's encoder
  // is needed (keyframes, references).
  qwen3_vl::Qwen3VlModel& conditioner(Receipt& rc);
  dit::DitModel& transformer(Receipt& rc, bool reference = false);
  video_vae::VideoVae& video_vae(Receipt& rc, bool encoder = false);
  audio_vae::AudioVae& audio_vae(Receipt& rc, bool encoder = false);

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
  std::string model_dir_;
  EngineOptions options_;
  io::Repository repo_;
  MemoryPlan plan_;
  std::unique_ptr<Loaded> loaded_;
};

}  // namespace h3::pipeline
