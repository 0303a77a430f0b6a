// The audio VAE encoder (h3_components_spec.md §3.3): DAC-style strided convolution trunk, the
// causal-attention projection to the latent width (`pre_block`) and the posterior projections.
// A composition of ops/ops.h over weights on one device; activations stay on that device.
#pragma once

#include "core/tensor.h"
#include "models/audio_vae/audio_vae_config.h"
#include "models/audio_vae/audio_vae_weights.h"

namespace h3::audio_vae {

// Intermediate tensors an encode may record (the golden data stores them, to localise errors).
struct EncodeTrace {
  Tensor encoder_out;    // [B, latent_dim, T] trunk output
  Tensor pre_block_out;  // [B, T, latent_channels] (time-major, as the reference computes it)
};

// x [B, 1, S] float32 with S a multiple of the hop length -> [B, latent_dim, S/hop].
Tensor encoder_trunk(const EncoderWeights& w, const Tensor& x);

// MiniMaxH3AudioAttnProjection on h [B, T, latent_dim] -> [B, T, latent_channels]:
// u = proj(LN3(h)) + attn(LN1(h)); u + MLP(LN2(u)), the attention causal over T with heads
// averaged and pooled to latent_channels (§3.3 step 3).
Tensor pre_block_forward(const AudioVaeConfig& config, const PreBlockWeights& w, const Tensor& h);

struct AudioPosterior {
  Tensor mean;  // [B, latent_channels, T] (mode(); what H3 uses for reference audio)
  Tensor logs;  // log standard deviation, same shape
};

// The whole encode of an already padded batch: x [B, 1, S] -> posterior on the weights' device.
AudioPosterior encode_padded(const AudioVaeConfig& config, const EncoderWeights& w, const Tensor& x,
                             EncodeTrace* trace = nullptr);

}  // namespace h3::audio_vae
