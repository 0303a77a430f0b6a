// Builds without CUDA: layer streaming cannot run (the models refuse their streaming options on
// a CPU device before this, and LayerStream refuses a non-CUDA device).
#include "core/layer_stream.h"
#include "core/status.h"

namespace h3 {

void copy_to_device_async(void*, const void*, size_t, const Stream&) {
  fail(ErrorCode::kUnsupported,
       "this build of h3 has no CUDA support (streaming weights from host memory needs it)");
}

}  // namespace h3
