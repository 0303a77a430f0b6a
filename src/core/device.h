// Where a tensor's bytes live, and the few raw memory calls core needs from the CUDA runtime.
//
// Builds without CUDA keep the same interface: cuda_available() is false and every CUDA call fails
// with ErrorCode::kUnsupported, so callers need no #ifdefs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace h3 {

enum class DeviceType : unsigned char { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::kCUDA, i}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device& o) const { return type == o.type && (is_cpu() || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu", "cuda:0"
};

// Parses "cpu", "cuda", "cuda:N"; throws kInvalidArgument naming the text otherwise.
Device parse_device(const std::string& text);

// True when this build has CUDA and at least one device is visible.
bool cuda_available();
int cuda_device_count();

// Device memory. cuda_malloc throws kOutOfMemory with the size asked for and what is free.
//
// Allocations come from the device's stream-ordered memory pool (cudaMallocAsync on the default
// stream, on which every op runs) and freed blocks stay in the pool for the next allocation:
// cudaFree synchronizes the whole device, and a model's forward makes hundreds of temporaries,
// so a plain cudaMalloc/cudaFree per tensor leaves the GPU idle between ops. Work on another
// stream that touches a fresh allocation must first wait for the default stream (the loader
// does). H3_CUDA_POOL=0 restores plain cudaMalloc/cudaFree.
void* cuda_malloc(size_t bytes, int device);
void cuda_free(void* ptr, int device) noexcept;
// Free and total bytes of a device: what the driver reports free plus what the pool holds
// unused (both are available to the next allocation). Benchmarks sample it to report peak use,
// the memory planner reads it.
void cuda_memory_info(int device, size_t* free_bytes, size_t* total_bytes);
// Returns the pool's unused blocks to the driver (after a component is released, so that other
// processes, and cudaMemGetInfo, see the memory as free).
void cuda_release_cached(int device);
// The pool's high-water mark of bytes in use since the last reset: the peak a stage needed
// (weights included), which benchmarks set beside the memory plan's estimates. 0 without the pool
// (H3_CUDA_POOL=0) or CUDA. The reset lowers the mark to what is in use now.
uint64_t cuda_pool_peak_bytes(int device);
void cuda_pool_reset_peak(int device);
// Host memory that is page-locked for fast, asynchronous copies.
void* cuda_host_alloc(size_t bytes);
void cuda_host_free(void* ptr) noexcept;

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
// Synchronous copy (used by Tensor::to; streamed loads use core/cuda_stream.h).
void cuda_copy(void* dst, const void* src, size_t bytes, CopyKind kind);
// Zeroes device memory in stream order on this thread's current stream (core/cuda_graph.h), so
// that it can be part of a captured CUDA graph.
void cuda_zero(void* dst, size_t bytes);

}  // namespace h3
