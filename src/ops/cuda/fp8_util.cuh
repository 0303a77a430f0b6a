// E4M3 rounding and the per-group scale of ops/fp8.h on the device, shared by the quantization
// kernels (fp8.cu) and the ones that quantize their own output (norm.cu): one definition, so a
// fused kernel's bytes are the plain quantization's.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace h3::ops::cuda {

// E4M3 of f exactly as core/dtype's f8e4m3_from_f32: NaN and magnitudes of 480 or more are NaN,
// [448, 480) saturates to 448, everything else rounds to nearest even.
__device__ __forceinline__ uint8_t to_e4m3(float f) {
  const uint8_t sign = static_cast<uint8_t>((__float_as_uint(f) >> 24) & 0x80u);
  const float a = fabsf(f);
  if (isnan(f) || a >= 480.0f) return static_cast<uint8_t>(sign | 0x7fu);
  return static_cast<uint8_t>(sign | __nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float from_e4m3(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, __NV_E4M3)));
}

// NaN wins, as the CPU's amax: one bad value poisons its group's scale.
__device__ __forceinline__ float nan_max(float a, float b) {
  return (isnan(a) || isnan(b)) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
}

__device__ __forceinline__ float scale_of(float amax) {
  if (!isfinite(amax)) return __int_as_float(0x7fffffff);
  return amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
}

// Eight values divided by the scale s and rounded to E4M3, in memory order (value 0 in the lowest
// byte), for one 8-byte store.
__device__ __forceinline__ uint2 e4m3x8(const float v[8], float s) {
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    lo |= static_cast<uint32_t>(to_e4m3(__fdiv_rn(v[k], s))) << (8 * k);
    hi |= static_cast<uint32_t>(to_e4m3(__fdiv_rn(v[k + 4], s))) << (8 * k);
  }
  return make_uint2(lo, hi);
}

// Per-group quantization (ops/fp8.h) of eight values in each of the 16 lanes of a half warp that
// hold one run of 128 columns between them: the run's amax (NaN-propagating), its scale, written
// by the half's first lane to `scale_slot`, and this lane's eight E4M3 bytes. Every lane of the
// half must call it (lane & 16 names the half).
__device__ __forceinline__ uint2 e4m3x8_group(const float v[8], int lane, float* scale_slot) {
  float m = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) m = nan_max(m, fabsf(v[k]));
  const unsigned half = 0xffffu << (lane & 16);
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) m = nan_max(m, __shfl_xor_sync(half, m, o));
  const float s = scale_of(m);
  if ((lane & 15) == 0) *scale_slot = s;
  return e4m3x8(v, s);
}

}  // namespace h3::ops::cuda
