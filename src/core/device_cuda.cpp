// CUDA runtime side of core/device.h. Compiled only when the build has CUDA.
#include <cuda_runtime.h>

#include "core/device.h"
#include "core/status.h"

namespace h3 {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

void* cuda_malloc(size_t bytes, int device) {
  H3_CHECK(cudaSetDevice(device) == cudaSuccess, ErrorCode::kUnsupported, "cuda:", device,
           " is not available");
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail(ErrorCode::kOutOfMemory, "cuda:", device, ": cannot allocate ", bytes, " bytes (",
         free_b >> 20, " MiB free of ", total_b >> 20, " MiB): ", cudaGetErrorString(err));
  }
  return p;
}

void cuda_free(void* ptr, int device) noexcept {
  if (!ptr) return;
  cudaSetDevice(device);
  cudaFree(ptr);
}

void cuda_memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  H3_CHECK(cudaSetDevice(device) == cudaSuccess, ErrorCode::kUnsupported, "cuda:", device,
           " is not available");
  const cudaError_t err = cudaMemGetInfo(free_bytes, total_bytes);
  H3_CHECK(err == cudaSuccess, ErrorCode::kInternal, "cudaMemGetInfo on cuda:", device,
           " failed: ", cudaGetErrorString(err));
}

void* cuda_host_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCode::kOutOfMemory, "cannot allocate ", bytes, " bytes of pinned host memory: ",
         cudaGetErrorString(err));
  }
  return p;
}

void cuda_host_free(void* ptr) noexcept {
  if (ptr) cudaFreeHost(ptr);
}

void cuda_copy(void* dst, const void* src, size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
  const cudaError_t err = cudaMemcpy(dst, src, bytes, k);
  H3_CHECK(err == cudaSuccess, ErrorCode::kInternal, "cudaMemcpy of ", bytes,
           " bytes failed: ", cudaGetErrorString(err));
}

}  // namespace h3
