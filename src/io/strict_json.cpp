#include "io/strict_json.h"

#include <cstring>
#include <set>
#include <vector>

#include "core/status.h"

namespace h3::io {

size_t utf8_sequence_length(const uint8_t* data, size_t left) {
  const uint8_t c = data[0];
  if (c < 0x80) return 1;
  // Lead byte: number of continuation bytes and the allowed range of the second byte (which is
  // where overlong forms, surrogates and values past U+10FFFF show up; RFC 3629 section 4).
  size_t extra = 0;
  uint8_t lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    extra = 1;
  } else if (c == 0xe0) {
    extra = 2, lo = 0xa0;
  } else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) {
    extra = 2;
  } else if (c == 0xed) {
    extra = 2, hi = 0x9f;
  } else if (c == 0xf0) {
    extra = 3, lo = 0x90;
  } else if (c >= 0xf1 && c <= 0xf3) {
    extra = 3;
  } else if (c == 0xf4) {
    extra = 3, hi = 0x8f;
  } else {
    return 0;
  }
  if (left <= extra) return 0;
  if (data[1] < lo || data[1] > hi) return 0;
  for (size_t k = 2; k <= extra; ++k) {
    if ((data[k] & 0xc0) != 0x80) return 0;
  }
  return extra + 1;
}

size_t find_invalid_utf8(const uint8_t* data, size_t size) {
  size_t i = 0;
  while (i < size) {
    if (data[i] < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(data + i, size - i);
    if (n == 0) return i;
    i += n;
  }
  return size;
}

const char* json_type_name(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "object";
    case nlohmann::json::value_t::array:
      return "array";
    case nlohmann::json::value_t::string:
      return "string";
    case nlohmann::json::value_t::boolean:
      return "boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "integer";
    case nlohmann::json::value_t::number_float:
      return "number";
    case nlohmann::json::value_t::binary:
      return "binary";
    case nlohmann::json::value_t::discarded:
      return "nothing";
  }
  return "?";
}

nlohmann::json parse_strict_json(const uint8_t* data, size_t size, const std::string& label,
                                 const std::string& what, int max_depth) {
  const size_t bad = find_invalid_utf8(data, size);
  if (bad != size) {
    fail(ErrorCode::kInvalidFile, label, ": ", what, " is not valid UTF-8 (byte 0x", std::hex,
         static_cast<int>(data[bad]), std::dec, " at offset ", bad, ")");
  }
  // The parser takes a NUL byte for the end of input and would ignore whatever follows it; raw NUL
  // is never valid JSON text (RFC 8259 section 7 requires control characters to be escaped).
  if (const void* nul = std::memchr(data, 0, size)) {
    fail(ErrorCode::kInvalidFile, label, ": ", what, " is not valid JSON (NUL byte at offset ",
         static_cast<const uint8_t*>(nul) - data, ")");
  }
  // One entry per open container: the keys seen so far for an object, nothing for an array.
  struct Open {
    bool is_object;
    std::set<std::string> keys;
  };
  std::vector<Open> open;
  std::string path_hint;  // the key whose value is being parsed at the outermost level
  using Event = nlohmann::json::parse_event_t;
  auto callback = [&](int /*depth*/, Event event, nlohmann::json& parsed) -> bool {
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        open.push_back({event == Event::object_start, {}});
        H3_CHECK(static_cast<int>(open.size()) <= max_depth, ErrorCode::kInvalidFile, label, ": ",
                 what, " nests deeper than ", max_depth, " levels (expected a flat structure)");
        break;
      case Event::object_end:
      case Event::array_end:
        if (!open.empty()) open.pop_back();
        break;
      case Event::key: {
        if (open.empty() || !open.back().is_object) break;
        const std::string& key = parsed.get_ref<const std::string&>();
        if (open.size() == 1) path_hint = key;
        if (!open.back().keys.insert(key).second) {
          if (open.size() == 1) {
            fail(ErrorCode::kInvalidFile, label, ": ", what, " has duplicate key '", key,
                 "' (expected every name once)");
          }
          fail(ErrorCode::kInvalidFile, label, ": ", what, " has duplicate key '", key,
               "' inside '", path_hint, "' (expected every key once)");
        }
        break;
      }
      case Event::value:
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(data, data + size, callback, /*allow_exceptions=*/true);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kInvalidFile, label, ": ", what, " is not valid JSON (", e.what(), ")");
  }
}

}  // namespace h3::io
