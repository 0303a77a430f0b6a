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
//
// Choices where the format leaves room:
// - Gaps between spans and bytes after the last span are accepted (the reference writer leaves
//   none, but they cannot make a read go out of bounds); overlapping spans are rejected, because
//   two tensors sharing bytes is either corruption or an attack on a loader that writes in place.
// - Keys must be unique within every object of the header (JSON parsers would otherwise keep one
//   of two tensors with the same name silently), and objects nest at most 16 levels deep. Unknown
//   keys inside a tensor entry are ignored, as the reference reader does.
// - Dtype names the format defines but the engine has no DType for (I8, U16, F8_E5M2, ...) are
//   kUnsupported; names the format does not define are kInvalidFile.
// - tensors() lists tensors by data offset (then name), the order in which streaming reads them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace h3::io {

class MappedFile;

// Headers above this size are rejected before parsing (the reference reader's own limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // byte offset of the data from the start of the file
  uint64_t nbytes = 0;

  bool operator==(const TensorInfo&) const = default;
};

// One .safetensors file, memory-mapped read-only. Tensors returned by tensor() borrow the mapping
// and keep it alive.
class SafetensorsFile {
 public:
  // Throws h3::Error (kNotFound, kIo, kInvalidFile, or kUnsupported for a dtype the format has
  // but the engine lacks) naming `path` and what was wrong.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t data_start() const { return data_start_; }                // 8 + header length
  const std::vector<TensorInfo>& tensors() const { return infos_; }  // by data offset
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws kNotFound naming file+tensor
  // CPU tensor borrowing the mapped bytes (no copy); it keeps the mapping alive after this
  // handle is gone, and is read-only (the mapping is). When the bytes are not aligned to the
  // element size (possible in a valid file), an owned, aligned copy is returned instead, so that
  // typed access never reads a misaligned pointer.
  Tensor tensor(const std::string& name) const;
  // The tensor's bytes inside the mapping (info must come from this file).
  const uint8_t* bytes(const TensorInfo& info) const;

  // The name index points into infos_, so a copy would point into the original.
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

 private:
  SafetensorsFile() = default;
  std::string path_;
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  std::shared_ptr<const MappedFile> map_;
  std::vector<TensorInfo> infos_;
  // Hashed rather than ordered: opening builds it for every tensor, lookups need no order, and
  // views into infos_ spare a copy of each name.
  std::unordered_map<std::string_view, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Parses and validates a header from memory (the fuzz target's entry point). A hand-written
// single-pass parser reads the headers writers produce; anything else, and every invalid header,
// goes through nlohmann::json, which words the error (io/safetensors_header.h). `file_size` is the
// whole file's size, used to check spans. Throws kInvalidFile (kUnsupported for a dtype the
// engine lacks) with `label` in the message.
void parse_safetensors_header(const uint8_t* data, size_t size, uint64_t file_size,
                              const std::string& label, std::vector<TensorInfo>* infos,
                              std::map<std::string, std::string>* metadata);

// Validates a whole file held in memory: the 8-byte length (at least 2, at most
// kMaxSafetensorsHeaderBytes, not past the end), then the header as above. Returns the header
// length. SafetensorsFile::open goes through here, so fuzzing this covers the reader.
uint64_t parse_safetensors_bytes(const uint8_t* file, uint64_t file_size, const std::string& label,
                                 std::vector<TensorInfo>* infos,
                                 std::map<std::string, std::string>* metadata);

// A checkpoint: one file, or shards listed by `<name>.safetensors.index.json` ({"metadata": ...,
// "weight_map": {tensor: shard}}). Every shard is validated, and the weight map must agree with
// the shards' contents (no missing, no extra, no duplicated names).
class Checkpoint {
 public:
  // `path` is a .safetensors file, an .index.json file, or a folder holding exactly one of
  // `<stem>.safetensors` / `<stem>.safetensors.index.json` for some stem (an index wins over the
  // shards it lists; two indexes, or several files without an index, are ambiguous: an error).
  // Shard names in an index are relative to its folder; absolute paths and ".." are rejected.
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
  // Tensor name -> index into files_. The names are views into the files' TensorInfos, which the
  // shared SafetensorsFiles keep in place for as long as any copy of this checkpoint lives.
  std::unordered_map<std::string_view, size_t> owner_;
};

// Writes tensors (any device is fine for CPU tensors; others are copied to CPU first) to `path`
// through a temporary file renamed at the end, so no half-written file is ever visible. Data is
// laid out in the given order with no gaps (so the reference reader accepts the file); the header
// is padded with spaces so that the data section starts at a multiple of 8. Names must be
// non-empty, unique and not "__metadata__".
struct NamedTensor {
  std::string name;
  Tensor tensor;
};
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes a file whose header describes `infos` (offsets computed here, in order) but whose data
// section is a hole (sparse file): used to produce the released layout at full size without the
// disk space. Also atomic (temporary file + rename). Only name, dtype and shape of `infos` are
// used; begin and nbytes are computed.
void write_safetensors_sparse(const std::string& path, const std::vector<TensorInfo>& infos,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace h3::io
