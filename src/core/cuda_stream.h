// CUDA streams and events as move-only owners (RAII), usable from code that is compiled without
// the CUDA headers: handles are opaque pointers (cast to cudaStream_t / cudaEvent_t in .cu files).
//
// In builds without CUDA every constructor fails with ErrorCode::kUnsupported, so callers need no
// #ifdefs; a default-constructed Stream is the (null) legacy default stream and is always valid to
// hold, though using it still needs CUDA.
#pragma once

namespace h3 {

class Event;

class Stream {
 public:
  Stream() = default;  // the legacy default stream of the current device, not owned
  // A new stream on `device`. non_blocking: does not synchronize with the legacy default stream.
  static Stream create(int device, bool non_blocking = true);
  ~Stream();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void* handle() const { return handle_; }  // cudaStream_t
  int device() const { return device_; }
  bool owned() const { return owned_; }

  void synchronize() const;         // blocks until all queued work finished
  bool query() const;               // true when all queued work finished
  void wait(const Event& e) const;  // later work on this stream waits for e

 private:
  void* handle_ = nullptr;
  int device_ = 0;
  bool owned_ = false;
};

class Event {
 public:
  Event() = default;  // empty; create() makes a real one
  // timing: the event can measure elapsed time (costs a little; off for pure synchronization).
  static Event create(int device, bool timing = true);
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  bool valid() const { return handle_ != nullptr; }
  void* handle() const { return handle_; }  // cudaEvent_t
  int device() const { return device_; }

  void record(const Stream& stream);
  void synchronize() const;
  bool query() const;  // true when the recorded work finished
  // Milliseconds between two recorded timing events (waits for `end`).
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

}  // namespace h3
