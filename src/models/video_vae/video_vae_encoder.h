// The video VAE encoder (h3_components_spec.md §2.3): a causal 3-D CNN of GroupNorm/SiLU ResNets
// and strided downsamplers, then quant_conv. Always float32 (§2.9: encode runs without autocast).
#pragma once

#include "core/tensor.h"
#include "models/video_vae/video_vae_config.h"
#include "models/video_vae/video_vae_weights.h"

namespace h3::video_vae {

// encoder + quant_conv on one clip or tile: x [B, in_channels, T, H, W] float32 (ImageNet-normalized
// pixels) -> moments [B, 2*latent, T', ceil(H/16), ceil(W/16)] float32, [mean | logvar] on dim 1.
Tensor encoder_forward(const VideoVaeConfig& config, const EncoderWeights& weights, const Tensor& x);

// GroupNorm with statistics per frame: [B, C, T, H, W] is folded to [B*T, C, H, W] (the
// reference's `use_t_isolated_gn`), normalized, and unfolded (§2.3).
Tensor frame_group_norm(const Tensor& x, int64_t groups, const Tensor& weight, const Tensor& bias,
                        double eps);

}  // namespace h3::video_vae
