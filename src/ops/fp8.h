// FP8 (E4M3) weights and the GEMMs that read them.
//
// A weight [N, K] is stored as E4M3 values with float32 scales, either one per output channel
// ([N]) or one per 128 x 128 block ([ceil(N/128), ceil(K/128)]), and stands for value x scale.
// The activations are quantized to E4M3 as the GEMM runs, with one scale per token (row), one
// per token and 128 columns (a "group", the activations' side of 128 x 128 weight blocks), or one
// for the whole tensor; products accumulate in float32 and the output takes x's dtype. A scale is
// amax / 448 (E4M3's largest finite value), so the largest magnitude of a channel, block, token or
// tensor lands on 448 and nothing saturates; an all-zero group gets the scale 1.
//
// These are the semantics of the CPU implementation, which is also the oracle for other backends:
// the E4M3 rounding is f8e4m3_from_f32's (round to nearest even, as torch casts), and the GEMM
// multiplies the dequantized operands, which differs from scaling a sum of E4M3 products only by
// float32 rounding (an E4M3 value times a float32 scale needs 28 significant bits).
//
// On CUDA (ops/cuda/fp8.cu) the quantization is the same bits. linear_fp8 runs on the FP8 tensor
// cores (cuBLASLt) for per-channel weights with per-token (or per-tensor) activations, and for
// per-block weights with per-group activations, when K is a multiple of 16 and N of 8; other
// pairings multiply the dequantized operands in float32 as the CPU does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace h3::ops {

inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr int64_t kFp8BlockSize = 128;

enum class Fp8WeightScaling { kPerChannel, kPerBlock };
enum class Fp8ActScaling { kPerToken, kPerTensor, kPerGroup };

// "channel" | "block"; "token" | "tensor" | "group" (the CLI's words). Anything else is
// kInvalidArgument naming what was given and what is accepted.
Fp8WeightScaling parse_fp8_weight_scaling(const std::string& text);
Fp8ActScaling parse_fp8_act_scaling(const std::string& text);
const char* fp8_weight_scaling_name(Fp8WeightScaling s);
const char* fp8_act_scaling_name(Fp8ActScaling s);

struct Fp8Weight {
  Tensor data;   // F8E4M3 [N, K]
  Tensor scale;  // F32 [N] (per channel) or [ceil(N/128), ceil(K/128)] (per block)
  Fp8WeightScaling scaling = Fp8WeightScaling::kPerChannel;

  bool defined() const { return data.defined(); }
  int64_t out_features() const { return data.size(0); }
  int64_t in_features() const { return data.size(1); }
  size_t nbytes() const { return data.nbytes() + scale.nbytes(); }
};

// Quantizes a float weight [N, K]. A non-finite value is refused (kInvalidArgument, with its
// index): it would turn its whole channel or block into NaN.
Fp8Weight quantize_weight_fp8(const Tensor& w, Fp8WeightScaling scaling);

// Checks an FP8 weight's parts against each other (dtypes, the scale's shape for its scaling,
// finite positive scales); `what` names it in the error (a checkpoint tensor, for instance).
void check_fp8_weight(const Fp8Weight& w, const std::string& what);

// value x scale, as `dtype` (a float type).
Tensor dequantize_weight_fp8(const Fp8Weight& w, DType dtype);

// The activations as the GEMM sees them: x [..., K] rounded to E4M3 under its scales and
// multiplied back, in float32. A token holding a NaN or an infinity gives NaN throughout its
// row (the scale is not finite), as the device kernels do.
Tensor fake_quantize_activation_fp8(const Tensor& x, Fp8ActScaling act);

// y = x W^T + b with W in FP8 and x quantized on the fly: x [..., K] float, bias [N] or null.
Tensor linear_fp8(const Tensor& x, const Fp8Weight& w, const Tensor* bias, Fp8ActScaling act);

// An activation quantized once for every GEMM that reads it: a DiT block's q, k, v and gate
// projections read the same modulated rows, and quantizing them once instead of four times
// saves three passes over the largest activation of the block. The values are those
// fake_quantize_activation_fp8 gives; linear_fp8 over it equals linear_fp8 over the float x.
// On CUDA, per-group activations are laid out as cuBLASLt's 128-element block scaling takes them:
// the rows padded to a multiple of 4 (the padding rows zero, scale 1) and the scales token-major,
// scale[g * M4 + row] for the 128 columns of group g.
struct Fp8Activation {
  Tensor data;   // CUDA: E4M3 [M, K] ([M4, K] per group); CPU: fake-quantized, float32 [M, K]
  Tensor scale;  // CUDA: F32 [M], one per row (per-tensor scaling repeats it), or F32
                 // [ceil(K/128), M4] per group; CPU: undefined
  Shape shape;   // x's shape: the outputs' but for the last dimension
  DType dtype = DType::kF32;  // x's dtype: the outputs'
  Fp8ActScaling scaling = Fp8ActScaling::kPerToken;

  bool defined() const { return data.defined(); }
};
Fp8Activation quantize_activation_fp8(const Tensor& x, Fp8ActScaling act);
Tensor linear_fp8(const Fp8Activation& x, const Fp8Weight& w, const Tensor* bias);

// quantize_activation_fp8(swiglu(u), act), the same bits: the input of a feed-forward's output
// projection when that projection is FP8 and nothing else reads the product. On CUDA, for 16-bit
// u quantized per token, one kernel holds each row's products (rounded to u's dtype, as swiglu
// stores them) in shared memory until the row's amax is known, so the product never goes
// through global memory (H3_FUSE_FP8_SWIGLU=0: the two ops).
Fp8Activation swiglu_fp8(const Tensor& u, Fp8ActScaling act);

// quantize_activation_fp8(rms_norm_modulate(x, weight, eps, scale, shift, idx), act), the same
// bits: a DiT block's modulated rows when only FP8 projections read them. On CUDA, per token, one
// kernel forms each row's values twice (for the row's amax, then for the E4M3 bytes) instead of
// writing the 16-bit rows and reading them back (H3_FUSE_FP8_NORM_MODULATE=0: the two ops).
Fp8Activation rms_norm_modulate_fp8(const Tensor& x, const Tensor* weight, float eps,
                                    const Tensor& scale, const Tensor& shift, const Tensor& idx,
                                    Fp8ActScaling act);

// gated_residual_rms_norm_modulate (ops.h) with the modulated rows as
// rms_norm_modulate_fp8 gives them, the same bits: the attention residual and the feed-forward's
// input of a DiT block whose feed-forward input projection is FP8. On CUDA one pass where
// rms_norm_modulate_fp8 takes its one-kernel path and the residual's operands allow
// (H3_FUSE_GATED_NORM=0: gated_residual, then rms_norm_modulate_fp8).
struct GatedNormFp8 {
  Tensor x;
  Fp8Activation modulated;
};
GatedNormFp8 gated_residual_rms_norm_modulate_fp8(const Tensor& residual, const Tensor& branch,
                                                  const Tensor& gate, const Tensor& idx,
                                                  const Tensor* weight, float eps,
                                                  const Tensor& scale, const Tensor& shift,
                                                  Fp8ActScaling act);

// A model's projection weight that may have been quantized at load (--dit-dtype fp8,
// --text-encoder-dtype fp8): `w` is then E4M3 [N, K] and `scale` its per-channel scales [N], or
// its 128 x 128 block scales [ceil(N/128), ceil(K/128)] (the scale's rank tells them apart).
// Replaces a float w by its E4M3 values and fills `scale`, where w lives; the float tensor is
// released here (when nothing else holds it), before the caller quantizes the next one.
void quantize_projection_fp8(Tensor& w, Tensor& scale,
                             Fp8WeightScaling scaling = Fp8WeightScaling::kPerChannel);
// The FP8 weight a projection's (w, scale) pair stands for, and the activation scaling its GEMM
// pairs with on the tensor cores: per token for per-channel weights, per group for blocks.
Fp8Weight projection_fp8(const Tensor& w, const Tensor& scale);
Fp8ActScaling projection_act_scaling(const Tensor& scale);
// x W^T (+ bias): the FP8 GEMM with activations quantized as the weight pairs with for an E4M3
// w, else ops::linear.
Tensor linear_projection(const Tensor& x, const Tensor& w, const Tensor& scale,
                         const Tensor* bias = nullptr);
// The same for several projections of one x: `xq` is x quantized once (made on the first FP8
// weight that needs it, then reused by the weights that pair with the same activation scaling);
// float weights read x itself.
Tensor linear_projection(const Tensor& x, Fp8Activation& xq, const Tensor& w, const Tensor& scale,
                         const Tensor* bias = nullptr);

}  // namespace h3::ops
