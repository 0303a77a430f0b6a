// The MiniMax-H3 audio VAE (`AutoencoderKLMiniMaxH3Audio`, h3_components_spec.md §3): a mono
// 32 kHz waveform autoencoder with 800 samples per latent frame and 32 latent channels. Stereo is a
// batch of two mono items. Everything runs in float32, as the reference forces.
//
// The model is a composition of ops/ops.h over weights on one device; activations live on that
// device, so the same code is the CPU oracle and the CUDA engine. Inputs may be on any device.
// Latent normalization, the row layout of the DiT sequence and the output clamp are done on the
// host: those tensors are small and the pipeline wants them there.
#pragma once

#include <string>

#include "core/device.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "models/audio_vae/audio_vae_config.h"
#include "models/audio_vae/audio_vae_decoder.h"
#include "models/audio_vae/audio_vae_encoder.h"
#include "models/audio_vae/audio_vae_weights.h"

namespace h3::audio_vae {

struct AudioVaeOptions {
  Device device = Device::cpu();
  bool load_encoder = true;  // only Ref2VA with audio references needs the encoder
  bool load_decoder = true;
};

class AudioVae {
 public:
  // Loads `component_dir` (config.json plus the safetensors checkpoint).
  // H3_LOG_LEVEL=debug logs one line with the time of every phase of the load.
  static AudioVae load(const std::string& component_dir, const AudioVaeOptions& options = {});
  // `phases`: as in load_audio_vae_weights.
  static AudioVae from_checkpoint(const AudioVaeConfig& config, const io::Checkpoint& ckpt,
                                  const AudioVaeOptions& options = {},
                                  PhaseTimer* phases = nullptr);

  const AudioVaeConfig& config() const { return config_; }
  const AudioVaeOptions& options() const { return options_; }
  const AudioVaeWeights& weights() const { return weights_; }

  // ---- encode (§3.3) ----
  // sample [B, 1, S] (or [B, S]) float waveform at 32 kHz, any device. Right-pads S with zeros to a
  // multiple of the hop length, then encodes: posterior mean and log-std [B, latent, ceil(S/hop)]
  // float32 on the model's device.
  AudioPosterior encode(const Tensor& sample, EncodeTrace* trace = nullptr) const;

  // ---- decode (§3.4) ----
  // z [B, latent, T] denormalized latents, any device -> CPU float32 [B, 1, hop*T] clamped to
  // [-1, 1] (NaN is kept, as torch.clamp keeps it).
  // With `timer`, the decoder's passes are marked as the kDecodePart* parts (the caller begins
  // and collects; the clamp on the host is not a part).
  Tensor decode(const Tensor& z, DecodeTrace* trace = nullptr, PartTimer* timer = nullptr) const;

  // ---- latent normalization (§3.5), CPU float32 ----
  Tensor normalize_latents(const Tensor& z) const;     // (z - mean) / std per channel (dim 1)
  Tensor denormalize_latents(const Tensor& zn) const;  // zn * std + mean

  // ---- the pipeline's two uses (§3.5, golden README pipeline facts 6 and 9) ----
  // Reference audio: waveform [2, S] at 32 kHz (already normalized by media/audio_resample) ->
  // posterior mean, normalized, as DiT rows [2N, latent] channel-major (CPU float32).
  Tensor encode_reference_rows(const Tensor& waveform) const;
  // Generated audio: normalized latents [B, latent, N] (B = 2 stereo channels) -> CPU float32
  // waveform [B, 1, hop*N] in [-1, 1].
  Tensor decode_normalized(const Tensor& zn, PartTimer* timer = nullptr) const;

 private:
  AudioVae() = default;
  AudioVaeConfig config_;
  AudioVaeOptions options_;
  AudioVaeWeights weights_;
};

// DiT audio rows <-> latents (§3.5): rows [C*N, latent] are channel-major (row r is stereo channel
// r / N, latent frame r % N); latents are [C, latent, N]. CPU float32 results.
Tensor latents_to_rows(const Tensor& latents);
Tensor rows_to_latents(const Tensor& rows, int64_t channels = 2);

}  // namespace h3::audio_vae
