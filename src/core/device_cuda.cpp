// CUDA runtime side of core/device.h. Compiled only when the build has CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/cuda_graph.h"
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

namespace {

constexpr int kMaxDevices = 64;

// Whether allocations go through the device's memory pool (read once; H3_CUDA_POOL=0: no).
bool use_pool() {
  static const bool on = [] {
    const char* e = std::getenv("H3_CUDA_POOL");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

// The device's default pool, set up once to keep freed memory (release threshold: unlimited)
// instead of returning it to the driver at every synchronization.
cudaMemPool_t pool_of(int device) {
  static std::once_flag once[kMaxDevices];
  static cudaMemPool_t pools[kMaxDevices] = {};
  H3_CHECK(device >= 0 && device < kMaxDevices, ErrorCode::kUnsupported, "cuda:", device,
           " is beyond the ", kMaxDevices, " devices supported");
  std::call_once(once[device], [device] {
    cudaMemPool_t p = nullptr;
    if (cudaDeviceGetDefaultMemPool(&p, device) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &keep);
    pools[device] = p;
  });
  return pools[device];
}

// Allocations, frees and fills follow this thread's current stream: the legacy default stream,
// or a CUDA graph's capture stream while one records (core/cuda_graph.h).
cudaStream_t work_stream() {
  void* s = current_cuda_stream();
  return s ? static_cast<cudaStream_t>(s) : cudaStreamLegacy;
}

uint64_t pool_unused_bytes(int device) {
  if (!use_pool()) return 0;
  cudaMemPool_t p = pool_of(device);
  if (!p) return 0;
  uint64_t reserved = 0, used = 0;
  if (cudaMemPoolGetAttribute(p, cudaMemPoolAttrReservedMemCurrent, &reserved) != cudaSuccess ||
      cudaMemPoolGetAttribute(p, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return reserved > used ? reserved - used : 0;
}

}  // namespace

void* cuda_malloc(size_t bytes, int device) {
  H3_CHECK(cudaSetDevice(device) == cudaSuccess, ErrorCode::kUnsupported, "cuda:", device,
           " is not available");
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  cudaError_t err = cudaSuccess;
  if (use_pool() && pool_of(device)) {
    err = cudaMallocAsync(&p, bytes, work_stream());
    if (err != cudaSuccess) {
      // The pool may hold free blocks too fragmented for this size: give them back and retry.
      cudaGetLastError();
      cuda_release_cached(device);
      err = cudaMallocAsync(&p, bytes, work_stream());
    }
  } else {
    err = cudaMalloc(&p, bytes);
  }
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
  if (use_pool() && pool_of(device)) {
    cudaFreeAsync(ptr, work_stream());
  } else {
    cudaFree(ptr);
  }
}

void cuda_memory_info(int device, size_t* free_bytes, size_t* total_bytes) {
  H3_CHECK(cudaSetDevice(device) == cudaSuccess, ErrorCode::kUnsupported, "cuda:", device,
           " is not available");
  const cudaError_t err = cudaMemGetInfo(free_bytes, total_bytes);
  H3_CHECK(err == cudaSuccess, ErrorCode::kInternal, "cudaMemGetInfo on cuda:", device,
           " failed: ", cudaGetErrorString(err));
  *free_bytes += static_cast<size_t>(pool_unused_bytes(device));
}

void cuda_release_cached(int device) {
  if (!use_pool() || device < 0 || device >= kMaxDevices) return;
  cudaMemPool_t p = pool_of(device);
  if (!p) return;
  cudaSetDevice(device);
  // Blocks freed on the stream are reusable only once the stream has passed the free.
  cudaDeviceSynchronize();
  cudaMemPoolTrimTo(p, 0);
  cudaGetLastError();
}

uint64_t cuda_pool_peak_bytes(int device) {
  if (!use_pool() || device < 0 || device >= kMaxDevices) return 0;
  cudaMemPool_t p = pool_of(device);
  uint64_t high = 0;
  if (!p || cudaMemPoolGetAttribute(p, cudaMemPoolAttrUsedMemHigh, &high) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  // CUDA graphs allocate from their own pool (core/cuda_graph.h); both count. The sum bounds the
  // true peak from above: the two high-water marks need not fall at the same moment.
  uint64_t graph_high = 0;
  if (cudaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrUsedMemHigh, &graph_high) !=
      cudaSuccess) {
    cudaGetLastError();
    graph_high = 0;
  }
  return high + graph_high;
}

void cuda_pool_reset_peak(int device) {
  if (!use_pool() || device < 0 || device >= kMaxDevices) return;
  cudaMemPool_t p = pool_of(device);
  if (!p) return;
  // The only value the attributes accept is 0, which resets them to the current use.
  uint64_t zero = 0;
  cudaMemPoolSetAttribute(p, cudaMemPoolAttrUsedMemHigh, &zero);
  cudaDeviceSetGraphMemAttribute(device, cudaGraphMemAttrUsedMemHigh, &zero);
  cudaGetLastError();
}

void* cuda_host_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    // No GPU or no driver is not a memory shortage: a CUDA build on a machine without a GPU.
    const bool no_cuda = err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
                         err == cudaErrorInitializationError;
    fail(no_cuda ? ErrorCode::kUnsupported : ErrorCode::kOutOfMemory, "cannot allocate ", bytes,
         " bytes of pinned host memory: ", cudaGetErrorString(err));
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

void cuda_zero(void* dst, size_t bytes) {
  if (bytes == 0) return;
  const cudaError_t err = cudaMemsetAsync(dst, 0, bytes, work_stream());
  H3_CHECK(err == cudaSuccess, ErrorCode::kInternal, "cudaMemsetAsync of ", bytes,
           " bytes failed: ", cudaGetErrorString(err));
}

}  // namespace h3
