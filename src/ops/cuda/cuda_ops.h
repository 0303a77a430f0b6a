// CUDA implementations of the ops in ops/ops.h, one per op with the same signature. ops.cpp
// dispatches here for CUDA tensors. In builds without CUDA, cuda_ops_nocuda.cpp defines each as a
// clear kUnsupported error.
#pragma once

#include "ops/ops.h"

namespace h3::ops::cuda {

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias);
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p, const Tensor* mask);
AttentionKernel attention_kernel_for(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                                     const Tensor* mask);
// Whether device `index` runs the Hopper attention kernel (compute capability 9.0, sm_90a build).
bool hopper_attention_available(int index);
Tensor rms_norm(const Tensor& x, const Tensor* weight, float eps);
Tensor layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps);
Tensor group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps);
Tensor weight_norm(const Tensor& g, const Tensor& v);
void weight_norm_into(Tensor& dst, const Tensor& g, const Tensor& v);
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int rotary_dim);
Tensor modulate(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& idx);
Tensor gated_residual(const Tensor& residual, const Tensor& branch, const Tensor& gate, const Tensor& idx);
Tensor swiglu(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approx);
Tensor snake(const Tensor& x, const Tensor& alpha);
Tensor snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta);
Tensor anti_aliased_snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta,
                               const Tensor& up_filter, const Tensor& down_filter, int ratio);
Tensor add(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& x, float s);
void fill_random(Tensor& x, uint64_t seed, float center, float half_width);
void fill_random_many(std::vector<Tensor>& xs, const std::vector<RandomFill>& fills);
Tensor cast(const Tensor& x, DType dtype);
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv1dParams& p);
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, int stride, int padding);
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvTranspose1dParams& p);
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv3dParams& p);
Tensor pad3d(const Tensor& x, const int pads[6], PadMode mode);
Tensor gather_rows(const Tensor& x, const Tensor& idx);
void scatter_rows(Tensor& dst, const Tensor& idx, const Tensor& src);
Tensor concat(const std::vector<Tensor>& parts, int dim);
Tensor copy(const Tensor& x);
void copy_into(Tensor& dst, const Tensor& src);
Tensor linear_residual(const Tensor& x, const Tensor& w, const Tensor& residual);
Tensor rms_norm_modulate(const Tensor& x, const Tensor* weight, float eps, const Tensor& scale, const Tensor& shift, const Tensor& idx);
Tensor qk_norm_rope(const Tensor& x, const Tensor* weight, float eps, const Tensor& cos, const Tensor& sin, int rotary_dim);
GatedNorm gated_residual_rms_norm_modulate(const Tensor& residual, const Tensor& branch,
                                           const Tensor& gate, const Tensor& idx,
                                           const Tensor* weight, float eps, const Tensor& scale,
                                           const Tensor& shift);
ResidualNorm layerscale_residual_rms_norm(const Tensor& x, const Tensor& branch, const Tensor& scale,
                                          const Tensor* weight, float eps, DType norm_dtype);

}  // namespace h3::ops::cuda
