// The audio VAE decoder (h3_components_spec.md §3.4): a 1x1 projection to the trunk width, then
// BigVGAN-v2: conv_pre, per rate a weight-normed transposed convolution and the average of the AMP
// blocks (anti-aliased SnakeBeta activations), a final anti-aliased SnakeBeta and conv_post. A
// composition of ops/ops.h over weights on one device.
#pragma once

#include <array>
#include <vector>

#include "core/part_timer.h"
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
// low-pass conv back to L, in one pass (ops::anti_aliased_snake_beta). x [B, C, L] -> [B, C, L].
// `timer` (h3 bench vae --profile) marks each pass as one of the parts decode_unclamped names.
Tensor anti_aliased_snake_beta(const ActivationWeights& a, const Tensor& x,
                               PartTimer* timer = nullptr);

// AMPBlock1: for each dilation d_j, x += conv2_j(act(conv1_j(act(x)))) (§3.4).
Tensor amp_block(const AmpBlockWeights& w, const Tensor& x, PartTimer* timer = nullptr);

// The parts a timed decode reports, in decode order (kDecodeParts lists them all).
inline constexpr const char* kDecodePartLatents = "latents to the device";
inline constexpr const char* kDecodePartInput = "input convs (in_proj, conv_pre)";
inline constexpr const char* kDecodePartUpsample = "upsamplers (transposed convs)";
inline constexpr const char* kDecodePartActivation =
    "activations (anti-aliased SnakeBeta: 2x up-filter, SnakeBeta, down-filter)";
inline constexpr const char* kDecodePartResConv = "AMP block convs";
inline constexpr const char* kDecodePartSum = "residual adds and kernel average";
inline constexpr const char* kDecodePartOutput = "conv_post";
inline constexpr std::array<const char*, 7> kDecodeParts = {
    kDecodePartLatents, kDecodePartInput, kDecodePartUpsample, kDecodePartActivation,
    kDecodePartResConv, kDecodePartSum,   kDecodePartOutput};

// z [B, latent_channels, T] (denormalized latents) -> [B, 1, hop*T] before the output clamp, on the
// weights' device. With `timer`, every pass is marked as one of the kDecodePart* parts (the caller
// begins and collects the stretch).
Tensor decode_unclamped(const DecoderWeights& w, const Tensor& z, DecodeTrace* trace = nullptr,
                        PartTimer* timer = nullptr);

}  // namespace h3::audio_vae
