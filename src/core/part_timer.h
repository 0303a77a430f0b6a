// Device time of the consecutive parts of a stretch of queued work, for benchmarks that must say
// where a block's milliseconds go (h3 bench dit: GEMMs, attention and every pass between them).
// On CUDA each mark records an event on the current stream, so the parts are timed where they
// run, in their real order and sizes, without synchronizing between them; on the CPU the marks
// read the wall clock. Not for captured graphs (an event recorded during capture times nothing).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "core/cuda_stream.h"
#include "core/device.h"

namespace h3 {

class PartTimer {
 public:
  explicit PartTimer(const Device& device) : device_(device) {}

  // Starts a stretch: the next mark's part begins here.
  void begin();
  // The work queued since the previous mark (or begin) is part `name`; repeated names add up.
  void mark(const std::string& name);
  // Waits for the stretch's work and adds each part's milliseconds to `into` (by name).
  void collect(std::map<std::string, double>* into);

 private:
  Event& event(size_t i);

  Device device_;
  std::vector<Event> events_;  // reused from stretch to stretch
  std::vector<std::string> names_;
  std::vector<std::chrono::steady_clock::time_point> clock_;
  size_t used_ = 0;
};

}  // namespace h3
