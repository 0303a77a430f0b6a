#include "core/part_timer.h"

#include "core/status.h"

namespace h3 {

Event& PartTimer::event(size_t i) {
  while (events_.size() <= i) events_.push_back(Event::create(device_.index));
  return events_[i];
}

void PartTimer::begin() {
  used_ = 0;
  names_.clear();
  clock_.clear();
  if (device_.is_cuda()) {
    event(0).record(Stream());
  } else {
    clock_.push_back(std::chrono::steady_clock::now());
  }
  used_ = 1;
}

void PartTimer::mark(const std::string& name) {
  H3_CHECK(used_ > 0, ErrorCode::kInternal, "PartTimer::mark('", name, "') before begin()");
  if (device_.is_cuda()) {
    event(used_).record(Stream());
  } else {
    clock_.push_back(std::chrono::steady_clock::now());
  }
  names_.push_back(name);
  ++used_;
}

void PartTimer::collect(std::map<std::string, double>* into) {
  for (size_t i = 0; i < names_.size(); ++i) {
    const double ms = device_.is_cuda()
                          ? static_cast<double>(Event::elapsed_ms(events_[i], events_[i + 1]))
                          : std::chrono::duration<double, std::milli>(clock_[i + 1] - clock_[i]).count();
    (*into)[names_[i]] += ms;
  }
  names_.clear();
  clock_.clear();
  used_ = 0;
}

}  // namespace h3
