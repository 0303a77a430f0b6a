// Header text to TensorInfos: the entry checks, the nlohmann::json parser, and the sort into data
// order with the overlap check.
#include "io/safetensors_header.h"

#include <algorithm>
#include <limits>

#include "core/status.h"
#include "io/strict_json.h"

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
