// The operation interface: every numeric operation of h3.cpp, once.
//
// Each op is a free function taking and returning Tensors. It dispatches on the device of its
// inputs: CPU tensors go to ops/cpu/ (the oracle: simple loops, float32 accumulation, float64 where
// a reduction needs it), CUDA tensors to ops/cuda/. Models call these and never branch on the
// backend. Every op has an entry in tests/ops (the backend-ops harness), which runs it on each
// available backend against the CPU.
//
// Dtype rule: outputs have the dtype of the main input (x). Inside, CPU ops widen to float32,
// compute, and round the result once to the output dtype. So a model run with bf16 activations on
// the CPU rounds exactly where a bf16 reference rounds between ops: that is the bf16-emulation
// mode, with no separate code path. Ops that fuse several reference ops (modulate, gated_residual,
// swiglu, rope) also round their intermediates to the output dtype where the reference rounds
// (h3_dit_spec.md §2.8-§2.11); for float32 outputs that is plain float32 math.
//
// Conventions: linear weights are [out, in] (y = x W^T + b). Row-indexed ops (modulate) take an
// int32 or int64 index tensor with one entry per row of x. Shapes are checked; a mismatch throws
// h3::Error (kInvalidArgument) naming the op and both shapes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3::ops {

// ---- linear algebra ---------------------------------------------------------------------------

// y[..., N] = x[..., K] @ w[N, K]^T (+ bias[N]). x may be bf16/f16/f32; w any float dtype.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias = nullptr);
// linear() over rows that are independent problems stacked, e.g. the tiles of a batched decoder
// forward: `row_starts` = {0, r1, ..., rows} (cumulative, like AttentionParams::cu_seqlens) over the
// rows of x viewed as [rows, K]. The result is linear() of all rows. The CPU runs one GEMM per
// segment, exactly the call linear() makes for that segment alone, so each segment's output equals
// linear() of its rows bit for bit whatever kernel the BLAS picks for another row count (OpenBLAS
// chooses kernels and blocking per shape, and they sum in different orders). CUDA runs one GEMM over
// all rows (the point of stacking); there a segment may differ from its own GEMM in the last bit.
Tensor linear_segmented(const Tensor& x, const Tensor& w, const Tensor* bias,
                        const std::vector<int64_t>& row_starts);
// Batched matmul: a [B, M, K] @ b [B, K, N] -> [B, M, N]; b may also be [K, N] (broadcast).
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- attention ----------------------------------------------------------------------------------

// The kernel behind ops::attention. The CPU has one (kCpu). On CUDA: kHopper, the wgmma/TMA kernel
// (a compute capability 9.0 device; f16/bf16, head dim 64 or 128, no mask); kMma, the
// mma.sync flash kernel (f16/bf16, head dim 16, 32, 64 or 128, no mask); kGeneric, any input.
// kAuto takes the first of these that accepts the inputs, unless H3_ATTN_HOPPER=0 or
// H3_ATTN_GENERIC=1 rule a kernel out; a kernel asked for by name ignores those switches.
enum class AttentionKernel { kAuto, kHopper, kMma, kGeneric, kCpu };
const char* attention_kernel_name(AttentionKernel k);  // "auto", "hopper", "mma", "generic", "cpu"
// "auto", "hopper", "mma" or "generic"; anything else throws kInvalidArgument naming `what` (a flag)
// and the choices.
AttentionKernel parse_attention_kernel(const std::string& text, const std::string& what);

struct AttentionParams {
  float scale = 0.0f;  // 0 means 1/sqrt(head_dim)
  bool causal = false;
  // Variable-length block-diagonal batch (vision tower): cumulative sequence starts, size
  // segments+1, e.g. {0, 256, 512}. Rows attend only within their segment. Empty: one segment.
  std::vector<int64_t> cu_seqlens;
  // CUDA only (the CPU has one kernel). A named kernel that cannot take the inputs throws
  // kUnsupported with the reason; it never falls back silently.
  AttentionKernel kernel = AttentionKernel::kAuto;
};

// The kernel ops::attention runs for these inputs (never kAuto; kCpu for CPU tensors). Throws as
// ops::attention would when p.kernel names a kernel the inputs cannot use.
AttentionKernel attention_kernel_for(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const AttentionParams& p = {}, const Tensor* mask = nullptr);
// Whether `kernel` can run on `device` at all: kHopper needs a compute capability 9.0 GPU and a
// build holding the sm_90a kernels; kMma and kGeneric any CUDA device; kCpu the CPU; kAuto any.
bool attention_kernel_available(AttentionKernel kernel, const Device& device);

// q [S, Hq, D], k/v [S_kv, Hkv, D] with Hq % Hkv == 0 (grouped-query: query head h reads key/value
// head h / (Hq/Hkv)). Returns [S, Hq, D]. Exact softmax (max-subtracted, float32 accumulation).
// An optional additive mask [S, S_kv] (float32, -inf to block) is applied before the softmax.
// Causal is top-left aligned (query i sees keys j <= i, as torch SDPA's is_causal); a row whose
// keys are all blocked gives zeros.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p = {},
                 const Tensor* mask = nullptr);

// ---- normalization ------------------------------------------------------------------------------

// x / sqrt(mean(x^2) + eps) * weight over the last dim; weight may be null (no affine). The
// per-head QK-norm is this op on x [S, H, D] with weight [D].
Tensor rms_norm(const Tensor& x, const Tensor* weight, float eps);
// (x - mean) / sqrt(var + eps) * weight + bias over the last dim (biased variance).
Tensor layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps);
// x [N, C, ...] in `groups` groups over (C/groups, ...), affine weight/bias [C] (may be null).
Tensor group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps);
// Legacy weight norm folded (torch.nn.utils.weight_norm, dim 0; h3_components_spec.md §3.2):
// w[i] = v[i] * (g[i] / ||v[i]||), the norm of each slice of dim 0 over all its other elements.
// g holds v.size(0) gains in any shape (stored [d0, 1, 1]). The sum of squares is accumulated in
// float64 and rounded to float32 once (the reference's float32 norm within its rounding); g / norm
// and the product are float32, as torch computes them. Output of v's shape and dtype.
Tensor weight_norm(const Tensor& g, const Tensor& v);
// The same fold written into `dst` (contiguous float32 of v's shape, on v's device), which may be
// v itself: a loaded weight folded where it lies, with no second allocation. Bit-identical to
// weight_norm.
void weight_norm_into(Tensor& dst, const Tensor& g, const Tensor& v);

// ---- position and modulation ---------------------------------------------------------------------

// Rotate-half RoPE on the first rotary_dim channels of the last dim; the rest pass through.
// x [S, H, D]; cos/sin [S, rotary_dim] (already duplicated over the two halves, as the reference
// builds them). out[:r/2] = x1*cos - x2*sin ; out[r/2:r] = x2*cos + x1*sin (per half of cos/sin).
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int rotary_dim);

// AdaLN modulation by row index: out[r] = x[r] * (1 + scale[idx[r]]) + shift[idx[r]].
// x [S, C]; scale/shift [T, C] (T table rows); idx [S].
Tensor modulate(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& idx);
// Gated residual by row index: out[r] = residual[r] + gate[idx[r]] * branch[r].
Tensor gated_residual(const Tensor& residual, const Tensor& branch, const Tensor& gate,
                      const Tensor& idx);

// ---- activations ----------------------------------------------------------------------------------

// x [..., 2F] split as [value | gate]: out = value * silu(gate), [..., F].
Tensor swiglu(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approx = false);
// Snake activations of the audio VAE (h3_components_spec.md §3.3, §3.4), x [N, C, L], per-channel
// parameters [C]. snake: x + 1/(alpha + 1e-9) * sin(alpha*x)^2 (DAC, alpha stored raw).
// snake_beta: x + 1/(exp(log_beta) + 1e-9) * sin(exp(log_alpha)*x)^2 (BigVGAN, log scale).
Tensor snake(const Tensor& x, const Tensor& alpha);
Tensor snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta);
// BigVGAN's anti-aliased SnakeBeta (Activation1d, §3.4) in one pass: x [N, C, L] -> [N, C, L] with
// depthwise low-pass filters up_filter (already times the ratio r) and down_filter, both [C, 1, K],
// K >= r. The composition it replaces, with p = K/r - 1:
//   u = conv_transpose1d(replicate_pad(x, p, p), up_filter, stride r, groups C)
//       [p*r + (K-r)/2 .. + r*L)                                       (r*L samples)
//   y = conv1d(replicate_pad(snake_beta(u), K/2 - (K even), K/2), down_filter, stride r, groups C)
// The CPU accumulates both filters in float64 and rounds u and y to float32 as that composition
// does with f64_accumulate (bit for bit at float32), keeping the 2x signal in a row buffer instead
// of five full tensors; CUDA accumulates in float32 (f64_accumulate's rule).
Tensor anti_aliased_snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta,
                               const Tensor& up_filter, const Tensor& down_filter, int ratio);

// ---- elementwise ----------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b);  // b broadcast over leading dims of a
Tensor mul(const Tensor& a, const Tensor& b);  // b broadcast over leading dims of a
Tensor scale(const Tensor& x, float s);
Tensor cast(const Tensor& x, DType dtype);  // round-to-nearest-even, any device
// Overwrites a contiguous float tensor in place with seeded uniform values in
// [center - half_width, center + half_width] (ops/random_fill.h), rounded to its dtype; the same
// bits on every backend. Benchmarks fill random weights with it where the weights live.
void fill_random(Tensor& x, uint64_t seed, float center, float half_width);
// fill_random over several tensors of one device at once: the same bits as fill_random on each
// with its own seed and range. On CUDA one kernel fills them all: a component of hundreds of
// small tensors otherwise pays a launch per tensor.
struct RandomFill {
  uint64_t seed = 0;
  float center = 0.0f, half_width = 0.0f;
};
void fill_random_many(std::vector<Tensor>& xs, const std::vector<RandomFill>& fills);

// ---- convolution ----------------------------------------------------------------------------------

struct Conv1dParams {
  int stride = 1;
  int padding = 0;  // zero padding on both sides
  int dilation = 1;
  int groups = 1;
  // CPU: accumulate every output in float64 and round once (ops/cpu/conv1d_f64_audio.cpp). The
  // audio VAE decoder amplifies float32 accumulation noise to about its 1e-5 parity bound
  // (h3_components_spec.md §3.4); other backends ignore the flag.
  bool f64_accumulate = false;
};
// x [N, Cin, L], w [Cout, Cin/groups, K], bias [Cout] or null.
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv1dParams& p);
// Transposed 1-D convolution: x [N, Cin, L], w [Cin, Cout, K].
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, int stride,
                        int padding);
// The general form (the audio VAE's anti-aliased upsampler is depthwise): w [Cin, Cout/groups, K],
// L_out = (L-1)*stride - 2*padding + dilation*(K-1) + output_padding + 1.
struct ConvTranspose1dParams {
  int stride = 1;
  int padding = 0;
  int output_padding = 0;
  int dilation = 1;
  int groups = 1;
  bool f64_accumulate = false;  // as Conv1dParams::f64_accumulate
};
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias,
                        const ConvTranspose1dParams& p);

enum class PadMode { kZeros, kReflect, kReplicate };
struct Conv3dParams {
  int stride[3] = {1, 1, 1};  // (t, h, w)
  int padding[3] = {0, 0, 0};  // symmetric, applied with pad_mode (spatial) before the conv
  PadMode pad_mode = PadMode::kZeros;
};
// x [N, Cin, T, H, W], w [Cout, Cin, kT, kH, kW]. Causal time padding is done by the caller
// (pad3d), since the VAEs pad time and space differently.
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv3dParams& p);
// Pads the last three dims: pads = {t_front, t_back, h_top, h_bottom, w_left, w_right}.
Tensor pad3d(const Tensor& x, const int pads[6], PadMode mode);

// ---- indexing and layout ----------------------------------------------------------------------------

// out[i] = x[idx[i]] along dim 0.
Tensor gather_rows(const Tensor& x, const Tensor& idx);
// dst[idx[i]] = src[i] along dim 0, in place.
void scatter_rows(Tensor& dst, const Tensor& idx, const Tensor& src);
Tensor concat(const std::vector<Tensor>& parts, int dim);
// Contiguous copy of any view (any device).
Tensor copy(const Tensor& x);
// Writes src (any view) into the existing contiguous dst of the same shape and dtype on the same
// device, in stream order: how a captured CUDA graph hands its results to buffers that outlive it.
void copy_into(Tensor& dst, const Tensor& src);

// ---- fused ops --------------------------------------------------------------------------------------
// Each equals a composition of the ops above (the CPU computes exactly that composition). On CUDA
// one kernel does the work and rounds once; H3_FUSED=0, or the op's own switch, restores the
// composition there too (h3_dit_spec.md block structure: norm1/modulate, QK-norm/RoPE).

// modulate(rms_norm(x, weight, eps), scale, shift, idx). x [S, C]. Switch: H3_FUSE_RMSNORM_MODULATE.
Tensor rms_norm_modulate(const Tensor& x, const Tensor* weight, float eps, const Tensor& scale,
                         const Tensor& shift, const Tensor& idx);
// x = gated_residual(residual, branch, gate, idx) and modulated = rms_norm_modulate(x, weight, eps,
// scale, shift, idx): a DiT block's attention residual and the norm in front of its feed-forward
// (h3_dit_spec.md §2.9 steps 4-5), where the sum is read by nothing else before the norm. On CUDA
// one pass reads the residual and the branch once and writes both results: the sum with
// gated_residual's bytes, the modulated rows with rms_norm_modulate's of it. gate, scale and
// shift are [T, C] tables. Switch: H3_FUSE_GATED_NORM.
struct GatedNorm {
  Tensor x, modulated;
};
GatedNorm gated_residual_rms_norm_modulate(const Tensor& residual, const Tensor& branch,
                                           const Tensor& gate, const Tensor& idx,
                                           const Tensor* weight, float eps, const Tensor& scale,
                                           const Tensor& shift);
// rope(rms_norm(x, weight, eps), cos, sin, rotary_dim). x [S, H, D], weight [D]. Switch:
// H3_FUSE_QKNORM_ROPE.
Tensor qk_norm_rope(const Tensor& x, const Tensor* weight, float eps, const Tensor& cos,
                    const Tensor& sin, int rotary_dim);
// add(residual, linear(x, w)): residual [..., N] with x's dtype and leading dims, w [N, K]. On CUDA
// the GEMM reads the residual in its epilogue (beta = 1) and rounds once, instead of writing the
// product and reading both back (a LoRA pair's second GEMM, dit_lora.h). Switch:
// H3_FUSE_GEMM_RESIDUAL.
Tensor linear_residual(const Tensor& x, const Tensor& w, const Tensor& residual);
// The video VAE decoder's LayerScale residual and the pre-norm after it (h3_components_spec.md
// §2.6, §2.9): x' = add(x, mul(cast(branch, f32), scale)) and normed = cast(rms_norm(x', weight,
// eps), norm_dtype). x [S, C] float32, branch [S, C] any float dtype, scale [C] float32, weight
// [C] or null. On CUDA one pass reads x and the branch once and writes both results (bit for bit
// the composition's values). Switch: H3_FUSE_RESIDUAL_NORM.
struct ResidualNorm {
  Tensor x, normed;
};
ResidualNorm layerscale_residual_rms_norm(const Tensor& x, const Tensor& branch, const Tensor& scale,
                                          const Tensor* weight, float eps, DType norm_dtype);

}  // namespace h3::ops
