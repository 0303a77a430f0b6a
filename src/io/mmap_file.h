// A whole file mapped read-only into memory.
//
// Weights are read through the mapping rather than copied, so a checkpoint costs page cache, not
// heap. Tensors that borrow the bytes hold a shared_ptr to the MappedFile, which unmaps only when
// the last of them is gone. The mapping is PROT_READ: borrowed bytes are read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace h3::io {

class MappedFile {
 public:
  // Maps `path` (a regular file). Throws kNotFound when it does not exist, kIo when it cannot be
  // opened or mapped, kInvalidFile when it is not a regular file; messages name the path.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace h3::io
