// Stand-ins for core/cuda_stream.h in builds without CUDA: nothing can be created, and the few
// calls that are reachable on empty objects say clearly that this build has no CUDA.
#include "core/cuda_stream.h"
#include "core/status.h"

namespace h3 {

[[noreturn]] static void no_cuda_streams() {
  fail(ErrorCode::kUnsupported,
       "this build of h3 has no CUDA support (streams and events need it)");
}

Stream Stream::create(int, bool) { no_cuda_streams(); }
Stream::~Stream() = default;
Stream::Stream(Stream&& o) noexcept : handle_(o.handle_), device_(o.device_), owned_(o.owned_) {
  o.handle_ = nullptr;
  o.owned_ = false;
}
Stream& Stream::operator=(Stream&& o) noexcept {
  handle_ = o.handle_;
  device_ = o.device_;
  owned_ = o.owned_;
  o.handle_ = nullptr;
  o.owned_ = false;
  return *this;
}
void Stream::synchronize() const { no_cuda_streams(); }
bool Stream::query() const { no_cuda_streams(); }
void Stream::wait(const Event&) const { no_cuda_streams(); }

Event Event::create(int, bool) { no_cuda_streams(); }
Event::~Event() = default;
Event::Event(Event&& o) noexcept : handle_(o.handle_), device_(o.device_) { o.handle_ = nullptr; }
Event& Event::operator=(Event&& o) noexcept {
  handle_ = o.handle_;
  device_ = o.device_;
  o.handle_ = nullptr;
  return *this;
}
void Event::record(const Stream&) { no_cuda_streams(); }
void Event::synchronize() const { no_cuda_streams(); }
bool Event::query() const { no_cuda_streams(); }
float Event::elapsed_ms(const Event&, const Event&) { no_cuda_streams(); }

}  // namespace h3
