#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/status.h"
#include "text/utf8.h"

namespace h3::text {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int err) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(err, buf, sizeof(buf));
  if (n < 0) return str_cat("PCRE2 error ", err);
  return std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// The reference's Oniguruma takes \s as the Unicode White_Space set; PCRE2 with UCP adds U+180E
// (MONGOLIAN VOWEL SEPARATOR, a format character since Unicode 6.3) through \h. Spelling \s out
// keeps the two engines in agreement on that character.
constexpr const char* kWhiteSpaceItems =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// Rewrites \s (in and out of character classes) and \S (outside classes) to the explicit
// White_Space set. Escapes, \Q...\E quoting and POSIX [:name:] items are stepped over; \S inside
// a class stays as PCRE2 reads it.
std::string onig_whitespace(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  size_t i = 0;
  const size_t n = pattern.size();
  while (i < n) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < n) {
      const char e = pattern[i + 1];
      if (e == 'Q') {  // literal text up to \E
        const size_t end = pattern.find("\\E", i + 2);
        const size_t stop = end == std::string::npos ? n : end + 2;
        out.append(pattern, i, stop - i);
        i = stop;
        continue;
      }
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceItems) : str_cat("[", kWhiteSpaceItems, "]");
      } else if (e == 'S' && !in_class) {
        out += str_cat("[^", kWhiteSpaceItems, "]");
      } else {
        out.append(pattern, i, 2);
      }
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      ++i;
      // A ']' right after '[' or '[^' is a literal member.
      if (i < n && pattern[i] == '^') out += pattern[i++];
      if (i < n && pattern[i] == ']') out += pattern[i++];
      continue;
    }
    if (in_class && c == '[' && i + 1 < n && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(pattern, i, end + 2 - i);
        i = end + 2;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
    ++i;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& label)
    : pattern_(pattern), code_(std::make_shared<Code>()) {
  check_utf8(pattern, label + ": regex pattern");
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  const std::string rewritten = onig_whitespace(pattern);
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (code_->code == nullptr) {
    // The rewrite can break an unusual class such as [\s-x]; the pattern as written then runs
    // unchanged (and a pattern that is itself wrong is reported as written).
    code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  }
  H3_CHECK(code_->code != nullptr, ErrorCode::kInvalidFile, label, ": regex pattern does not compile at offset ",
           err_offset, ": ", pcre2_message(err), " (pattern ", pattern, ")");
  // JIT is only a speed-up; when it is unavailable the interpreter gives the same matches.
  (void)pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view subject) const {
  std::vector<std::pair<size_t, size_t>> out;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code_->code, nullptr), &pcre2_match_data_free);
  if (!md) throw std::bad_alloc();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t n = subject.size();
  size_t start = 0;
  while (start <= n) {
    int rc = pcre2_match(code_->code, s, n, start, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's default stack is small; the interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(code_->code, s, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    H3_CHECK(rc >= 0, ErrorCode::kInvalidArgument, "pre-tokenizer regex failed on the text (",
             pcre2_message(rc), ") at byte ", start, " of a ", n, "-byte segment");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    H3_CHECK(b <= e && e <= n && b >= start, ErrorCode::kUnsupported, "pre-tokenizer regex ", pattern_,
             " reported a match outside the searched range (\\K in a lookaround is not supported)");
    if (e == b) {
      if (b >= n) break;
      const size_t len = utf8_sequence_length(subject, b);
      start = b + (len == 0 ? 1 : len);
      continue;
    }
    out.emplace_back(b, e);
    start = e;
  }
  return out;
}

}  // namespace h3::text
