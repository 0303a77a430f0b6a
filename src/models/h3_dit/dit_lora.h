// LoRA adapters for the MiniMax-H3 DiT: the community's file layouts read onto the model's own
// (diffusers) tensor names, validated before any generation, and applied either fused into the
// weights or at run time as an extra low-rank GEMM pair.
//
// Layouts (told apart by their keys, as the reference's loader does):
//   diffusers / PEFT
//   `[transformer.|transformer_ref.|base_model.model.]<module>.lora_A|lora_B.weight`,
//                      PEFT's `.default.` infix accepted; alpha from `<module>.alpha` tensors, the
//                      adapter config beside the file (`adapter_config.json`: `r`, `lora_alpha`,
//                      `rank_pattern`, `alpha_pattern`), the file's `lora_adapter_metadata` or an
//                      `alpha` entry of its metadata; none of these: alpha = rank.
//   original names     the released checkpoint's own module names (`blocks.i.attn.qkv_proj`,
//                      `mlp.fc1`, `final_layer.*`, ... h3_dit_spec.md §1.5), bare or under
//                      `diffusion_model.` (ai-toolkit, ComfyUI): the fused QKV update is split into
//                      to_q/to_k/to_v (shared A, B split by rows) and the SwiGLU fc1 update's
//                      output halves are swapped from [gate; value] to [value; gate].
//                      DiffSynth-Studio's files (original names with PEFT's `.default.` infix) hold
//                      the raw checkpoint's per-head interleaved QKV, de-interleaved first.
//   kohya              `lora_down`/`lora_up` (+ `.alpha`) under dotted names or flattened
//                      `lora_unet_<path_with_underscores>` names (musubi-tuner), either naming.
//   hybrid payloads    the few-step students' adapters add whole-tensor updates to any of these:
//                      `<module>.diff` (weight delta), `<module>.diff_b` (bias delta) and
//                      `<module>.set_weight` (replacement), including modules the base model lacks
//                      (the FastH3 gates `attn.to_gate_compress`, which make the model a student).
// LoKr / LoHa (`lokr_*`, `hada_*`) and DoRA (`dora_scale`) are refused: no published H3 adapter
// uses them, and applying them as plain LoRA would silently run a different model.
//
// The update of one adapter at scale s to a weight W [out, in]:
//   low rank   W + s * (alpha / r) * B A      (A [r, in], B [out, r])
//   diff       W + s * D                      (bias: b + s * d)
//   set_weight W + s * (S - W)                (s = 1 replaces W; a tensor the base lacks counts as
//   0)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/h3_dit/dit_config.h"

namespace h3::dit {

// `--lora FILE[:SCALE]`: the scale defaults to 1. A trailing `:<number>` is the scale, so a file
// name with a colon followed by something that is not a number keeps it. Throws kInvalidArgument
// for an empty file name or a scale that is not finite.
struct LoraSpec {
  std::string file;
  float scale = 1.0f;
};
LoraSpec parse_lora_spec(const std::string& arg);

enum class LoraUpdateKind { kLowRank, kDiff, kSet };
const char* lora_update_kind_name(LoraUpdateKind k);  // "low-rank", "diff", "set"

// One update of one DiT tensor, already in the model's names and layout.
struct LoraUpdate {
  std::string target;  // a DiT tensor name, e.g. "transformer_blocks.3.attn.to_q.weight"
  LoraUpdateKind kind = LoraUpdateKind::kLowRank;
  // kLowRank: A [r, in] and B [out, r] as float32 CPU tensors, B already multiplied by alpha / r
  // (not by the run's scale).
  Tensor down, up;
  // kDiff / kSet: float32 CPU tensor of the target's shape.
  Tensor dense;
  int64_t rank = 0;    // kLowRank
  double alpha = 0.0;  // kLowRank: the alpha in force (= rank when the file gives none)
  std::string source;  // the file's key this came from (messages, `h3 info --lora`)
  // "" for an update to whichever partition the adapter is applied to; "transformer" or
  // "transformer_ref" when the key carries that prefix (then it applies to that partition only).
  std::string partition;
};

struct LoraAdapter {
  std::string file;
  std::string layout;  // "diffusers", "peft", "original", "diffsynth", "kohya", "musubi"
  std::vector<LoraUpdate> updates;
  // Keys that name no module of the model (kept only with LoraReadOptions::allow_unmatched).
  std::vector<std::string> unmatched;
  // The adapter replaces every main block's `attn.to_gate_compress`: applied, it turns the model
  // into a FastH3 student (the preset follows, pipeline/presets.h).
  bool sets_vsa_gates = false;
};

struct LoraReadOptions {
  // Keys that match no module are refused (naming the file and the first of them) unless this is
  // set; then they are listed in LoraAdapter::unmatched and skipped.
  bool allow_unmatched = false;
};

// Reads `file` (a .safetensors adapter) and maps every key onto a DiT of `config`. Throws
// h3::Error naming the file and key for: a key no layout knows or that matches no module (unless
// allow_unmatched), an A without its B or the reverse, a rank that differs between A and B, A or B
// whose shape does not fit the module, a dense update whose shape is not the tensor's, NaN or Inf
// anywhere, LoKr/LoHa/DoRA tensors, a non-float dtype, gates on some main blocks only or on the
// refiner.
LoraAdapter read_lora(const std::string& file, const DitConfig& config,
                      const LoraReadOptions& options = {});

// A human-readable summary for `h3 info --lora`: layout, updates per kind and module family,
// ranks and alphas, unmatched keys.
std::string describe_lora(const LoraAdapter& adapter);

// How adapters are applied (DitModel::apply_loras).
//   kFused    folded into the weights once (no per-step cost); dense updates always go this way.
//   kRuntime  low-rank pairs kept beside the weights and added at each linear:
//             y = x W^T + s (x A^T) B^T. For weights the model cannot rewrite exactly (quantized)
//             or adapter sets that change per request.
enum class LoraMode { kFused, kRuntime };
const char* lora_mode_name(LoraMode m);             // "fused", "runtime"
LoraMode parse_lora_mode(const std::string& text);  // throws kInvalidArgument

// An adapter with the scale it runs at.
struct ScaledLora {
  const LoraAdapter* adapter = nullptr;
  float scale = 1.0f;
};

}  // namespace h3::dit
