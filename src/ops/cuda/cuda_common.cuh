// Shared helpers of the CUDA ops: error checks, element loads/stores through float, dtype
// dispatch, launch geometry and the fusion switches. Included by the .cu files of ops/cuda only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/cuda/cuda_util.h"

namespace h3::ops::cuda {

// ---- element conversion ------------------------------------------------------------------------
// Every kernel computes in float32 and rounds once on store (round-to-nearest-even, as the CPU
// oracle and torch do).

template <typename T>
__device__ __forceinline__ float to_f32(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v) {
  return static_cast<T>(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

// Index tensors are int32 or int64; kernels read them widened.
struct IndexPtr {
  const void* ptr = nullptr;
  bool is64 = true;
  __device__ __forceinline__ int64_t operator[](int64_t i) const {
    return is64 ? static_cast<const int64_t*>(ptr)[i] : static_cast<const int32_t*>(ptr)[i];
  }
};

// ---- launch geometry ---------------------------------------------------------------------------

inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 32) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace h3::ops::cuda

// Dispatches a float dtype (f32, bf16, f16) to a type alias T inside the body.
#define H3_DISPATCH_FLOAT(dtype, what, ...)                                                    \
  do {                                                                                         \
    switch (dtype) {                                                                           \
      case ::h3::DType::kF32: {                                                                \
        using T = float;                                                                       \
        __VA_ARGS__;                                                                           \
        break;                                                                                 \
      }                                                                                        \
      case ::h3::DType::kBF16: {                                                               \
        using T = __nv_bfloat16;                                                               \
        __VA_ARGS__;                                                                           \
        break;                                                                                 \
      }                                                                                        \
      case ::h3::DType::kF16: {                                                                \
        using T = __half;                                                                      \
        __VA_ARGS__;                                                                           \
        break;                                                                                 \
      }                                                                                        \
      default:                                                                                 \
        ::h3::fail(::h3::ErrorCode::kUnsupported, what, ": dtype ", ::h3::dtype_name(dtype),   \
                   " is not supported on CUDA (expected f32, bf16 or f16)");                   \
    }                                                                                          \
  } while (0)
