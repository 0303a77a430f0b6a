// Fused ops (ops.h, "fused ops"): the CPU oracle is the plain composition, so the fused CUDA
// kernels are judged against exactly the math they replace. CUDA tensors go to the fused kernels,
// which fall back to the same composition when their H3_FUSE_* switch is 0.
#include "core/status.h"
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

GatedNorm gated_residual_rms_norm_modulate(const Tensor& residual, const Tensor& branch,
                                           const Tensor& gate, const Tensor& idx,
                                           const Tensor* weight, float eps, const Tensor& scale,
                                           const Tensor& shift) {
  if (residual.defined() && residual.device().is_cuda()) {
    return cuda::gated_residual_rms_norm_modulate(residual, branch, gate, idx, weight, eps, scale,
                                                  shift);
  }
  GatedNorm r;
  r.x = gated_residual(residual, branch, gate, idx);
  r.modulated = rms_norm_modulate(r.x, weight, eps, scale, shift, idx);
  return r;
}

Tensor qk_norm_rope(const Tensor& x, const Tensor* weight, float eps, const Tensor& cos,
                    const Tensor& sin, int rotary_dim) {
  if (x.defined() && x.device().is_cuda()) {
    return cuda::qk_norm_rope(x, weight, eps, cos, sin, rotary_dim);
  }
  return rope(rms_norm(x, weight, eps), cos, sin, rotary_dim);
}

ResidualNorm layerscale_residual_rms_norm(const Tensor& x, const Tensor& branch, const Tensor& scale,
                                          const Tensor* weight, float eps, DType norm_dtype) {
  if (x.defined() && x.device().is_cuda()) {
    return cuda::layerscale_residual_rms_norm(x, branch, scale, weight, eps, norm_dtype);
  }
  H3_CHECK(x.dtype() == DType::kF32 && scale.dtype() == DType::kF32, ErrorCode::kInvalidArgument,
           "ops::layerscale_residual_rms_norm: x and scale must be float32, got ", x.desc(), " and ", scale.desc());
  const Tensor branch32 = branch.dtype() == DType::kF32 ? branch : cast(branch, DType::kF32);
  ResidualNorm r;
  r.x = add(x, mul(branch32, scale));
  const Tensor n = rms_norm(r.x, weight, eps);
  r.normed = n.dtype() == norm_dtype ? n : cast(n, norm_dtype);
  return r;
}

Tensor linear_residual(const Tensor& x, const Tensor& w, const Tensor& residual) {
  if (x.defined() && x.device().is_cuda()) return cuda::linear_residual(x, w, residual);
  return add(residual, linear(x, w));
}

}  // namespace h3::ops
