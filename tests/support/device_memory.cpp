#include "support/device_memory.h"

#ifdef H3_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace h3::test {

uint64_t pool_used_bytes(int device) {
#ifdef H3_WITH_CUDA
  cudaSetDevice(device);
  cudaDeviceSynchronize();
  cudaMemPool_t pool = nullptr;
  uint64_t used = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess ||
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return used;
#else
  (void)device;
  return 0;
#endif
}

}  // namespace h3::test
