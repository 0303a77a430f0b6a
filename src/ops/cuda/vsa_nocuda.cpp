// Builds without CUDA: the CUDA VSA op refuses clearly (a CUDA tensor cannot exist in such a build).
#include "core/status.h"
#include "ops/cuda/vsa_cuda.h"

namespace h3::ops::cuda {

Tensor vsa_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor*, const VsaGeometry&,
                     const VsaOptions&, VsaTrace*, VsaStageTimes*) {
  fail(ErrorCode::kUnsupported, "ops::vsa_attention: this build of h3 has no CUDA support");
}

}  // namespace h3::ops::cuda
