// The MiniMax-H3 diffusion transformer (h3_dit_spec.md §2): one packed sequence of text, video and
// audio rows through the token refiner, `num_layers` AdaLN blocks and two float32 heads.
//
// The model is a composition of ops/ops.h over weights that live on one device; activations are
// computed on the device of the weights, so the same code is the CPU oracle and the CUDA engine.
//
// Precision policies (§1.7, §2.13):
//   kF32   every weight widened exactly to float32, activations float32 (the golden data's own
//          precision; parity bound 1e-5).
//   kBF16  the released policy: fp32 islands (input projections, time MLP, output heads) in
//          float32, everything else bf16 weights and bf16 activations. With DitRounding::kEager the
//          activations are rounded exactly where the eager reference rounds (each multiply and add
//          of the modulation, the gated residuals, RoPE and SwiGLU, §2.9-2.11): on the CPU this is
//          the bf16 emulation that measures the floor for GPU results. kFused uses the single-rounding
//          ops (modulate, gated_residual, rope, swiglu) instead, as the reference's optional fusions
//          do (§6): faster, and within tolerance of the eager path.
//
// Usage per generation: load once; encode_text() once per prompt (the refiner does not depend on t,
// §2.4); make_layout() once per packed layout (positions and row indices do not change across
// steps); forward() once per denoising step.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/h3_dit/dit_config.h"
#include "models/h3_dit/dit_lora.h"
#include "models/h3_dit/dit_weights.h"
#include "ops/fp8.h"
#include "ops/vsa.h"

namespace h3 {
class LayerStream;
class PartTimer;
}

namespace h3::dit {

enum class DitPrecision { kF32, kBF16 };
enum class DitRounding { kEager, kFused };

const char* precision_name(DitPrecision p);  // "f32", "bf16"
// Parses "f32"/"fp32"/"float32" and "bf16"/"bfloat16"; throws kInvalidArgument otherwise.
DitPrecision parse_precision(const std::string& text);

// Attention of the main blocks (§5.1). The token refiner is always dense.
enum class DitAttentionBackend { kDense, kVsa };
const char* attention_backend_name(DitAttentionBackend b);  // "dense", "vsa"
// Parses "dense" / "vsa"; throws kInvalidArgument otherwise.
DitAttentionBackend parse_attention_backend(const std::string& text);

// VSA-H3 knobs (§5.1 table).
struct DitVsaOptions {
  int tile_size = 64;            // 64 or 256; FastH3 was trained with 64
  double sparsity = -1.0;        // < 0: default (0.9 with gates, 0 without); else in [0, 1)
  ops::VsaMode mode = ops::VsaMode::kExempt;
  std::vector<int64_t> dense_layers;  // block indices run at sparsity 0
  int64_t dense_first_steps = 0;      // steps with index < n run at sparsity 0
  // Parity tests: block i attends with block_masks[i] (u8 [H, n, n], e.g. the reference's own mask)
  // instead of its top-k selection (ops::VsaOptions::block_mask). Empty: top-k. CPU only.
  std::vector<Tensor> block_masks;
};

struct DitOptions {
  Device device = Device::cpu();
  DitPrecision precision = DitPrecision::kF32;
  DitRounding rounding = DitRounding::kEager;
  DitAttentionBackend attention = DitAttentionBackend::kDense;
  DitVsaOptions vsa{};
  // --cpu-offload (issue #6): every main block's weights stay in pinned host memory and are
  // streamed into two device slots block by block (double buffered on a copy stream,
  // core/layer_stream.h). The same as resident_blocks = 0.
  bool cpu_offload = false;
  // Partial residency (h3_components_spec.md §5, set by the memory planner): main blocks
  // [0, resident_blocks) stay on the device, blocks [resident_blocks, num_layers) live in pinned
  // host memory and stream through the two slots. Unset: every block resident (none with
  // cpu_offload; together they must agree on 0). Outputs are bit-identical to the resident model
  // for every value. Streaming needs a CUDA device: on the CPU the weights already live in host
  // memory, and asking for it is refused (kUnsupported) rather than ignored.
  std::optional<int64_t> resident_blocks{};
  // --dit-dtype fp8 (issue #15): the blocks' attention and feed-forward projections run as FP8
  // (E4M3) GEMMs, weights quantized once at load with per-output-channel scales, activations per
  // token as each layer runs (ops/fp8.h; on the CPU the same rounding, emulated). Every block
  // stays resident: streaming FP8 blocks is refused for now.
  bool fp8 = false;
  // --fp8-scaling: the weights in 128 x 128 blocks and the activations per token and 128 columns
  // (the default; the scaling DeepSeek-style FP8 checkpoints use, cuBLASLt's block scaling), or
  // per output channel with activations per token (--fp8-scaling channel).
  ops::Fp8WeightScaling fp8_scaling = ops::Fp8WeightScaling::kPerBlock;
};

// The number of main blocks that stay on the device under `options` for a model of `num_layers`
// blocks (the rest stream). Throws kInvalidArgument for a count outside [0, num_layers] or one
// that contradicts cpu_offload, kUnsupported when blocks would stream on a non-CUDA device.
int64_t resolve_resident_blocks(const DitOptions& options, int64_t num_layers);

// The refined text rows of one prompt, on the model's device in the activation dtype.
struct DitTextContext {
  Tensor embeds;  // [L, hidden]
};

// Per-layout state (fixed for a whole generation): RoPE tables and row indices on the device.
struct DitLayout {
  int64_t seq_len = 0;
  Tensor rope_cos, rope_sin;  // [S, 6F] in the activation dtype (bf16 cast once per layout, §2.8)
  Tensor video_indices, audio_indices, text_indices;  // i64 on the device
  std::vector<int64_t> token_tags;                    // host copy, 0 video / 1 text / 2 audio
  // VSA tiling (§5.2), built once per layout when the model runs the VSA backend.
  bool has_vsa = false;
  ops::VsaGeometry vsa;
  int64_t num_video_rows() const { return video_indices.defined() ? video_indices.numel() : 0; }
  int64_t num_audio_rows() const { return audio_indices.defined() ? audio_indices.numel() : 0; }
  int64_t num_text_rows() const { return text_indices.defined() ? text_indices.numel() : 0; }
};

struct DitOutputs {
  Tensor video;  // float32 [N_vrows, patch_dim], rows in video_indices order (condition rows too)
  Tensor audio;  // float32 [N_arows, audio_in_channels], rows in audio_indices order
};

// Optional intermediates for parity tests (the names of the golden `inter.*` tensors). Filled with
// device tensors in the activation dtype (temb in float32).
struct DitTrace {
  Tensor context_embedder_out;  // [L, hidden]
  Tensor token_refiner_out;     // [L, hidden]
  Tensor temb;                  // [N_u, time_embed_dim] float32
  Tensor rope_cos, rope_sin;    // [S, 6F]
  std::vector<Tensor> block_out;  // [S, hidden] per block
  Tensor norm_out_out;          // [S, hidden]
  std::vector<ops::VsaTrace> vsa;  // per block, VSA backend only (scores, mask, ...)
};

// One step's inputs on the model's device, validated (DitModel::prepare_step): what run_step reads,
// and what a CUDA graph of the step copies into its own buffers before each replay.
struct DitStepInputs {
  Tensor video_rows;  // [N_vrows, patch_dim] float
  Tensor audio_rows;  // [N_arows, audio_in_channels] float
  Tensor sinusoid;    // [N_u, freq_dim] float32: the timestep sinusoids (§2.6)
  Tensor adaln_rows;  // [S] i64: u * 3 + tag, the AdaLN table row of each packed row (§2.7)
  Tensor t_rows;      // [S] i64: u, the timestep of each packed row (final norm, §2.12)
};

// Everything of one forward in the reference's argument form (§2.1). A leading batch dimension of 1
// is accepted on each tensor.
struct DitInputs {
  Tensor hidden_states;          // [N_vrows, patch_dim] float
  Tensor audio_hidden_states;    // [N_arows, audio_in_channels] float
  Tensor encoder_hidden_states;  // [L, text_dim] float
  Tensor timestep;               // [N_u] float32, sorted distinct clean-time values
  Tensor timestep_indices;       // [S] integer
  Tensor token_tags;             // [S] integer
  Tensor position_ids;           // [S, 3] float64 (or float32)
  Tensor video_indices, audio_indices, text_indices;  // integer
};

class DitModel {
 public:
  // Loads `component_dir` (config.json plus a single or sharded safetensors checkpoint).
  static DitModel load(const std::string& component_dir, const DitOptions& options);
  static DitModel from_checkpoint(const DitConfig& config, const io::Checkpoint& ckpt,
                                  const DitOptions& options);

  // Whether the blocks' projections are E4M3 (--dit-dtype fp8, or stored so in the checkpoint).
  bool fp8_weights() const { return options_.fp8 || weights_.fp8_from_checkpoint > 0; }
  const DitConfig& config() const { return config_; }
  const DitOptions& options() const { return options_; }
  DType activation_dtype() const { return act_; }
  // Streamed blocks (index >= resident_blocks()) are CPU tensors over pinned host memory in
  // weights().blocks; the rest lives on the device.
  const DitWeights& weights() const { return weights_; }
  // Main blocks on the device, and blocks streamed from pinned host memory (they add up to
  // config().num_layers).
  int64_t resident_blocks() const { return resident_blocks_; }
  int64_t streamed_blocks() const { return config_.num_layers - resident_blocks_; }
  // Device bytes of the block slots (min(2, streamed_blocks()) x the largest streamed block; 0
  // when nothing streams), and pinned host bytes of the streamed blocks.
  uint64_t stream_slot_bytes() const;
  uint64_t stream_host_bytes() const;

  // context_embedder + token refiner + final norm (§2.3-2.4). `encoder_hidden_states` is
  // [L, text_dim] (any float dtype, any device).
  DitTextContext encode_text(const Tensor& encoder_hidden_states, DitTrace* trace = nullptr) const;

  // Validates the packed layout (the three index sets partition [0, S), tags in {0, 1, 2}) and
  // builds the RoPE tables. Index and position tensors may be on any device.
  DitLayout make_layout(const Tensor& position_ids, const Tensor& token_tags,
                        const Tensor& video_indices, const Tensor& audio_indices,
                        const Tensor& text_indices) const;

  // Builds the VSA tiling into `layout` from explicit prefix segments (text, condition video rows,
  // audio rows; zeros allowed) and the video grid (T, Hh, Ww) in patches. make_layout calls it
  // with the segments it derives (below) when the model runs the VSA backend.
  void attach_vsa(DitLayout& layout, const std::vector<int64_t>& prefix_segments,
                  const int64_t grid[3]) const;

  // One forward (§2.3-2.12). video_rows [N_vrows, patch_dim], audio_rows [N_arows, audio_in]
  // (float, any device); timesteps [N_u] float32; timestep_indices [S] integer in [0, N_u).
  // step_index: the denoising step (decides `dense_first_steps` of the VSA backend).
  DitOutputs forward(const DitTextContext& text, const DitLayout& layout, const Tensor& video_rows,
                     const Tensor& audio_rows, const Tensor& timesteps,
                     const Tensor& timestep_indices, DitTrace* trace = nullptr,
                     int64_t step_index = 0) const;

  // forward() in its two halves: the host half (validation, per-row tables, uploads) and the device
  // half, which issues device work only (no host round trip), so a CUDA graph can record it
  // (models/h3_dit/dit_graph.h).
  DitStepInputs prepare_step(const DitTextContext& text, const DitLayout& layout,
                             const Tensor& video_rows, const Tensor& audio_rows,
                             const Tensor& timesteps, const Tensor& timestep_indices) const;
  DitOutputs run_step(const DitTextContext& text, const DitLayout& layout, const DitStepInputs& in,
                      DitTrace* trace = nullptr, int64_t step_index = 0) const;

  // encode_text + make_layout + forward in one call.
  DitOutputs forward(const DitInputs& in, DitTrace* trace = nullptr, int64_t step_index = 0) const;

  // Whether the main blocks carry FastH3 gates, and the sparsity block `block` runs at in step
  // `step_index` under the VSA backend (§5.1: dense layers and dense first steps give 0).
  bool has_vsa_gates() const { return weights_.has_vsa_gates; }
  double vsa_sparsity() const;  // the resolved run-level sparsity
  double vsa_sparsity_for(int64_t block, int64_t step_index) const;

  // One main block (§2.9) on the packed buffer x [S, hidden]: `temb_act` is SiLU(temb) in the
  // activation dtype [N_u, time_embed_dim], `adaln_rows` [S] the AdaLN row index u*3 + tag of
  // each packed row. Public for benchmarks; forward() runs the same code.
  Tensor run_block(int64_t block, const Tensor& x, const Tensor& temb_act, const Tensor& adaln_rows,
                   const DitLayout& layout, int64_t step_index, DitTrace* trace = nullptr) const;
  // Applies LoRA adapters (dit_lora.h), in order, to this partition ("transformer" or
  // "transformer_ref": updates addressed to the other one are skipped). Adapters at scale 0 are not
  // applied at all. Whatever was applied before is removed first. kFused folds every update into
  // the weights in float32 and rounds once to the weight's dtype; with `restorable` each tensor it
  // changes is first copied to host memory, so that remove_loras() restores it bit for bit.
  // kRuntime folds only the dense updates (diff, set) that way and keeps the low-rank pairs on the
  // device for the linears (DitWeights' RuntimeLora). Everything is checked before the first
  // tensor changes: a low-rank or diff update of a gate the model lacks, and gates created on
  // streamed blocks, are refused (kUnsupported).
  void apply_loras(const std::vector<ScaledLora>& adapters, LoraMode mode, bool restorable,
                   const std::string& partition = "transformer");
  // Restores the weights as they were loaded (bit for bit) and drops the run-time pairs. Throws
  // kUnsupported when adapters were fused without `restorable` (reload the model instead).
  void remove_loras();
  // "" when none; else "file@scale, ..." in the order applied, with the mode.
  std::string applied_loras() const;
  bool has_loras() const { return !lora_state_.applied.empty(); }
  bool loras_restorable() const;

  // Benchmarks: every block run from now on marks its parts (each GEMM, the attention, every pass
  // between them) on `timer` (nullptr: off). Not while a CUDA graph is being captured.
  void set_part_timer(PartTimer* timer) const { part_timer_ = timer; }

  // A model over given weights (benchmarks with random weights; the shapes must match `config`).
  static DitModel from_weights(const DitConfig& config, DitWeights weights,
                               const DitOptions& options);

 private:
  DitModel() = default;
  // rope == nullptr: the refiner (dense, no RoPE). vsa_sparsity < 0: dense attention. `aq`: the
  // input already in E4M3 for the FP8 projections; `a` may then be undefined (fp8_only_reader).
  Tensor attention_layer(const Tensor& a, ops::Fp8Activation aq, const DitAttentionWeights& w,
                         const DitLayout* rope, double vsa_sparsity = -1.0,
                         ops::VsaTrace* vsa_trace = nullptr,
                         const Tensor* vsa_mask = nullptr) const;
  void init_common();
  // Streamed block `block` as views into its slot (waits for its copy, prefetches `next_block`,
  // -1 for none); release_streamed(block) after its work is queued.
  DitBlockWeights acquire_streamed(int64_t block, int64_t next_block) const;
  void release_streamed(int64_t block) const;
  Tensor run_block_with(const DitBlockWeights& b, int64_t block, const Tensor& x,
                        const Tensor& temb_act, const Tensor& adaln_rows, const DitLayout& layout,
                        int64_t step_index, DitTrace* trace) const;
  Tensor feed_forward(const Tensor& b, ops::Fp8Activation bq, const DitFeedForwardWeights& w) const;
  // Whether FP8 GEMMs are the only readers of an input of these projections (weight, adapters;
  // undefined weights are not read): each weight E4M3 and without adapters, which read the 16-bit
  // rows. Such an input can be formed in E4M3 directly.
  bool fp8_only_reader(
      std::initializer_list<std::pair<const Tensor*, const RuntimeLora*>> projections) const;
  Tensor apply_rope(const Tensor& x, const DitLayout& layout) const;
  Tensor modulate_rows(const Tensor& x, const Tensor& scale, const Tensor& shift,
                       const Tensor& idx) const;
  Tensor norm_modulate(const Tensor& x, const Tensor& norm, float eps, const Tensor& scale,
                       const Tensor& shift, const Tensor& idx) const;
  Tensor norm_rope(const Tensor& x, const Tensor& norm, float eps, const DitLayout& layout) const;
  void part(const char* name) const;
  Tensor gated_add(const Tensor& residual, const Tensor& branch, const Tensor& gate,
                   const Tensor& idx) const;
  bool eager_bf16() const {
    return options_.precision == DitPrecision::kBF16 && options_.rounding == DitRounding::kEager;
  }

  // What apply_loras() changed: the originals of fused tensors (host copies; undefined for a
  // tensor the adapters created, such as gates) and a description of the adapters.
  struct LoraState {
    std::vector<std::pair<std::string, Tensor>> originals;
    bool restorable = true;
    bool gates_created = false;
    bool fused_any = false;  // some tensor was rewritten (dense updates, or kFused)
    LoraMode mode = LoraMode::kFused;
    std::vector<std::string> applied;
  };
  LoraState lora_state_;
  DitConfig config_;
  DitOptions options_;
  DType act_ = DType::kF32;
  DitWeights weights_;
  Tensor ones_;  // [hidden] of 1 in the activation dtype: the "1 +" of the eager modulation
  int64_t resident_blocks_ = 0;
  // Block streaming state of blocks [resident_blocks_, num_layers) (slots, copy stream, events);
  // shared so that the model stays movable, and mutable through const forward() by design (it
  // only orders copies).
  std::shared_ptr<LayerStream> stream_;
  mutable PartTimer* part_timer_ = nullptr;  // set_part_timer
};

}  // namespace h3::dit
