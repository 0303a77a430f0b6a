// Without CUDA the video VAE assembly kernels do not exist; callers take the host/op paths.
#include "core/status.h"
#include "ops/cuda/vae_assemble.h"

namespace h3::ops::cuda {

void vae_assemble_frames(const Tensor&, int64_t, const Tensor&, int64_t, int64_t, const Tensor*, int64_t,
                         const std::vector<float>&, const std::vector<float>&) {
  fail(ErrorCode::kUnsupported, "vae_assemble_frames: built without CUDA");
}

Tensor vae_frames_to_uint8(const Tensor&, const float[3], const float[3]) {
  fail(ErrorCode::kUnsupported, "vae_frames_to_uint8: built without CUDA");
}

Tensor vae_stitch_tiles(const std::vector<Tensor>&, int64_t, int64_t, const std::vector<int64_t>&,
                        const std::vector<int64_t>&) {
  fail(ErrorCode::kUnsupported, "vae_stitch_tiles: built without CUDA");
}

Tensor vae_layerscale_residual(const Tensor&, const Tensor&, const Tensor&) {
  fail(ErrorCode::kUnsupported, "vae_layerscale_residual: built without CUDA");
}

}  // namespace h3::ops::cuda
