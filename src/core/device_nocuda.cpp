// Stand-ins for core/device.h in builds without CUDA: every device call says so clearly.
#include "core/device.h"
#include "core/status.h"

namespace h3 {

[[noreturn]] static void no_cuda() {
  fail(ErrorCode::kUnsupported, "this build of h3 has no CUDA support (rebuild with nvcc present)");
}

int cuda_device_count() { return 0; }
bool cuda_available() { return false; }
void* cuda_malloc(size_t, int) { no_cuda(); }
void cuda_free(void*, int) noexcept {}
void cuda_memory_info(int, size_t*, size_t*) { no_cuda(); }
void cuda_release_cached(int) {}
uint64_t cuda_pool_peak_bytes(int) { return 0; }
void cuda_pool_reset_peak(int) {}
void* cuda_host_alloc(size_t) { no_cuda(); }
void cuda_host_free(void*) noexcept {}
void cuda_copy(void*, const void*, size_t, CopyKind) { no_cuda(); }
void cuda_zero(void*, size_t) { no_cuda(); }

}  // namespace h3
