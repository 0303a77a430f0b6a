// Loads and stores by a run-time dtype code, for kernels whose operands may each have their own
// dtype. The code is uniform across a launch, so the switch costs no divergence.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "core/dtype.h"

namespace h3::ops::cuda {

constexpr int kCodeF32 = 0, kCodeBF16 = 1, kCodeF16 = 2, kCodeF64 = 3, kCodeI32 = 4, kCodeI64 = 5,
              kCodeU8 = 6, kCodeBool = 7;

// -1 for dtypes the CUDA ops do not handle (float8).
inline int dtype_code(DType t) {
  switch (t) {
    case DType::kF32: return kCodeF32;
    case DType::kBF16: return kCodeBF16;
    case DType::kF16: return kCodeF16;
    case DType::kF64: return kCodeF64;
    case DType::kI32: return kCodeI32;
    case DType::kI64: return kCodeI64;
    case DType::kU8: return kCodeU8;
    case DType::kBool: return kCodeBool;
    default: return -1;
  }
}

// Float dtypes only (codes 0..2).
__device__ __forceinline__ float ld(const void* p, int code, int64_t i) {
  switch (code) {
    case kCodeF32: return static_cast<const float*>(p)[i];
    case kCodeBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return __half2float(static_cast<const __half*>(p)[i]);
  }
}
__device__ __forceinline__ void st(void* p, int code, int64_t i, float v) {
  switch (code) {
    case kCodeF32: static_cast<float*>(p)[i] = v; break;
    case kCodeBF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
  }
}

// Any dtype through double (exact for every value of every supported type but large int64).
__device__ __forceinline__ double ld_any(const void* p, int code, int64_t i) {
  switch (code) {
    case kCodeF32: return static_cast<const float*>(p)[i];
    case kCodeBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case kCodeF16: return __half2float(static_cast<const __half*>(p)[i]);
    case kCodeF64: return static_cast<const double*>(p)[i];
    case kCodeI32: return static_cast<const int32_t*>(p)[i];
    case kCodeI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case kCodeU8: return static_cast<const uint8_t*>(p)[i];
    default: return static_cast<const uint8_t*>(p)[i] ? 1.0 : 0.0;
  }
}
__device__ __forceinline__ void st_any(void* p, int code, int64_t i, double v) {
  switch (code) {
    case kCodeF32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    // Narrow half types from double directly, so there is a single rounding.
    case kCodeBF16: static_cast<__nv_bfloat16*>(p)[i] = __double2bfloat16(v); break;
    case kCodeF16: static_cast<__half*>(p)[i] = __double2half(v); break;
    case kCodeF64: static_cast<double*>(p)[i] = v; break;
    case kCodeI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case kCodeI64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case kCodeU8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    default: static_cast<uint8_t*>(p)[i] = v != 0.0 ? 1 : 0; break;
  }
}

// x * sigmoid(x), as ops::silu and ops::swiglu compute it on CUDA (one definition, so that
// swiglu_fp8's products are swiglu's bit for bit).
__device__ __forceinline__ float silu_f(float v) { return v / (1.0f + expf(-v)); }

// Eight 16-bit values (bf16 or f16 by code, value 0 in the lowest half of u.x) to float32, and
// back with round-to-nearest-even: the one conversion of every eight-wide access, so a kernel that
// keeps a row's raw 16-byte chunks in registers converts exactly as ld8/st8 do.
__device__ __forceinline__ void unpack8(const uint4& u, int code, float v[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  for (int k = 0; k < 4; ++k) {
    const uint16_t lo = static_cast<uint16_t>(w[k] & 0xffffu), hi = static_cast<uint16_t>(w[k] >> 16);
    if (code == kCodeBF16) {
      v[2 * k] = __uint_as_float(static_cast<uint32_t>(lo) << 16);
      v[2 * k + 1] = __uint_as_float(static_cast<uint32_t>(hi) << 16);
    } else {
      v[2 * k] = __half2float(__ushort_as_half(lo));
      v[2 * k + 1] = __half2float(__ushort_as_half(hi));
    }
  }
}
__device__ __forceinline__ uint4 pack8(int code, const float v[8]) {
  uint32_t w[4];
  for (int k = 0; k < 4; ++k) {
    uint16_t lo, hi;
    if (code == kCodeBF16) {
      lo = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k]));
      hi = __bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k + 1]));
    } else {
      lo = __half_as_ushort(__float2half_rn(v[2 * k]));
      hi = __half_as_ushort(__float2half_rn(v[2 * k + 1]));
    }
    w[k] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Eight consecutive values of a float tensor (f32, bf16 or f16) from element i, in one or two
// 16-byte accesses: the caller guarantees i % 8 == 0 and a 16-byte aligned base (vec8_ok). Each
// value converts exactly as ld/st convert one.
__device__ __forceinline__ void ld8(const void* p, int code, int64_t i, float v[8]) {
  if (code == kCodeF32) {
    const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    const float4 a = q[0], b = q[1];
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
    v[4] = b.x;
    v[5] = b.y;
    v[6] = b.z;
    v[7] = b.w;
    return;
  }
  unpack8(*reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p) + i), code, v);
}
__device__ __forceinline__ void st8(void* p, int code, int64_t i, const float v[8]) {
  if (code == kCodeF32) {
    float4* q = reinterpret_cast<float4*>(static_cast<float*>(p) + i);
    q[0] = make_float4(v[0], v[1], v[2], v[3]);
    q[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p) + i) = pack8(code, v);
}

// r + g * b per value, as the gated residual forms it: one fused multiply-add in float32 (the
// store then rounds once). One definition for ops::gated_residual and the norm kernels that take
// the residual in front of them, so their sums are the same bits.
__device__ __forceinline__ void gated_add8(float r[8], const float g[8], const float b[8]) {
  for (int k = 0; k < 8; ++k) r[k] = fmaf(g[k], b[k], r[k]);
}

// Each value rounded to a float dtype and back, as st/st8 would store it and ld/ld8 read it.
__device__ __forceinline__ void round8(int code, float v[8]) {
  if (code == kCodeBF16) {
    for (int k = 0; k < 8; ++k) v[k] = __bfloat162float(__float2bfloat16_rn(v[k]));
  } else if (code == kCodeF16) {
    for (int k = 0; k < 8; ++k) v[k] = __half2float(__float2half_rn(v[k]));
  }
}

}  // namespace h3::ops::cuda
