// NVTX ranges for Nsight Systems timelines: H3_NVTX_RANGE("dit.block") opens a range that closes
// at the end of the enclosing scope.
//
// Active only in builds with NVTX (H3_WITH_NVTX, set by CMake when CUDA::nvtx3 exists) and when the
// environment variable H3_NVTX=1 at the first range; otherwise a range costs one branch on a
// cached flag (builds without NVTX compile it away entirely).
#pragma once

#include <cstdint>

#if defined(H3_WITH_NVTX)
#include <nvtx3/nvToolsExt.h>

#include <cstdlib>
#include <cstring>
#endif

namespace h3 {

#if defined(H3_WITH_NVTX)
inline bool nvtx_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("H3_NVTX");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

// Start/end ranges need not nest (receipt stages may end out of order); 0 means "none".
inline uint64_t nvtx_range_start(const char* name) {
  return nvtx_enabled() ? static_cast<uint64_t>(nvtxRangeStartA(name)) : 0;
}
inline void nvtx_range_end(uint64_t id) {
  if (id) nvtxRangeEnd(static_cast<nvtxRangeId_t>(id));
}

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) : on_(nvtx_enabled()) {
    if (on_) nvtxRangePushA(name);
  }
  ~NvtxRange() {
    if (on_) nvtxRangePop();
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  bool on_;
};
#else
inline bool nvtx_enabled() { return false; }
inline uint64_t nvtx_range_start(const char*) { return 0; }
inline void nvtx_range_end(uint64_t) {}

class NvtxRange {
 public:
  explicit NvtxRange(const char*) {}
};
#endif

}  // namespace h3

#define H3_NVTX_CAT_INNER(a, b) a##b
#define H3_NVTX_CAT(a, b) H3_NVTX_CAT_INNER(a, b)
#if defined(H3_WITH_NVTX)
#define H3_NVTX_RANGE(name) const ::h3::NvtxRange H3_NVTX_CAT(h3_nvtx_range_, __LINE__)(name)
#else
#define H3_NVTX_RANGE(name) static_cast<void>(0)
#endif
