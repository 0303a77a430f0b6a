// A compiled PCRE2 pattern for the pre-tokenizer (UTF + UCP, so \s, \p{L}, \p{N} and (?i) follow
// Unicode as the reference's Oniguruma regexes do). JIT-compiled when the platform allows it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace h3::text {

class Regex {
 public:
  // Throws h3::Error(kInvalidFile) naming `label` and the PCRE2 message on a bad pattern.
  Regex(const std::string& pattern, const std::string& label);

  // Non-overlapping matches [begin, end) in byte offsets, left to right. Empty matches are
  // skipped (the next search starts one character later). `subject` must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view subject) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<Code> code_;
};

}  // namespace h3::text
