#include "models/audio_vae/audio_vae_model.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "core/log.h"
#include "core/phase_timer.h"
#include "core/status.h"
#include "ops/ops.h"

namespace h3::audio_vae {
namespace {

// Per-channel affine on dim 1 of [B, C, ...], float32 on the host: z*s + m, or (z - m)/s with a
// true division, each in the reference's float32 operation order.
Tensor channel_affine(const Tensor& z, const std::vector<float>& mean, const std::vector<float>& std,
                      bool normalize, const char* what) {
  H3_CHECK(z.defined() && z.dim() >= 2 && z.size(1) == static_cast<int64_t>(mean.size()) &&
               dtype_is_float(z.dtype()),
           ErrorCode::kInvalidArgument, "audio VAE ", what, ": expected float latents [B, ",
           mean.size(), ", ...], got ", z.defined() ? z.desc() : std::string("<undefined>"));
  const Tensor host = z.to(Device::cpu()).to(DType::kF32).contiguous();
  Tensor out = Tensor::empty(z.shape(), DType::kF32);
  const float* src = host.data<float>();
  float* dst = out.data<float>();
  const int64_t b = z.size(0), c = z.size(1);
  const int64_t inner = (b > 0 && c > 0) ? z.numel() / (b * c) : 0;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t ci = 0; ci < c; ++ci) {
      const int64_t off = (bi * c + ci) * inner;
      const float m = mean[static_cast<size_t>(ci)], s = std[static_cast<size_t>(ci)];
      for (int64_t i = 0; i < inner; ++i)
        dst[off + i] = normalize ? (src[off + i] - m) / s : src[off + i] * s + m;
    }
  }
  return out;
}

}  // namespace

AudioVae AudioVae::load(const std::string& component_dir, const AudioVaeOptions& options) {
  PhaseTimer phases;
  // The component folder holds config.json and one checkpoint (a single file or a sharded index).
  const AudioVaeConfig config = AudioVaeConfig::load(component_dir);
  phases.mark("config");
  std::optional<AudioVae> vae;
  {
    const io::Checkpoint ckpt = io::Checkpoint::open(component_dir);
    phases.mark("checkpoint opened");
    vae.emplace(from_checkpoint(config, ckpt, options, &phases));
  }
  phases.mark("checkpoint closed");
  H3_LOG_DEBUG("audio VAE load ", component_dir, " on ", options.device.str(), ": ", phases.str());
  return std::move(*vae);
}

AudioVae AudioVae::from_checkpoint(const AudioVaeConfig& config, const io::Checkpoint& ckpt,
                                   const AudioVaeOptions& options, PhaseTimer* phases) {
  AudioVae vae;
  vae.config_ = config;
  vae.options_ = options;
  AudioVaeWeightPolicy policy;
  policy.device = options.device;
  policy.load_encoder = options.load_encoder;
  policy.load_decoder = options.load_decoder;
  vae.weights_ = load_audio_vae_weights(config, ckpt, policy, phases);
  return vae;
}

AudioPosterior AudioVae::encode(const Tensor& sample, EncodeTrace* trace) const {
  H3_CHECK(weights_.has_encoder, ErrorCode::kInvalidArgument,
           "audio VAE encode: the model was loaded without its encoder");
  H3_CHECK(sample.defined() && dtype_is_float(sample.dtype()) &&
               (sample.dim() == 2 || (sample.dim() == 3 && sample.size(1) == 1)),
           ErrorCode::kInvalidArgument,
           "audio VAE encode: expected a float waveform [B, 1, samples] or [B, samples], got ",
           sample.defined() ? sample.desc() : std::string("<undefined>"));
  const int64_t batch = sample.size(0), s = sample.size(-1);
  H3_CHECK(batch >= 1 && s >= 1, ErrorCode::kInvalidArgument,
           "audio VAE encode: the waveform is empty: ", sample.desc());
  Tensor x = sample.to(options_.device);
  x = ops::copy(x).view({batch, 1, s});
  if (x.dtype() != DType::kF32) x = ops::cast(x, DType::kF32);
  const int64_t hop = config_.hop_length();
  const int64_t right = (s + hop - 1) / hop * hop - s;
  if (right > 0) {
    const int pads[6] = {0, 0, 0, 0, 0, static_cast<int>(right)};
    x = ops::pad3d(x, pads, ops::PadMode::kZeros);
  }
  return encode_padded(config_, weights_.encoder, x, trace);
}

Tensor AudioVae::decode(const Tensor& z, DecodeTrace* trace, PartTimer* timer) const {
  H3_CHECK(weights_.has_decoder, ErrorCode::kInvalidArgument,
           "audio VAE decode: the model was loaded without its decoder");
  H3_CHECK(z.defined() && dtype_is_float(z.dtype()) && z.dim() == 3 &&
               z.size(1) == config_.latent_channels && z.size(0) >= 1 && z.size(2) >= 1,
           ErrorCode::kInvalidArgument, "audio VAE decode: expected float latents [B, ",
           config_.latent_channels, ", frames], got ",
           z.defined() ? z.desc() : std::string("<undefined>"));
  Tensor x = z.to(options_.device);
  if (x.dtype() != DType::kF32) x = ops::cast(x, DType::kF32);
  x = ops::copy(x);
  if (timer) timer->mark(kDecodePartLatents);
  const Tensor raw = decode_unclamped(weights_.decoder, x, trace, timer);
  // torch.clamp(x, -1, 1) on the host: the waveform leaves the device here anyway.
  Tensor out = raw.to(Device::cpu()).contiguous().clone();
  float* d = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) d[i] = std::isnan(d[i]) ? d[i] : std::clamp(d[i], -1.0f, 1.0f);
  return out;
}

Tensor AudioVae::normalize_latents(const Tensor& z) const {
  return channel_affine(z, config_.latents_mean, config_.latents_std, true, "normalize_latents");
}

Tensor AudioVae::denormalize_latents(const Tensor& zn) const {
  return channel_affine(zn, config_.latents_mean, config_.latents_std, false, "denormalize_latents");
}

Tensor AudioVae::encode_reference_rows(const Tensor& waveform) const {
  H3_CHECK(waveform.defined() && waveform.dim() == 2, ErrorCode::kInvalidArgument,
           "audio VAE reference encode: expected a waveform [channels, samples], got ",
           waveform.defined() ? waveform.desc() : std::string("<undefined>"));
  const AudioPosterior post = encode(waveform);
  return latents_to_rows(normalize_latents(post.mean));
}

Tensor AudioVae::decode_normalized(const Tensor& zn, PartTimer* timer) const {
  return decode(denormalize_latents(zn), nullptr, timer);
}

Tensor latents_to_rows(const Tensor& latents) {
  H3_CHECK(latents.defined() && latents.dim() == 3, ErrorCode::kInvalidArgument,
           "audio latents_to_rows: expected [channels, latent, frames], got ",
           latents.defined() ? latents.desc() : std::string("<undefined>"));
  const int64_t c = latents.size(0), l = latents.size(1), n = latents.size(2);
  // [C, L, N] -> [C, N, L] -> [C*N, L]: row r is channel r / N, frame r % N.
  return latents.to(Device::cpu()).to(DType::kF32).permute({0, 2, 1}).contiguous().reshape({c * n, l});
}

Tensor rows_to_latents(const Tensor& rows, int64_t channels) {
  H3_CHECK(rows.defined() && rows.dim() == 2 && channels >= 1 && rows.size(0) % channels == 0,
           ErrorCode::kInvalidArgument, "audio rows_to_latents: expected rows [", channels,
           "*N, latent], got ", rows.defined() ? rows.desc() : std::string("<undefined>"));
  const int64_t n = rows.size(0) / channels, l = rows.size(1);
  return rows.to(Device::cpu()).to(DType::kF32).contiguous().view({channels, n, l}).permute({0, 2, 1}).contiguous();
}

}  // namespace h3::audio_vae
