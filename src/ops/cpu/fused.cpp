// Fused ops (ops.h, "fused ops"): the CPU oracle is the plain composition, so the fused CUDA
// kernels are judged against exactly the math they replace. CUDA tensors go to the fused kernels,
// which fall back to the same composition when their H3_FUSE_* switch is 0.
#include "ops/cuda/cuda_ops.h"
#include "ops/ops.h"

namespace h3::ops {

Tensor rms_norm_modulate(const Tensor& x, const Tensor* weight, float eps, const Tensor& scale,
                         const Tensor& shift, const Tensor& idx) {
  if (x.defined() && x.device().is_cuda()) {
    return cuda::rms_norm_modulate(x, weight, eps, scale, shift, idx);
  }
  return modulate(rms_norm(x, weight, eps), scale, shift, idx);
}

Tensor qk_norm_rope(const Tensor& x, const Tensor* weight, float eps, const Tensor& cos,
                    const Tensor& sin, int rotary_dim) {
  if (x.defined() && x.device().is_cuda()) {
    return cuda::qk_norm_rope(x, weight, eps, cos, sin, rotary_dim);
  }
  return rope(rms_norm(x, weight, eps), cos, sin, rotary_dim);
}

Tensor linear_residual(const Tensor& x, const Tensor& w, const Tensor& residual) {
  if (x.defined() && x.device().is_cuda()) return cuda::linear_residual(x, w, residual);
  return add(residual, linear(x, w));
}

}  // namespace h3::ops
