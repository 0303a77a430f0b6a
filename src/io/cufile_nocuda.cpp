// Builds without CUDA: there is no device memory for cuFile to read into.
#include <filesystem>

#include "core/status.h"
#include "io/cufile.h"

namespace h3::io {

const CufileInfo& cufile_probe(int) {
  static const CufileInfo info{false, true, "", "this build of h3 has no CUDA support"};
  return info;
}

bool nvidia_fs_present() {
  std::error_code ec;
  return std::filesystem::exists("/proc/driver/nvidia-fs", ec);
}

uint64_t cufile_read_spans(const std::string& path, std::vector<ByteSpan>, int device, int) {
  fail(ErrorCode::kUnsupported, "cannot read ", path, " to cuda:", device,
       " with cuFile: this build of h3 has no CUDA support");
}

}  // namespace h3::io
