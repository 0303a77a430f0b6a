// Device memory figures for GPU tests.
#pragma once

#include <cstdint>

namespace h3::test {

// Bytes currently allocated from the device's stream-ordered pool (core/device_cuda.cpp), after
// every queued free has run. 0 when the pool is not in use or the build has no CUDA.
uint64_t pool_used_bytes(int device = 0);

}  // namespace h3::test
