// CUDA FP8 (E4M3) ops with the semantics of ops/fp8.h; ops/fp8.cpp dispatches here for CUDA
// tensors. In builds without CUDA, fp8_nocuda.cpp refuses each clearly.
#pragma once

#include <vector>

#include "ops/fp8.h"

namespace h3::ops::cuda {

Fp8Weight quantize_weight_fp8(const Tensor& w, Fp8WeightScaling scaling);
Tensor dequantize_weight_fp8(const Fp8Weight& w, DType dtype);
Tensor fake_quantize_activation_fp8(const Tensor& x, Fp8ActScaling act);
Tensor linear_fp8(const Tensor& x, const Fp8Weight& w, const Tensor* bias, Fp8ActScaling act);
Fp8Activation quantize_activation_fp8(const Tensor& x, Fp8ActScaling act);
// The E4M3 rows [rows, cols] and a float32 scale per row of an activation that has `shape` and
// `dtype` unquantized, on `device`, not yet written: what every quantizing kernel fills.
Fp8Activation empty_fp8_rows(int64_t rows, int64_t cols, const Shape& shape, DType dtype,
                             Device device);
// The same per group: E4M3 [M4, cols] with M4 = rows rounded up to a multiple of 4 and the scales
// [ceil(cols / 128), M4] (ops/fp8.h's layout for cuBLASLt's block scaling).
Fp8Activation empty_fp8_groups(int64_t rows, int64_t cols, const Shape& shape, DType dtype,
                               Device device);
Tensor linear_fp8(const Fp8Activation& x, const Fp8Weight& w, const Tensor* bias);
Fp8Activation swiglu_fp8(const Tensor& u, Fp8ActScaling act);
Fp8Activation rms_norm_modulate_fp8(const Tensor& x, const Tensor* weight, float eps,
                                    const Tensor& scale, const Tensor& shift, const Tensor& idx,
                                    Fp8ActScaling act);
GatedNormFp8 gated_residual_rms_norm_modulate_fp8(const Tensor& residual, const Tensor& branch,
                                                  const Tensor& gate, const Tensor& idx,
                                                  const Tensor* weight, float eps,
                                                  const Tensor& scale, const Tensor& shift,
                                                  Fp8ActScaling act);
// Whether rms_norm_modulate_fp8 takes the one-kernel path (per token, or per group with C a
// multiple of 128; x [S, C] with C a multiple of 8 and x, the weight and the tables vec8_ok; the
// RMSNORM_MODULATE fusion on and FP8_NORM_MODULATE not turned off): the same bits either way.
bool rms_norm_modulate_fp8_fused(const Tensor& x, const Tensor* weight, const Tensor& scale,
                                 const Tensor& shift, Fp8ActScaling act);
// Whether swiglu_fp8 takes the one-kernel path for u (16-bit; per token with F a multiple of 8 and
// a row's products within the default 48 KiB of shared memory, or per group with F a multiple of
// 128; 16-byte aligned; the SWIGLU fusion on and FP8_SWIGLU not turned off): the same bits
// either way.
bool swiglu_fp8_fused(const Tensor& u, Fp8ActScaling act);

// `h3 bench fp8 --algos N`: cuBLASLt's first N heuristic choices for the FP8 GEMM of x and w
// (bf16 output, no bias; the tensor-core shapes with per-channel weights only), each timed (median
// of `iters`), in the heuristic's order: what the cached first choice leaves on the table.
// `fast_accum` times the kernels without periodic float32 promotion of the accumulator (not what
// linear_fp8 runs).
struct Fp8AlgoTiming {
  int index = 0;      // position in the heuristic's list (0: what linear_fp8 runs)
  double ms = 0.0;
  int tile = -1, stages = -1, split_k = -1, cluster = -1;  // cuBLASLt's config ids
  int algo_id = -1, swizzle = -1, custom = -1;
  bool fast_accum = false;
};
std::vector<Fp8AlgoTiming> sweep_linear_fp8(const Fp8Activation& x, const Fp8Weight& w, int count,
                                            int iters, bool fast_accum);
// `h3 bench fp8 --search N`: beyond the heuristic's list, every configuration cuBLASLt accepts
// for this GEMM (each algorithm id with its tiles, stages, cluster shapes and CTA swizzles, no
// split-k, float32 promotion kept), up to N of them timed (median of `iters`), fastest first.
// `index` numbers the configurations in the order they were found.
// `stats` (optional) counts what the search saw: the heuristic's choices and the algorithm ids it
// started from, the configurations tried, those whose attributes could not be set, those accepted,
// and the first refusal's status. Index -1 is the heuristic's own configuration.
struct Fp8SearchStats {
  int heuristic = 0, ids = 0, tried = 0, unset = 0, accepted = 0, first_refusal = 0;
};
std::vector<Fp8AlgoTiming> search_linear_fp8(const Fp8Activation& x, const Fp8Weight& w,
                                             int max_configs, int iters,
                                             Fp8SearchStats* stats = nullptr);

// Whether quantize_activation_fp8 takes the vectorized kernel for x (bf16 or f16 rows, per token
// with k a multiple of 8 or per group with k a multiple of 128, 16-byte aligned;
// H3_FUSE_FP8_QUANT_VEC=0 turns it off): the same bits either way.
bool quantizes_vectorized(const Tensor& x, Fp8ActScaling act);

// Whether linear_fp8 with a bias of `bias_dtype` adds it in the GEMM's epilogue for m rows of
// these shapes and output dtype (else through a float32 accumulator and a second kernel).
bool linear_fp8_bias_in_epilogue(int64_t m, int64_t n, int64_t k, DType out, DType bias_dtype,
                                 int device);

// Whether linear_fp8 takes the FP8 tensor-core path for these shapes and scalings (per-channel
// weights with per-token or per-tensor activations, or 128 x 128 weight blocks with per-group
// activations; K a multiple of 16, N of 8); the other cases multiply the dequantized operands in
// float32.
bool linear_fp8_uses_tensor_cores(int64_t n, int64_t k, Fp8WeightScaling scaling,
                                  Fp8ActScaling act);

}  // namespace h3::ops::cuda
