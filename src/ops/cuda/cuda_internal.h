// Building blocks shared between the CUDA op files (not part of the op interface).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/cuda/fp8_cuda.h"

namespace h3::ops::cuda {

// One GEMM operand in row-major terms. `trans` = false: A is stored [M, K] / B is stored [K, N];
// trans = true: A is stored [K, M] / B is stored [N, K] (a linear layer's weight). `ld` is the
// stored row stride in elements; `batch_stride` the distance between batch items (0 broadcasts).
struct GemmOperand {
  const void* ptr = nullptr;
  DType dtype = DType::kF32;
  int64_t ld = 0;
  bool trans = false;
  int64_t batch_stride = 0;
};

// Row-major C[M, N] (row stride ldc) = op(A)[M, K] x op(B)[K, N] (+ bias[N]) through cuBLASLt,
// float32 accumulation (no TF32 for f32 inputs). A and B share one dtype (f32, bf16 or f16); C is
// f32, bf16 or f16; bias (may be null) has C's dtype and is added in the epilogue before rounding.
// `c_in` (may be null) is added too (beta = 1): C = c_in + op(A) op(B), with c_in laid out as C.
void gemm(int64_t M, int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b, void* c,
          DType c_dtype, int64_t ldc, int64_t c_batch_stride, int64_t batch, const void* bias,
          int device, const void* c_in = nullptr);

// Row-major C[M, N] = x_scale[m] * w_scale[n] * sum_k x_q[m, k] w_q[n, k] on the FP8 tensor cores
// (cuBLASLt, outer-vector scales): x_q E4M3 [M, K] and w_q E4M3 [N, K], both K-contiguous, with
// float32 scales on the device; float32 accumulation; C is f32, bf16 or f16, row stride N.
// Needs K % 16 == 0 and 16-byte aligned rows of C. A bias [N] (f32, bf16 or f16), if given, is
// added in cuBLASLt's epilogue in float32 before the one rounding to C's dtype. Returns false,
// computing nothing, when cuBLASLt has no kernel for the shape or that bias (the caller then
// takes another path; the answer is cached per shape).
// `block_scales`: w_scale holds one scale per 128 x 128 block of w, [ceil(N/128), L4] with L4 =
// ceil(K/128) rounded up to a multiple of 4, and x_scale one per token and 128 columns, [L, M]
// token-major; M and N multiples of 4, scales 16-byte aligned (cuBLASLt's block scaling on Hopper).
bool gemm_fp8(int64_t M, int64_t N, int64_t K, const void* x_q, const float* x_scale,
              const void* w_q, const float* w_scale, void* c, DType c_dtype, int device,
              const void* bias = nullptr, DType bias_dtype = DType::kF32,
              bool block_scales = false);
// Whether gemm_fp8 has a kernel for the shape with 256-byte aligned operands (and, given
// `bias_dtype`, a bias of that dtype in the epilogue): what a test asks to know which path ran.
bool gemm_fp8_has_kernel(int64_t M, int64_t N, int64_t K, DType c_dtype, int device,
                         const DType* bias_dtype);
// The timing sweep behind sweep_linear_fp8 (fp8_cuda.h), over gemm_fp8's description.
std::vector<Fp8AlgoTiming> sweep_gemm_fp8(int64_t M, int64_t N, int64_t K, const void* x_q,
                                          const float* x_scale, const void* w_q,
                                          const float* w_scale, void* c, DType c_dtype, int device,
                                          int count, int iters, bool fast_accum);
// The configuration search behind search_linear_fp8 (fp8_cuda.h).
std::vector<Fp8AlgoTiming> search_gemm_fp8(int64_t M, int64_t N, int64_t K, const void* x_q,
                                           const float* x_scale, const void* w_q,
                                           const float* w_scale, void* c, DType c_dtype, int device,
                                           int max_configs, int iters, Fp8SearchStats* stats);

// out[r, c] = round(in[r, c] + bias[c or r]) for a float32 `in` of rows x cols (row stride
// in_ld / out_ld); bias may be null; per_row selects bias[r] (convolutions) over bias[c].
void bias_add_cast(const float* in, int64_t in_ld, const Tensor* bias, bool per_row, void* out,
                   DType out_dtype, int64_t out_ld, int64_t rows, int64_t cols);

// Elementwise copy between two views of the same shape (any strides, same or different float
// dtypes; integer dtypes copy only to themselves). Used by copy, concat, scatter-free layouts.
void copy_strided(const Tensor& dst, const Tensor& src);

}  // namespace h3::ops::cuda
