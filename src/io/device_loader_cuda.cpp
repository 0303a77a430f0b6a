// The CUDA staging sink of io/device_loader.h: a ring of page-locked buffers, async host-to-device
// copies on a non-blocking copy stream, and one event per buffer that says when the copies out of
// it have finished (so the reader can refill it).
#include <cuda_runtime.h>

#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "io/device_loader.h"

namespace h3::io::detail {

namespace {

void check(cudaError_t err, const char* what, int device) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  fail(ErrorCode::kInternal, "device loader: ", what, " on cuda:", device, " failed: ",
       cudaGetErrorString(err));
}

class CudaSink final : public DeviceLoader::Sink {
 public:
  CudaSink(int device, int n, size_t bytes) : device_(device), bytes_(bytes) {
    H3_CHECK(cudaSetDevice(device) == cudaSuccess, ErrorCode::kUnsupported, "cuda:", device,
             " is not available");
    try {
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate", device);
      check(cudaEventCreateWithFlags(&ordered_, cudaEventDisableTiming), "cudaEventCreate", device);
      for (int i = 0; i < n; ++i) {
        bufs_.push_back(static_cast<uint8_t*>(cuda_host_alloc(bytes)));
        cudaEvent_t e = nullptr;
        check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate", device);
        events_.push_back(e);
        pending_.push_back(false);
      }
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~CudaSink() override { destroy(); }

  int count() const override { return static_cast<int>(bufs_.size()); }
  size_t capacity() const override { return bytes_; }
  uint8_t* buffer(int i) override { return bufs_[static_cast<size_t>(i)]; }
  void wait(int i) override {
    if (!pending_[static_cast<size_t>(i)]) return;
    check(cudaEventSynchronize(events_[static_cast<size_t>(i)]), "cudaEventSynchronize", device_);
    pending_[static_cast<size_t>(i)] = false;
  }
  void begin() override {
    check(cudaEventRecord(ordered_, cudaStreamLegacy), "cudaEventRecord", device_);
    check(cudaStreamWaitEvent(stream_, ordered_, 0), "cudaStreamWaitEvent", device_);
  }
  void copy(void* dst, const uint8_t* src, size_t n, int) override {
    check(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync",
          device_);
  }
  void release(int i) override {
    check(cudaEventRecord(events_[static_cast<size_t>(i)], stream_), "cudaEventRecord", device_);
    pending_[static_cast<size_t>(i)] = true;
  }
  void finish() override {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", device_);
    for (size_t i = 0; i < pending_.size(); ++i) pending_[i] = false;
  }

 private:
  void destroy() noexcept {
    cudaSetDevice(device_);
    if (stream_) cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (ordered_) cudaEventDestroy(ordered_);
    ordered_ = nullptr;
    for (uint8_t* b : bufs_) cuda_host_free(b);
    if (stream_) cudaStreamDestroy(stream_);
    events_.clear();
    bufs_.clear();
    stream_ = nullptr;
  }
  int device_;
  size_t bytes_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ordered_ = nullptr;
  std::vector<uint8_t*> bufs_;
  std::vector<cudaEvent_t> events_;
  std::vector<bool> pending_;
};

}  // namespace

std::unique_ptr<DeviceLoader::Sink> make_cuda_sink(int device, int buffers, size_t bytes) {
  return std::make_unique<CudaSink>(device, buffers, bytes);
}

}  // namespace h3::io::detail
