// The safetensors reader: header validation and the memory-mapped file.
#include "io/safetensors.h"

#include <cstdlib>
#include <cstring>

#include "core/status.h"
#include "io/mmap_file.h"
#include "io/safetensors_header.h"

namespace h3::io {

namespace {

// H3_SAFETENSORS_FAST=0 sends every header through the JSON parser alone, so a difference between
// the two parsers can be ruled in or out without a rebuild.
bool header_fast_path_disabled() {
  static const bool disabled = [] {
    const char* env = std::getenv("H3_SAFETENSORS_FAST");
    return env && std::strcmp(env, "0") == 0;
  }();
  return disabled;
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
  std::vector<TensorInfo> out;
  std::map<std::string, std::string> meta;
  const uint64_t data_len = file_size - data_start;
  if (header_fast_path_disabled() ||
      !parse_header_fast(data, size, data_start, data_len, label, &out, &meta)) {
    parse_header_json(data, size, data_start, data_len, label, &out, &meta);
  }
  sort_and_check_spans(&out, data_start, label);
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
  f->index_.reserve(f->infos_.size());
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
