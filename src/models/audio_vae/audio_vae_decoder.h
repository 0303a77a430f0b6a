// The audio VAE decoder (h3_components_spec.md §3.4): a 1x1 projection to the trunk width, then
// BigVGAN-v2: conv_pre, per rate a weight-normed transposed convolution and the average of the AMP
// blocks (anti-aliased SnakeBeta activations), a final anti-aliased SnakeBeta and conv_post. A
// composition of ops/ops.h over weights on one device.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "models/audio_vae/audio_vae_weights.h"

namespace h3::audio_vae {

// Intermediate tensors a decode may record (the golden data stores the first three).
struct DecodeTrace {
  Tensor dec_in_proj_out;      // [B, latent_dim, T]
  Tensor conv_pre_out;         // [B, decoder_dim, T]
  std::vector<Tensor> ups_out; // after each transposed-conv upsampler
};

// Activation1d(SnakeBeta) (§3.4): replicate-pad, depthwise transposed conv by the ratio with the
// low-pass filter (x ratio), centre crop to ratio*L, SnakeBeta, replicate-pad, depthwise strided
// low-pass conv back to L. x [B, C, L] -> [B, C, L].
Tensor anti_aliased_snake_beta(const ActivationWeights& a, const Tensor& x);

// AMPBlock1: for each dilation d_j, x += conv2_j(act(conv1_j(act(x)))) (§3.4).
Tensor amp_block(const AmpBlockWeights& w, const Tensor& x);

// z [B, latent_channels, T] (denormalized latents) -> [B, 1, hop*T] before the output clamp, on the
// weights' device.
Tensor decode_unclamped(const DecoderWeights& w, const Tensor& z, DecodeTrace* trace = nullptr);

}  // namespace h3::audio_vae
