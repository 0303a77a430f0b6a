// The safetensors reader: header validation and the memory-mapped file.
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/status.h"
#include "io/mmap_file.h"
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

TensorInfo parse_entry(const std::string& name, const nlohmann::json& entry, uint64_t data_start,
                       uint64_t data_len, const std::string& label) {
  const auto where = [&] { return str_cat(label, ": tensor '", name, "'"); };
  H3_CHECK(entry.is_object(), ErrorCode::kInvalidFile, where(),
           ": expected an object {dtype, shape, data_offsets}, found ", json_type_name(entry));
  TensorInfo info;
  info.name = name;

  const auto dt = entry.find("dtype");
  H3_CHECK(dt != entry.end(), ErrorCode::kInvalidFile, where(), ": missing \"dtype\"");
  H3_CHECK(dt->is_string(), ErrorCode::kInvalidFile, where(),
           ": \"dtype\" must be a string, found ", json_type_name(*dt));
  const std::string& dtype_text = dt->get_ref<const std::string&>();
  if (!dtype_from_safetensors_name(dtype_text, &info.dtype)) {
    H3_CHECK(!is_other_safetensors_dtype(dtype_text), ErrorCode::kUnsupported, where(), ": dtype ",
             dtype_text, " is not supported (expected one of ", known_dtype_list(), ")");
    fail(ErrorCode::kInvalidFile, where(), ": unknown dtype '", dtype_text, "' (expected one of ",
         known_dtype_list(), ")");
  }

  const auto sh = entry.find("shape");
  H3_CHECK(sh != entry.end(), ErrorCode::kInvalidFile, where(), ": missing \"shape\"");
  H3_CHECK(sh->is_array(), ErrorCode::kInvalidFile, where(),
           ": \"shape\" must be an array of non-negative integers, found ", json_type_name(*sh));
  // The product of the non-zero extents must fit int64 even when some extent is zero: element
  // counts and strides are computed in int64 everywhere, in any order of the dimensions.
  uint64_t nonzero = 1;
  bool has_zero = false, overflow = false;
  for (size_t d = 0; d < sh->size(); ++d) {
    uint64_t extent = 0;
    if (!as_non_negative((*sh)[d], &extent)) {
      fail(ErrorCode::kInvalidFile, where(), ": shape[", d, "] is ", (*sh)[d].dump(),
           " (expected a non-negative integer)");
    }
    info.shape.push_back(static_cast<int64_t>(extent));
    if (extent == 0) {
      has_zero = true;
    } else {
      overflow = overflow || __builtin_mul_overflow(nonzero, extent, &nonzero);
    }
  }
  const uint64_t numel = has_zero ? 0 : nonzero;
  uint64_t need = 0;
  if (overflow || nonzero > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, uint64_t{dtype_size(info.dtype)}, &need)) {
    fail(ErrorCode::kInvalidFile, where(), ": shape ", shape_str(info.shape),
         " has more elements than any file can hold");
  }

  const auto off = entry.find("data_offsets");
  H3_CHECK(off != entry.end(), ErrorCode::kInvalidFile, where(), ": missing \"data_offsets\"");
  uint64_t begin = 0, end = 0;
  if (!off->is_array() || off->size() != 2 || !as_non_negative((*off)[0], &begin) ||
      !as_non_negative((*off)[1], &end)) {
    fail(ErrorCode::kInvalidFile, where(), ": data_offsets is ", off->dump(),
         " (expected [begin, end], two non-negative integers)");
  }
  H3_CHECK(begin <= end, ErrorCode::kInvalidFile, where(), ": data_offsets [", begin, ", ", end,
           "] has begin after end (expected begin <= end)");
  H3_CHECK(end <= data_len, ErrorCode::kInvalidFile, where(), ": data_offsets [", begin, ", ", end,
           "] end past the data section, which holds ", data_len, " bytes (truncated file?)");
  H3_CHECK(end - begin == need, ErrorCode::kInvalidFile, where(), ": shape ", shape_str(info.shape),
           " of ", dtype_text, " needs ", need, " bytes but data_offsets [", begin, ", ", end,
           "] span ", end - begin, " bytes");
  info.begin = data_start + begin;
  info.nbytes = need;
  return info;
}

}  // namespace

void parse_safetensors_header(const uint8_t* data, size_t size, uint64_t file_size,
                              const std::string& label, std::vector<TensorInfo>* infos,
                              std::map<std::string, std::string>* metadata) {
  H3_CHECK(size >= 2, ErrorCode::kInvalidFile, label, ": header length ", size,
           " is too small (expected at least 2 bytes, \"{}\")");
  H3_CHECK(size <= kMaxSafetensorsHeaderBytes, ErrorCode::kInvalidFile, label, ": header length ",
           size, " exceeds the limit of ", kMaxSafetensorsHeaderBytes, " bytes");
  const uint64_t data_start = 8 + static_cast<uint64_t>(size);
  H3_CHECK(data_start <= file_size, ErrorCode::kInvalidFile, label, ": header of ", size,
           " bytes ends at byte ", data_start, ", past the end of the ", file_size, "-byte file");
  const uint64_t data_len = file_size - data_start;

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

  // Data order; then overlaps are between neighbours. Empty spans hold no bytes and overlap
  // nothing.
  std::sort(out.begin(), out.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.nbytes != b.nbytes) return a.nbytes < b.nbytes;
    return a.name < b.name;
  });
  const TensorInfo* last = nullptr;  // the non-empty span reaching furthest so far
  for (const TensorInfo& t : out) {
    if (t.nbytes == 0) continue;
    if (last && t.begin < last->begin + last->nbytes) {
      fail(ErrorCode::kInvalidFile, label, ": tensors '", last->name, "' [",
           last->begin - data_start, ", ", last->begin + last->nbytes - data_start, ") and '",
           t.name, "' [", t.begin - data_start, ", ", t.begin + t.nbytes - data_start,
           ") overlap (expected disjoint data_offsets)");
    }
    if (!last || t.begin + t.nbytes > last->begin + last->nbytes) last = &t;
  }
  *infos = std::move(out);
  *metadata = std::move(meta);
}

uint64_t parse_safetensors_bytes(const uint8_t* file, uint64_t file_size, const std::string& label,
                                 std::vector<TensorInfo>* infos,
                                 std::map<std::string, std::string>* metadata) {
  H3_CHECK(file_size >= 8, ErrorCode::kInvalidFile, label, ": file is ", file_size,
           " bytes, too short for the 8-byte header length (truncated or not safetensors)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[i];  // little-endian on every host
  H3_CHECK(n >= 2, ErrorCode::kInvalidFile, label, ": header length ", n,
           " is too small (expected at least 2 bytes, \"{}\")");
  H3_CHECK(n <= kMaxSafetensorsHeaderBytes, ErrorCode::kInvalidFile, label, ": header length ", n,
           " exceeds the limit of ", kMaxSafetensorsHeaderBytes,
           " bytes (corrupt or not safetensors)");
  H3_CHECK(n <= file_size - 8, ErrorCode::kInvalidFile, label, ": header length ", n,
           " runs past the end of the file (", file_size, " bytes, expected at least ", 8 + n, ")");
  parse_safetensors_header(file + 8, static_cast<size_t>(n), file_size, label, infos, metadata);
  return n;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->map_ = MappedFile::open(path);
  f->path_ = path;
  f->file_size_ = f->map_->size();
  const uint64_t n =
      parse_safetensors_bytes(f->map_->data(), f->file_size_, path, &f->infos_, &f->metadata_);
  f->data_start_ = 8 + n;
  for (size_t i = 0; i < f->infos_.size(); ++i) f->index_.emplace(f->infos_[i].name, i);
  return f;
}

SafetensorsFile::~SafetensorsFile() = default;

bool SafetensorsFile::has(const std::string& name) const { return index_.count(name) != 0; }

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = index_.find(name);
  H3_CHECK(it != index_.end(), ErrorCode::kNotFound, path_, ": no tensor named '", name,
           "' (file has ", infos_.size(), " tensors)");
  return infos_[it->second];
}

const uint8_t* SafetensorsFile::bytes(const TensorInfo& info) const {
  H3_CHECK(info.begin >= data_start_ && info.begin <= file_size_ &&
               info.nbytes <= file_size_ - info.begin,
           ErrorCode::kInvalidArgument, path_, ": tensor '", info.name, "' span [", info.begin,
           ", ", info.begin + info.nbytes, ") is not inside this file");
  return map_->data() + info.begin;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const uint8_t* p = bytes(ti);
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(ti.dtype) != 0) {
    Tensor t = Tensor::empty(ti.shape, ti.dtype);
    if (ti.nbytes) std::memcpy(t.raw(), p, ti.nbytes);
    return t;
  }
  return Tensor::borrow(const_cast<uint8_t*>(p), ti.shape, ti.dtype, Device::cpu(), map_);
}

}  // namespace h3::io
