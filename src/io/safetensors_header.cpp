// Header text to TensorInfos: the entry checks, the nlohmann::json parser, and the sort into data
// order with the overlap check.
#include "io/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <unordered_set>

#include "core/status.h"
#include "io/strict_json.h"
#include "text/utf8.h"

namespace h3::io {

namespace {

constexpr const char* kMetadataKey = "__metadata__";
// Top-level object (1), tensor entry (2), shape / data_offsets (3); room for ignored extras.
constexpr int kMaxHeaderDepth = 16;

// Names the safetensors format defines for which the engine has no DType: valid files we decline.
bool is_other_safetensors_dtype(const std::string& name) {
  static const char* const kOthers[] = {"I8",      "I16",     "U16",     "U32", "U64", "F8_E5M2",
                                        "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};
  for (const char* n : kOthers) {
    if (name == n) return true;
  }
  return false;
}

std::string known_dtype_list() {
  std::string out;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kF8E4M3, DType::kI64,
                  DType::kI32, DType::kU8, DType::kBool}) {
    if (!out.empty()) out += ", ";
    out += dtype_safetensors_name(t);
  }
  return out;
}

// A JSON integer that is >= 0 and fits int64 (shape entries and offsets).
bool as_non_negative(const nlohmann::json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = u;
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return false;
    *out = static_cast<uint64_t>(i);
    return true;
  }
  return false;
}

// `label` and `name` make the "<file>: tensor '<name>'" prefix of a message, built only on failure.
std::string entry_where(const std::string& label, const std::string& name) {
  return str_cat(label, ": tensor '", name, "'");
}

// The checks on an entry's fields, in the order parse_entry applies them; the hand-written
// parser runs the same steps, so both report the same complaint for the same entry.
void check_dtype(const std::string& dtype_text, const std::string& label, const std::string& name,
                 DType* out) {
  if (!dtype_from_safetensors_name(dtype_text, out)) {
    H3_CHECK(!is_other_safetensors_dtype(dtype_text), ErrorCode::kUnsupported,
             entry_where(label, name), ": dtype ", dtype_text,
             " is not supported (expected one of ", known_dtype_list(), ")");
    fail(ErrorCode::kInvalidFile, entry_where(label, name), ": unknown dtype '", dtype_text,
         "' (expected one of ", known_dtype_list(), ")");
  }
}

// Returns the byte count of `shape` in `dtype`. The product of the non-zero extents must fit int64
// even when some extent is zero: element counts and strides are computed in int64 everywhere, in
// any order of the dimensions.
uint64_t check_shape(const Shape& shape, DType dtype, const std::string& label,
                     const std::string& name) {
  uint64_t nonzero = 1;
  bool has_zero = false, overflow = false;
  for (const int64_t d : shape) {
    const auto extent = static_cast<uint64_t>(d);
    if (extent == 0) {
      has_zero = true;
    } else {
      overflow = overflow || __builtin_mul_overflow(nonzero, extent, &nonzero);
    }
  }
  const uint64_t numel = has_zero ? 0 : nonzero;
  uint64_t need = 0;
  if (overflow || nonzero > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, uint64_t{dtype_size(dtype)}, &need)) {
    fail(ErrorCode::kInvalidFile, entry_where(label, name), ": shape ", shape_str(shape),
         " has more elements than any file can hold");
  }
  return need;
}

void check_span(uint64_t begin, uint64_t end, uint64_t need, const std::string& dtype_text,
                const Shape& shape, uint64_t data_len, const std::string& label,
                const std::string& name) {
  H3_CHECK(begin <= end, ErrorCode::kInvalidFile, entry_where(label, name), ": data_offsets [",
           begin, ", ", end, "] has begin after end (expected begin <= end)");
  H3_CHECK(end <= data_len, ErrorCode::kInvalidFile, entry_where(label, name), ": data_offsets [",
           begin, ", ", end, "] end past the data section, which holds ", data_len,
           " bytes (truncated file?)");
  H3_CHECK(end - begin == need, ErrorCode::kInvalidFile, entry_where(label, name), ": shape ",
           shape_str(shape), " of ", dtype_text, " needs ", need, " bytes but data_offsets [",
           begin, ", ", end, "] span ", end - begin, " bytes");
}

TensorInfo parse_entry(const std::string& name, const nlohmann::json& entry, uint64_t data_start,
                       uint64_t data_len, const std::string& label) {
  const auto where = [&] { return entry_where(label, name); };
  H3_CHECK(entry.is_object(), ErrorCode::kInvalidFile, where(),
           ": expected an object {dtype, shape, data_offsets}, found ", json_type_name(entry));
  TensorInfo info;
  info.name = name;

  const auto dt = entry.find("dtype");
  H3_CHECK(dt != entry.end(), ErrorCode::kInvalidFile, where(), ": missing \"dtype\"");
  H3_CHECK(dt->is_string(), ErrorCode::kInvalidFile, where(),
           ": \"dtype\" must be a string, found ", json_type_name(*dt));
  const std::string& dtype_text = dt->get_ref<const std::string&>();
  check_dtype(dtype_text, label, name, &info.dtype);

  const auto sh = entry.find("shape");
  H3_CHECK(sh != entry.end(), ErrorCode::kInvalidFile, where(), ": missing \"shape\"");
  H3_CHECK(sh->is_array(), ErrorCode::kInvalidFile, where(),
           ": \"shape\" must be an array of non-negative integers, found ", json_type_name(*sh));
  for (size_t d = 0; d < sh->size(); ++d) {
    uint64_t extent = 0;
    if (!as_non_negative((*sh)[d], &extent)) {
      fail(ErrorCode::kInvalidFile, where(), ": shape[", d, "] is ", (*sh)[d].dump(),
           " (expected a non-negative integer)");
    }
    info.shape.push_back(static_cast<int64_t>(extent));
  }
  const uint64_t need = check_shape(info.shape, info.dtype, label, name);

  const auto off = entry.find("data_offsets");
  H3_CHECK(off != entry.end(), ErrorCode::kInvalidFile, where(), ": missing \"data_offsets\"");
  uint64_t begin = 0, end = 0;
  if (!off->is_array() || off->size() != 2 || !as_non_negative((*off)[0], &begin) ||
      !as_non_negative((*off)[1], &end)) {
    fail(ErrorCode::kInvalidFile, where(), ": data_offsets is ", off->dump(),
         " (expected [begin, end], two non-negative integers)");
  }
  check_span(begin, end, need, dtype_text, info.shape, data_len, label, name);
  info.begin = data_start + begin;
  info.nbytes = need;
  return info;
}

// The hand-written parser: one pass over the text, no document tree. It covers the grammar that
// writers produce (an object of {dtype, shape, data_offsets} entries in any key order, and a
// "__metadata__" object of strings) and declines everything else, valid or not, by returning
// false: unknown fields in an entry, negative zero, a byte order mark, and every error. It never
// accepts a header that parse_header_json refuses, so the JSON parser stays the one place that
// explains what is wrong, and holds the rarer shapes of valid headers.
class FastHeaderParser {
 public:
  FastHeaderParser(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  bool parse(uint64_t data_start, uint64_t data_len, const std::string& label,
             std::vector<TensorInfo>* infos, std::map<std::string, std::string>* metadata) {
    std::vector<TensorInfo> out;
    std::map<std::string, std::string> meta;
    bool seen_metadata = false;
    skip_space();
    if (!take('{')) return false;
    skip_space();
    if (!take('}')) {
      std::string key;
      do {
        skip_space();
        if (!string(&key)) return false;
        skip_space();
        if (!take(':')) return false;
        skip_space();
        if (key == kMetadataKey) {
          if (seen_metadata || !metadata_object(&meta)) return false;
          seen_metadata = true;
        } else {
          out.emplace_back();
          out.back().name = std::move(key);
          if (!entry(data_start, data_len, label, &out.back())) return false;
        }
        skip_space();
      } while (take(','));
      if (!take('}')) return false;
    }
    skip_space();
    if (p_ != end_ || has_duplicate_name(out)) return false;
    *infos = std::move(out);
    *metadata = std::move(meta);
    return true;
  }

 private:
  bool take(char c) {
    if (p_ == end_ || *p_ != static_cast<uint8_t>(c)) return false;
    ++p_;
    return true;
  }
  // JSON's four whitespace characters (RFC 8259 section 2).
  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  // A JSON string, escapes decoded. Names are plain ASCII in every writer we know, so that case
  // is one scan and one copy; the general loop handles escapes and multi-byte characters.
  bool string(std::string* out) {
    if (!take('"')) return false;
    const uint8_t* start = p_;
    while (p_ != end_ && *p_ != '"' && *p_ != '\\' && *p_ >= 0x20 && *p_ < 0x80) ++p_;
    out->assign(reinterpret_cast<const char*>(start), static_cast<size_t>(p_ - start));
    while (p_ != end_) {
      const uint8_t c = *p_;
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c < 0x20) return false;  // control characters must be escaped (RFC 8259 section 7)
      if (c == '\\') {
        if (!escape(out)) return false;
      } else if (c >= 0x80) {
        const size_t n = utf8_sequence_length(p_, static_cast<size_t>(end_ - p_));
        if (n == 0) return false;
        out->append(reinterpret_cast<const char*>(p_), n);
        p_ += n;
      } else {
        out->push_back(static_cast<char>(c));
        ++p_;
      }
    }
    return false;  // unterminated
  }

  bool hex4(uint32_t* out) {
    if (end_ - p_ < 4) return false;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const uint8_t c = *p_++;
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        return false;
      }
    }
    *out = v;
    return true;
  }

  // After a backslash. A \u escape of a UTF-16 high surrogate must be followed by one of a low
  // surrogate; a lone surrogate has no UTF-8 form (RFC 8259 section 8.2).
  bool escape(std::string* out) {
    ++p_;
    if (p_ == end_) return false;
    const uint8_t c = *p_++;
    // The single-character escapes and what they stand for, position by position.
    static constexpr std::string_view kEscaped = "\"\\/bfnrt", kMeaning = "\"\\/\b\f\n\r\t";
    if (c != 'u') {
      const size_t i = kEscaped.find(static_cast<char>(c));
      if (i == std::string_view::npos) return false;
      out->push_back(kMeaning[i]);
      return true;
    }
    uint32_t cp = 0;
    if (!hex4(&cp)) return false;
    if (cp >= 0xdc00 && cp <= 0xdfff) return false;
    if (cp >= 0xd800 && cp <= 0xdbff) {
      uint32_t low = 0;
      if (!take('\\') || !take('u') || !hex4(&low) || low < 0xdc00 || low > 0xdfff) return false;
      cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
    }
    text::utf8_append(out, static_cast<char32_t>(cp));
    return true;
  }

  // A JSON integer in [0, INT64_MAX], as as_non_negative accepts. Fractions, exponents and
  // larger values are refused by the JSON path too; "-0", which it accepts as 0, is left to it.
  bool integer(uint64_t* out) {
    if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
    uint64_t v = 0;
    if (*p_ == '0') {
      ++p_;  // JSON allows no leading zeros, so "0" stands alone
    } else {
      constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
        const uint64_t d = *p_++ - '0';
        if (v > (kMax - d) / 10) return false;
        v = v * 10 + d;
      }
    }
    if (p_ != end_ && ((*p_ >= '0' && *p_ <= '9') || *p_ == '.' || *p_ == 'e' || *p_ == 'E')) {
      return false;
    }
    *out = v;
    return true;
  }

  // "[" integers "]", each handed to `push`.
  template <typename Push>
  bool integer_array(Push&& push) {
    if (!take('[')) return false;
    skip_space();
    if (take(']')) return true;
    do {
      skip_space();
      uint64_t v = 0;
      if (!integer(&v)) return false;
      push(v);
      skip_space();
    } while (take(','));
    return take(']');
  }

  bool metadata_object(std::map<std::string, std::string>* meta) {
    if (!take('{')) return false;
    skip_space();
    if (take('}')) return true;
    std::string key, value;
    do {
      skip_space();
      if (!string(&key)) return false;
      skip_space();
      if (!take(':')) return false;
      skip_space();
      if (!string(&value)) return false;
      if (!meta->emplace(std::move(key), std::move(value)).second) return false;
      skip_space();
    } while (take(','));
    return take('}');
  }

  bool entry(uint64_t data_start, uint64_t data_len, const std::string& label, TensorInfo* info) {
    if (!take('{')) return false;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    uint64_t offsets[2] = {0, 0};
    int n_offsets = 0;
    skip_space();
    if (take('}')) return false;  // missing fields: the JSON path says which
    do {
      skip_space();
      if (!string(&key_)) return false;
      skip_space();
      if (!take(':')) return false;
      skip_space();
      if (key_ == "dtype") {
        if (has_dtype || !string(&dtype_)) return false;
        has_dtype = true;
      } else if (key_ == "shape") {
        if (has_shape) return false;
        has_shape = true;
        if (!integer_array([&](uint64_t v) { info->shape.push_back(static_cast<int64_t>(v)); })) {
          return false;
        }
      } else if (key_ == "data_offsets") {
        if (has_offsets) return false;
        has_offsets = true;
        if (!integer_array([&](uint64_t v) {
              if (n_offsets < 2) offsets[n_offsets] = v;
              ++n_offsets;
            })) {
          return false;
        }
      } else {
        return false;  // extra fields are accepted, but only by the JSON path
      }
      skip_space();
    } while (take(','));
    if (!take('}') || !has_dtype || !has_shape || !has_offsets || n_offsets != 2) return false;
    // The JSON path checks entries in name order and stops at the first complaint; a complaint
    // here hands the whole header to it, so the error reported is the same.
    try {
      check_dtype(dtype_, label, info->name, &info->dtype);
      const uint64_t need = check_shape(info->shape, info->dtype, label, info->name);
      check_span(offsets[0], offsets[1], need, dtype_, info->shape, data_len, label, info->name);
      info->begin = data_start + offsets[0];
      info->nbytes = need;
    } catch (const Error&) {
      return false;
    }
    return true;
  }

  static bool has_duplicate_name(const std::vector<TensorInfo>& infos) {
    std::unordered_set<std::string_view> seen;
    seen.reserve(infos.size());
    for (const TensorInfo& t : infos) {
      if (!seen.insert(t.name).second) return true;
    }
    return false;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  std::string key_, dtype_;  // reused across entries
};
}  // namespace

void parse_header_json(const uint8_t* data, size_t size, uint64_t data_start, uint64_t data_len,
                       const std::string& label, std::vector<TensorInfo>* infos,
                       std::map<std::string, std::string>* metadata) {
  const nlohmann::json root = parse_strict_json(data, size, label, "header", kMaxHeaderDepth);
  H3_CHECK(root.is_object(), ErrorCode::kInvalidFile, label,
           ": header must be a JSON object of tensors, found ", json_type_name(root));

  std::vector<TensorInfo> out;
  std::map<std::string, std::string> meta;
  out.reserve(root.size());
  for (const auto& [key, value] : root.items()) {
    if (key == kMetadataKey) {
      H3_CHECK(value.is_object(), ErrorCode::kInvalidFile, label,
               ": __metadata__ must be an object of strings, found ", json_type_name(value));
      for (const auto& [mk, mv] : value.items()) {
        H3_CHECK(mv.is_string(), ErrorCode::kInvalidFile, label, ": __metadata__ entry '", mk,
                 "' is ", json_type_name(mv), " (expected a string)");
        meta.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    out.push_back(parse_entry(key, value, data_start, data_len, label));
  }
  *infos = std::move(out);
  *metadata = std::move(meta);
}

bool parse_header_fast(const uint8_t* data, size_t size, uint64_t data_start, uint64_t data_len,
                       const std::string& label, std::vector<TensorInfo>* infos,
                       std::map<std::string, std::string>* metadata) {
  return FastHeaderParser(data, size).parse(data_start, data_len, label, infos, metadata);
}

void sort_and_check_spans(std::vector<TensorInfo>* infos, uint64_t data_start,
                          const std::string& label) {
  // Data order; then overlaps are between neighbours. Empty spans hold no bytes and overlap
  // nothing.
  std::sort(infos->begin(), infos->end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.nbytes != b.nbytes) return a.nbytes < b.nbytes;
    return a.name < b.name;
  });
  const TensorInfo* last = nullptr;  // the non-empty span reaching furthest so far
  for (const TensorInfo& t : *infos) {
    if (t.nbytes == 0) continue;
    if (last && t.begin < last->begin + last->nbytes) {
      fail(ErrorCode::kInvalidFile, label, ": tensors '", last->name, "' [",
           last->begin - data_start, ", ", last->begin + last->nbytes - data_start, ") and '",
           t.name, "' [", t.begin - data_start, ", ", t.begin + t.nbytes - data_start,
           ") overlap (expected disjoint data_offsets)");
    }
    if (!last || t.begin + t.nbytes > last->begin + last->nbytes) last = &t;
  }
}

}  // namespace h3::io
