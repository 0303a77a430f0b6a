// Builds without CUDA: block streaming cannot run (DitModel refuses cpu_offload before this).
#include "core/status.h"
#include "models/h3_dit/dit_offload.h"

namespace h3::dit {

void copy_to_device_async(void*, const void*, size_t, const Stream&) {
  fail(ErrorCode::kUnsupported, "this build of h3 has no CUDA support (DiT cpu_offload needs it)");
}

}  // namespace h3::dit
