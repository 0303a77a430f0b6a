// safetensors: strict reading over mmap, sharded checkpoints, and writing.
//
// Format: 8-byte little-endian header length N, N bytes of UTF-8 JSON header, then the data
// section. The header maps tensor names to {dtype, shape, data_offsets:[begin,end)} (offsets into
// the data section) plus an optional "__metadata__" object of string -> string.
//
// Validation is strict because a loader that trusts a header can be made to read out of bounds:
// header length within the file and below a sane cap, valid UTF-8 JSON object, known dtype names,
// non-negative integer shapes whose element count times dtype size equals the byte span, spans
// inside the data section, no two spans overlapping. Every error names the file (and tensor).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3::io {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte offset of the data from the start of the file
  uint64_t nbytes = 0;
};

// One .safetensors file, memory-mapped read-only. Tensors returned by tensor() borrow the mapping
// and keep it alive.
class SafetensorsFile {
 public:
  // Throws h3::Error (kNotFound, kIo or kInvalidFile) naming `path` and what was wrong.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t data_start() const { return data_start_; }  // 8 + header length
  const std::vector<TensorInfo>& tensors() const { return infos_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws kNotFound naming file+tensor
  // CPU tensor borrowing the mapped bytes (no copy).
  Tensor tensor(const std::string& name) const;
  const uint8_t* bytes(const TensorInfo& info) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  const uint8_t* map_ = nullptr;
  std::vector<TensorInfo> infos_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::weak_ptr<SafetensorsFile> self_;
};

// Parses and validates a header from memory (the fuzz target's entry point). `file_size` is the
// whole file's size, used to check spans. Throws kInvalidFile with `label` in the message.
void parse_safetensors_header(const uint8_t* data, size_t size, uint64_t file_size,
                              const std::string& label, std::vector<TensorInfo>* infos,
                              std::map<std::string, std::string>* metadata);

// A checkpoint: one file, or shards listed by `<name>.safetensors.index.json` ({"metadata": ...,
// "weight_map": {tensor: shard}}). Every shard is validated, and the weight map must agree with
// the shards' contents (no missing, no extra, no duplicated names).
class Checkpoint {
 public:
  // `path` is a .safetensors file, an .index.json file, or a folder holding exactly one of
  // `<stem>.safetensors` / `<stem>.safetensors.index.json` for some stem.
  static Checkpoint open(const std::string& path);

  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // CPU, borrowed from the mapping
  const SafetensorsFile& file_of(const std::string& name) const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  uint64_t total_bytes() const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> owner_;  // tensor name -> index into files_
};

// Writes tensors (any device is fine for CPU tensors; others are copied to CPU first) to `path`
// through a temporary file renamed at the end, so no half-written file is ever visible. Data is
// laid out in the given order; the header is padded with spaces
// so that the data section starts at a multiple of 8).
struct NamedTensor {
  std::string name;
  Tensor tensor;
};
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes a file whose header describes `infos` (offsets computed here, in order) but whose data
// section is a hole (sparse file): used to produce the released layout at full size without the
// disk space. Also atomic (temporary file + rename).
void write_safetensors_sparse(const std::string& path, const std::vector<TensorInfo>& infos,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace h3::io
