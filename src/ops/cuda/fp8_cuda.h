// CUDA FP8 (E4M3) ops with the semantics of ops/fp8.h; ops/fp8.cpp dispatches here for CUDA
// tensors. In builds without CUDA, fp8_nocuda.cpp refuses each clearly.
#pragma once

#include "ops/fp8.h"

namespace h3::ops::cuda {

Fp8Weight quantize_weight_fp8(const Tensor& w, Fp8WeightScaling scaling);
Tensor dequantize_weight_fp8(const Fp8Weight& w, DType dtype);
Tensor fake_quantize_activation_fp8(const Tensor& x, Fp8ActScaling act);
Tensor linear_fp8(const Tensor& x, const Fp8Weight& w, const Tensor* bias, Fp8ActScaling act);

// Whether linear_fp8 takes the FP8 tensor-core path for these shapes (per-channel weight scales,
// K a multiple of 16, N of 8); the other cases multiply the dequantized operands in float32.
bool linear_fp8_uses_tensor_cores(int64_t n, int64_t k, Fp8WeightScaling scaling);

}  // namespace h3::ops::cuda
