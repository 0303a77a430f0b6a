// Writing safetensors files: whole tensors, or a header over a sparse data hole.
//
// Both go through a temporary file in the destination folder that is renamed over the target only
// once complete and flushed, so a reader never sees a half-written file, even after a crash.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/status.h"
#include "io/safetensors.h"
#include "io/strict_json.h"

namespace h3::io {

namespace {

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t nbytes;
};

bool is_utf8(const std::string& s) {
  return find_invalid_utf8(reinterpret_cast<const uint8_t*>(s.data()), s.size()) == s.size();
}

void check_entries(const std::string& path, const std::vector<Entry>& entries,
                   const std::map<std::string, std::string>& metadata) {
  for (const auto& [k, v] : metadata) {
    H3_CHECK(is_utf8(k) && is_utf8(v), ErrorCode::kInvalidArgument, path, ": metadata entry '", k,
             "' is not valid UTF-8 (the header is UTF-8 JSON)");
  }
  std::set<std::string> seen;
  for (const Entry& e : entries) {
    H3_CHECK(!e.name.empty(), ErrorCode::kInvalidArgument, path, ": tensor with an empty name");
    H3_CHECK(e.name != "__metadata__", ErrorCode::kInvalidArgument, path,
             ": '__metadata__' is reserved and cannot name a tensor");
    H3_CHECK(is_utf8(e.name), ErrorCode::kInvalidArgument, path, ": tensor name '", e.name,
             "' is not valid UTF-8 (the header is UTF-8 JSON)");
    H3_CHECK(seen.insert(e.name).second, ErrorCode::kInvalidArgument, path, ": tensor '", e.name,
             "' given twice (expected unique names)");
    for (int64_t d : e.shape) {
      H3_CHECK(d >= 0, ErrorCode::kInvalidArgument, path, ": tensor '", e.name, "' has shape ",
               shape_str(e.shape), " (expected non-negative extents)");
    }
  }
}

// The header, padded with spaces so that 8 + its length is a multiple of 8 (aligned data start).
std::string build_header(const std::vector<Entry>& entries,
                         const std::map<std::string, std::string>& metadata, uint64_t* data_bytes) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const Entry& e : entries) {
    nlohmann::ordered_json t = nlohmann::ordered_json::object();
    t["dtype"] = dtype_safetensors_name(e.dtype);
    t["shape"] = e.shape;
    t["data_offsets"] = {offset, offset + e.nbytes};
    h[e.name] = std::move(t);
    offset += e.nbytes;
  }
  *data_bytes = offset;
  std::string text = h.dump();
  text.append((8 - (text.size() % 8)) % 8, ' ');
  return text;
}

// A temporary file beside the target, removed unless commit() renamed it into place.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path) : path_(path) {
    std::string tmpl = path + ".tmp-XXXXXX";
    fd_ = ::mkstemp(tmpl.data());
    if (fd_ < 0) {
      const int err = errno;
      H3_CHECK(err != ENOENT && err != ENOTDIR, ErrorCode::kNotFound, path,
               ": cannot write, the folder does not exist");
      fail(ErrorCode::kIo, path,
           ": cannot create a temporary file beside it: ", std::strerror(err));
    }
    tmp_ = tmpl;
    ::fchmod(fd_, 0644);  // mkstemp creates 0600; a checkpoint is meant to be shared
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, uint64_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (bytes > 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, 1u << 30));
      const ssize_t n = ::write(fd_, p, chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        fail(ErrorCode::kIo, path_, ": write failed: ", std::strerror(n < 0 ? errno : EIO));
      p += n;
      bytes -= static_cast<uint64_t>(n);
    }
  }
  // Extends the file to `size` bytes without writing them: the rest reads as zeros, holds no disk.
  void truncate(uint64_t size) {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      fail(ErrorCode::kIo, path_, ": cannot extend to ", size, " bytes: ", std::strerror(errno));
    }
  }
  void commit() {
    if (::fsync(fd_) != 0) fail(ErrorCode::kIo, path_, ": fsync failed: ", std::strerror(errno));
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) fail(ErrorCode::kIo, path_, ": close failed: ", std::strerror(errno));
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      fail(ErrorCode::kIo, path_, ": cannot rename ", tmp_, " into place: ", std::strerror(errno));
    }
    tmp_.clear();
  }

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
};

void write_length(AtomicFile& f, uint64_t n) {
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(n >> (8 * i));
  f.write(le, 8);
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<Entry> entries;
  entries.reserve(tensors.size());
  for (const NamedTensor& nt : tensors) {
    H3_CHECK(nt.tensor.defined(), ErrorCode::kInvalidArgument, path, ": tensor '", nt.name,
             "' is undefined (expected a tensor with storage)");
    entries.push_back({nt.name, nt.tensor.dtype(), nt.tensor.shape(), nt.tensor.nbytes()});
  }
  check_entries(path, entries, metadata);
  uint64_t data_bytes = 0;
  const std::string header = build_header(entries, metadata, &data_bytes);

  AtomicFile f(path);
  write_length(f, header.size());
  f.write(header.data(), header.size());
  // One tensor at a time on the host, so device tensors never all sit in host memory at once.
  for (const NamedTensor& nt : tensors) {
    const Tensor host =
        nt.tensor.device().is_cpu() ? nt.tensor.contiguous() : nt.tensor.to(Device::cpu());
    if (host.nbytes()) f.write(host.raw(), host.nbytes());
  }
  f.commit();
}

void write_safetensors_sparse(const std::string& path, const std::vector<TensorInfo>& infos,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<Entry> entries;
  entries.reserve(infos.size());
  for (const TensorInfo& t : infos) {
    for (int64_t d : t.shape) {
      H3_CHECK(d >= 0, ErrorCode::kInvalidArgument, path, ": tensor '", t.name, "' has shape ",
               shape_str(t.shape), " (expected non-negative extents)");
    }
    entries.push_back({t.name, t.dtype, t.shape,
                       static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype)});
  }
  check_entries(path, entries, metadata);
  uint64_t data_bytes = 0;
  const std::string header = build_header(entries, metadata, &data_bytes);

  AtomicFile f(path);
  write_length(f, header.size());
  f.write(header.data(), header.size());
  f.truncate(8 + header.size() + data_bytes);
  f.commit();
}

}  // namespace h3::io
