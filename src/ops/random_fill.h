// The counter-based random values of ops::fill_random (benchmark weights filled where they live).
// One function, compiled for the host and the device, so that the CPU oracle and the CUDA kernel
// produce the same bits: an integer hash of (seed, index), its top 24 bits as u in [0, 1), then
// center + half_width * (2u - 1). The product half_width * (2u - 1) is exact in double (24 x 25
// significant bits), so a fused multiply-add and a separate multiply and add round identically;
// the one rounding to float happens at the end.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define H3_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define H3_HOST_DEVICE inline
#endif

namespace h3::ops {

// splitmix64's finalizer: a bijection on 64 bits with full avalanche.
H3_HOST_DEVICE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

H3_HOST_DEVICE float random_fill_value(uint64_t seed, uint64_t index, float center,
                                       float half_width) {
  const uint64_t h = mix64(seed ^ mix64(index + 0x9e3779b97f4a7c15ull));
  const double u = static_cast<double>(h >> 40) * (1.0 / 16777216.0);  // [0, 1), 24 bits
  return static_cast<float>(static_cast<double>(center) +
                            static_cast<double>(half_width) * (2.0 * u - 1.0));
}

}  // namespace h3::ops
