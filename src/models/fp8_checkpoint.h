// FP8 projections as published checkpoints store them, read into the forms the engine runs
// (E4M3 weights with a float32 scale per output channel or per 128 x 128 block, ops/fp8.h).
//
// The layouts found in published FP8 checkpoints of diffusion transformers and of Qwen3-VL, each
// next to the E4M3 weight `P.weight` [N, K] (safetensors dtype F8_E4M3):
//   - `P.weight_scale`, float, [] or [1]: one scale for the tensor (NVIDIA ModelOpt's static FP8,
//     ComfyUI's scaled FP8, compressed-tensors' "tensor" strategy);
//   - `P.weight_scale`, float, [N] or [N, 1]: one per output channel (compressed-tensors'
//     "channel" strategy, as in the FP8_DYNAMIC exports of llm-compressor; ModelOpt per channel);
//   - `P.weight_scale_inv`, float, [ceil(N/128), ceil(K/128)]: one per 128 x 128 block (Qwen's
//     and DeepSeek's "fp8" quant method with weight_block_size [128, 128]). Despite its name the
//     value multiplies: weight = E4M3 value x scale_inv.
//   - `P.input_scale`, float, [] or [1]: a static activation scale. The engine quantizes every
//     token's activations with its own scale at run time (at least as fine), so it is read for
//     its shape only and otherwise not used.
// Per-tensor and per-channel scales become per-channel scales exactly; block scales are kept as
// they are (their GEMMs quantize the activations per token and 128 columns, ops/fp8.h).
#pragma once

#include <string>

#include "io/safetensors.h"
#include "ops/fp8.h"

namespace h3::models {

// Whether `name` is a scale stored beside an FP8 weight (`P.weight_scale`, `P.weight_scale_inv`,
// `P.input_scale`); `weight` then gets that weight's name, `P.weight`.
bool is_fp8_companion(const std::string& name, std::string* weight);

// What reading an FP8 projection did, for the load's log.
struct Fp8ProjectionNote {
  const char* layout = "";          // "per tensor", "per channel" or "128x128 blocks"
  bool static_input_scale = false;  // `P.input_scale` present (not used: see above)
};

// The checkpoint's FP8 projection `weight` with its E4M3 values `data` [N, K], already where the
// model keeps them, and its scales read from `ckpt` (per tensor brought to one per channel), on
// data's device. Refuses (kInvalidFile, naming the checkpoint and the tensor) a missing scale, two
// kinds of scale, a scale of any other shape or of a non-float dtype, and non-finite or
// non-positive scales.
ops::Fp8Weight read_fp8_projection(const io::Checkpoint& ckpt, const std::string& weight,
                                   const Tensor& data, Fp8ProjectionNote* note = nullptr);

}  // namespace h3::models
