// Wall time of consecutive phases of one piece of work, for a single debug line such as
// "config 0.21 ms, checkpoint opened 1.02 ms, device read 17.80 ms (...); total 23.41 ms". A small
// component's load is mostly fixed costs, and a line that covers every millisecond of it says
// which one grew.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "core/status.h"

namespace h3 {

class PhaseTimer {
 public:
  PhaseTimer() : start_(Clock::now()), last_(start_) {}

  // Ends the phase running since the last mark (or since construction) under `name`; `note`, when
  // given, follows its time in parentheses.
  void mark(std::string_view name, std::string_view note = {}) {
    const Clock::time_point now = Clock::now();
    text_ += str_cat(text_.empty() ? "" : ", ", name, " ", ms(now - last_), " ms");
    if (!note.empty()) text_ += str_cat(" (", note, ")");
    last_ = now;
  }
  double total_ms() const { return ms(Clock::now() - start_); }
  // The phases so far and the time since construction (which includes any unmarked tail).
  std::string str() const {
    return str_cat(text_, text_.empty() ? "" : "; ", "total ", total_ms(), " ms");
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double ms(Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  }

  Clock::time_point start_, last_;
  std::string text_;
};

}  // namespace h3
