#include "text/utf8.h"

#include <cstdint>
#include <cstdio>

#include "core/status.h"

namespace h3::text {
namespace {

// Allowed range of the second byte for a lead byte (Unicode Table 3-7, well-formed sequences).
// Returns false for bytes that cannot lead a multi-byte sequence.
bool second_byte_range(uint8_t lead, uint8_t* lo, uint8_t* hi, size_t* len) {
  *lo = 0x80;
  *hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    *len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    *len = 3;
    if (lead == 0xE0) *lo = 0xA0;  // no overlong forms
    if (lead == 0xED) *hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    *len = 4;
    if (lead == 0xF0) *lo = 0x90;  // no overlong forms
    if (lead == 0xF4) *hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return false;
  }
  return true;
}

// Number of bytes at s[i] that belong to a (possibly truncated) well-formed prefix: the length
// of the valid sequence when complete, otherwise the length of the maximal invalid subpart (>= 1).
size_t prefix_length(std::string_view s, size_t i, bool* complete) {
  const auto lead = static_cast<uint8_t>(s[i]);
  *complete = false;
  if (lead < 0x80) {
    *complete = true;
    return 1;
  }
  uint8_t lo = 0, hi = 0;
  size_t len = 0;
  if (!second_byte_range(lead, &lo, &hi, &len)) return 1;
  size_t k = 1;
  for (; k < len && i + k < s.size(); ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80;
    const uint8_t h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return k;
  }
  *complete = k == len;
  return k;
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  bool complete = false;
  const size_t n = prefix_length(s, i, &complete);
  return complete ? n : 0;
}

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // Fast path for ASCII runs: prompts are mostly ASCII.
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return kUtf8Valid;
}

void check_utf8(std::string_view s, std::string_view what) {
  const size_t bad = find_invalid_utf8(s);
  if (bad == kUtf8Valid) return;
  char hex[8];
  std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned>(static_cast<uint8_t>(s[bad])));
  fail(ErrorCode::kInvalidArgument, what, " is not valid UTF-8: invalid or truncated sequence at byte ",
       bad, " (byte ", hex, "); text must be UTF-8 encoded");
}

size_t utf8_decode(std::string_view s, size_t i, char32_t* cp) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  const size_t n = utf8_sequence_length(s, i);
  H3_ASSERT(n > 0);
  char32_t v = n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n; ++k) v = (v << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  *cp = v;
  return n;
}

void utf8_append(std::string* out, char32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    bool complete = false;
    const size_t n = prefix_length(bytes, i, &complete);
    if (complete) {
      out.append(bytes.substr(i, n));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
    }
    i += n;
  }
  return out;
}

}  // namespace h3::text
