// The video VAE's ViT decoder (h3_components_spec.md §2.6): post_quant_conv, one token per latent
// voxel plus register tokens and a zero token, pre-norm blocks with window-relative 3-axis partial
// RoPE and LayerScale, LayerNorm, and a head that un-patches each token into a pixel block.
//
// Precision (§2.9): with `gemm_dtype` float32 everything is float32 (the golden data). With
// float16 the decoder follows the reference's fp16 autocast over float32 weights: every
// Linear/Conv takes float16 operands and returns float16, the residual stream stays float32 (the
// register tokens are float32, so the concatenation promotes), RMSNorm/LayerNorm compute in
// float32, q/k are normalized in float32 and rounded to float16 before RoPE in float16, attention
// and SwiGLU are float16, and LayerScale products promote back to float32.
#pragma once

#include "core/tensor.h"
#include "models/video_vae/video_vae_config.h"
#include "models/video_vae/video_vae_weights.h"

namespace h3::video_vae {

// RoPE tables of one decoder window of t x h x w tokens plus the suffix tokens (registers and the
// zero token, all at position 0): cos/sin [t*h*w + suffix, rotary_dim] float32, angles
// [t-axis F | y-axis F | x-axis F] duplicated over the two rotary halves (§2.6 step 3).
struct DecoderRope {
  Tensor cos, sin;
};
DecoderRope decoder_rope(const VideoVaeConfig& config, int64_t t, int64_t h, int64_t w);

// z [latent, t, h, w] (float, one batch item, any device) -> pixels [out, t*pt, h*ps, w*ps] in
// `gemm_dtype` (the decoder's output dtype: float32, or float16 under the autocast policy).
Tensor decoder_forward(const VideoVaeConfig& config, const DecoderWeights& weights, DType gemm_dtype,
                       const Tensor& z);

}  // namespace h3::video_vae
