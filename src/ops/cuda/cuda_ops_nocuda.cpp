// Builds without CUDA: every CUDA op refuses clearly (a CUDA tensor cannot exist in such a build,
// so reaching these means a caller bypassed Tensor's own checks).
#include "core/status.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/cuda_ops.h"

namespace h3::ops::cuda {

[[noreturn]] static void no_cuda(const char* op) {
  fail(ErrorCode::kUnsupported, "ops::", op, ": this build of h3 has no CUDA support");
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias) { no_cuda("linear"); }
Tensor matmul(const Tensor& a, const Tensor& b) { no_cuda("matmul"); }
Tensor linear_residual(const Tensor&, const Tensor&, const Tensor&) { no_cuda("linear_residual"); }
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p, const Tensor* mask) { no_cuda("attention"); }
AttentionKernel attention_kernel_for(const Tensor&, const Tensor&, const Tensor&, const AttentionParams&, const Tensor*) { no_cuda("attention"); }
bool hopper_attention_available(int) { return false; }
Tensor rms_norm(const Tensor& x, const Tensor* weight, float eps) { no_cuda("rms_norm"); }
ResidualNorm layerscale_residual_rms_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor*, float, DType) { no_cuda("layerscale_residual_rms_norm"); }
Tensor layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps) { no_cuda("layer_norm"); }
Tensor group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps) { no_cuda("group_norm"); }
Tensor weight_norm(const Tensor& g, const Tensor& v) { no_cuda("weight_norm"); }
void weight_norm_into(Tensor&, const Tensor&, const Tensor&) { no_cuda("weight_norm_into"); }
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int rotary_dim) { no_cuda("rope"); }
Tensor modulate(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& idx) { no_cuda("modulate"); }
Tensor gated_residual(const Tensor& residual, const Tensor& branch, const Tensor& gate, const Tensor& idx) { no_cuda("gated_residual"); }
Tensor swiglu(const Tensor& x) { no_cuda("swiglu"); }
Tensor silu(const Tensor& x) { no_cuda("silu"); }
Tensor gelu(const Tensor& x, bool tanh_approx) { no_cuda("gelu"); }
Tensor snake(const Tensor& x, const Tensor& alpha) { no_cuda("snake"); }
Tensor snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta) { no_cuda("snake_beta"); }
Tensor anti_aliased_snake_beta(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor&, int) {
  no_cuda("anti_aliased_snake_beta");
}
Tensor add(const Tensor& a, const Tensor& b) { no_cuda("add"); }
Tensor mul(const Tensor& a, const Tensor& b) { no_cuda("mul"); }
Tensor scale(const Tensor& x, float s) { no_cuda("scale"); }
void fill_random(Tensor& x, uint64_t seed, float center, float half_width) { no_cuda("fill_random"); }
void fill_random_many(std::vector<Tensor>&, const std::vector<RandomFill>&) {
  no_cuda("fill_random_many");
}
Tensor cast(const Tensor& x, DType dtype) { no_cuda("cast"); }
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv1dParams& p) { no_cuda("conv1d"); }
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, int stride, int padding) { no_cuda("conv_transpose1d"); }
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvTranspose1dParams& p) { no_cuda("conv_transpose1d"); }
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv3dParams& p) { no_cuda("conv3d"); }
Tensor pad3d(const Tensor& x, const int pads[6], PadMode mode) { no_cuda("pad3d"); }
Tensor gather_rows(const Tensor& x, const Tensor& idx) { no_cuda("gather_rows"); }
void scatter_rows(Tensor& dst, const Tensor& idx, const Tensor& src) { no_cuda("scatter_rows"); }
Tensor concat(const std::vector<Tensor>& parts, int dim) { no_cuda("concat"); }
Tensor copy(const Tensor& x) { no_cuda("copy"); }
void copy_into(Tensor&, const Tensor&) { no_cuda("copy_into"); }
Tensor rms_norm_modulate(const Tensor& x, const Tensor* weight, float eps, const Tensor& scale, const Tensor& shift, const Tensor& idx) { no_cuda("rms_norm_modulate"); }
Tensor qk_norm_rope(const Tensor& x, const Tensor* weight, float eps, const Tensor& cos, const Tensor& sin, int rotary_dim) { no_cuda("qk_norm_rope"); }
GatedNorm gated_residual_rms_norm_modulate(const Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, const Tensor*, float, const Tensor&,
                                           const Tensor&) {
  no_cuda("gated_residual_rms_norm_modulate");
}
AttentionPath attention_path(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask) { no_cuda("attention"); }

}  // namespace h3::ops::cuda
