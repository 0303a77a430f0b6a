// CUDA runtime side of core/cuda_stream.h. Compiled only when the build has CUDA.
#include <cuda_runtime.h>

#include <utility>

#include "core/cuda_stream.h"
#include "core/status.h"

namespace h3 {

namespace {

void check_cuda(cudaError_t err, const char* what, int device) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  fail(ErrorCode::kInternal, what, " on cuda:", device, " failed: ", cudaGetErrorString(err));
}

void set_device(int device) {
  H3_CHECK(cudaSetDevice(device) == cudaSuccess, ErrorCode::kUnsupported, "cuda:", device,
           " is not available");
}

}  // namespace

// ---- Stream -----------------------------------------------------------------------------------

Stream Stream::create(int device, bool non_blocking) {
  set_device(device);
  cudaStream_t s = nullptr;
  check_cuda(
      cudaStreamCreateWithFlags(&s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault),
      "cudaStreamCreate", device);
  Stream out;
  out.handle_ = s;
  out.device_ = device;
  out.owned_ = true;
  return out;
}

Stream::~Stream() {
  if (owned_ && handle_) {
    cudaSetDevice(device_);
    cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
  }
}

Stream::Stream(Stream&& o) noexcept
    : handle_(std::exchange(o.handle_, nullptr)),
      device_(o.device_),
      owned_(std::exchange(o.owned_, false)) {}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    Stream tmp(std::move(*this));  // releases our stream at the end of this scope
    handle_ = std::exchange(o.handle_, nullptr);
    device_ = o.device_;
    owned_ = std::exchange(o.owned_, false);
  }
  return *this;
}

void Stream::synchronize() const {
  check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)), "cudaStreamSynchronize",
             device_);
}

bool Stream::query() const {
  const cudaError_t err = cudaStreamQuery(static_cast<cudaStream_t>(handle_));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check_cuda(err, "cudaStreamQuery", device_);
  return true;
}

void Stream::wait(const Event& e) const {
  H3_CHECK(e.valid(), ErrorCode::kInternal, "Stream::wait on an empty event");
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(handle_),
                                 static_cast<cudaEvent_t>(e.handle()), 0),
             "cudaStreamWaitEvent", device_);
}

// ---- Event ------------------------------------------------------------------------------------

Event Event::create(int device, bool timing) {
  set_device(device);
  cudaEvent_t ev = nullptr;
  check_cuda(cudaEventCreateWithFlags(&ev, timing ? cudaEventDefault : cudaEventDisableTiming),
             "cudaEventCreate", device);
  Event out;
  out.handle_ = ev;
  out.device_ = device;
  return out;
}

Event::~Event() {
  if (handle_) {
    cudaSetDevice(device_);
    cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
  }
}

Event::Event(Event&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)), device_(o.device_) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    Event tmp(std::move(*this));
    handle_ = std::exchange(o.handle_, nullptr);
    device_ = o.device_;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  H3_CHECK(valid(), ErrorCode::kInternal, "Event::record on an empty event");
  check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(handle_),
                             static_cast<cudaStream_t>(stream.handle())),
             "cudaEventRecord", device_);
}

void Event::synchronize() const {
  H3_CHECK(valid(), ErrorCode::kInternal, "Event::synchronize on an empty event");
  check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)), "cudaEventSynchronize",
             device_);
}

bool Event::query() const {
  H3_CHECK(valid(), ErrorCode::kInternal, "Event::query on an empty event");
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  check_cuda(err, "cudaEventQuery", device_);
  return true;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  H3_CHECK(start.valid() && end.valid(), ErrorCode::kInternal,
           "Event::elapsed_ms on an empty event");
  end.synchronize();
  float ms = 0.0f;
  check_cuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle_),
                                  static_cast<cudaEvent_t>(end.handle_)),
             "cudaEventElapsedTime", end.device_);
  return ms;
}

}  // namespace h3
