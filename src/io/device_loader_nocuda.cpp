// Builds without CUDA: there is no device to stage into.
#include "core/status.h"
#include "io/device_loader.h"

namespace h3::io::detail {

std::unique_ptr<DeviceLoader::Sink> make_cuda_sink(int device, int, size_t) {
  fail(ErrorCode::kUnsupported, "cannot load tensors to cuda:", device,
       ": this build of h3 has no CUDA support");
}

}  // namespace h3::io::detail
