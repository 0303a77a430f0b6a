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
Tensor linear_fp8(const Fp8Activation& x, const Fp8Weight& w, const Tensor* bias);

// `h3 bench fp8 --algos N`: cuBLASLt's first N heuristic choices for the FP8 GEMM of x and w
// (bf16 output, no bias; the tensor-core shapes only), each timed (median of `iters`), in the
// heuristic's order: what the cached first choice leaves on the table. `fast_accum` times the
// kernels without periodic float32 promotion of the accumulator (not what linear_fp8 runs).
struct Fp8AlgoTiming {
  int index = 0;      // position in the heuristic's list (0: what linear_fp8 runs)
  double ms = 0.0;
  int tile = -1, stages = -1, split_k = -1, cluster = -1;  // cuBLASLt's config ids
  bool fast_accum = false;
};
std::vector<Fp8AlgoTiming> sweep_linear_fp8(const Fp8Activation& x, const Fp8Weight& w, int count,
                                            int iters, bool fast_accum);

// Whether linear_fp8 takes the FP8 tensor-core path for these shapes (per-channel weight scales,
// K a multiple of 16, N of 8); the other cases multiply the dequantized operands in float32.
bool linear_fp8_uses_tensor_cores(int64_t n, int64_t k, Fp8WeightScaling scaling);

}  // namespace h3::ops::cuda
