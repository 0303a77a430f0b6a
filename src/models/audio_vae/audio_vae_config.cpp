#include "models/audio_vae/audio_vae_config.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "io/repo.h"

namespace h3::audio_vae {
namespace {

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

}  // namespace

int64_t AudioVaeConfig::hop_length() const { return product(encoder_rates); }

int64_t AudioVaeConfig::encoder_trunk_width() const {
  return encoder_dim << encoder_rates.size();
}

int64_t AudioVaeConfig::decoder_channels(size_t level) const {
  return decoder_dim >> (level + 1);
}

int64_t AudioVaeConfig::latent_frames_for_video_frames(int64_t num_frames) const {
  H3_CHECK(num_frames >= 1, ErrorCode::kInvalidArgument,
           "audio VAE: the number of video frames must be positive, got ", num_frames);
  // Python: round(num_frames / 24 * latent_rate) in float64, ties to even (§3.1: 124 -> 207).
  const double latent_rate = static_cast<double>(sampling_rate) / static_cast<double>(hop_length());
  const double v = static_cast<double>(num_frames) / 24.0 * latent_rate;
  double r = std::floor(v);
  const double frac = v - r;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0.0)) r += 1.0;
  return static_cast<int64_t>(r);
}

void AudioVaeConfig::validate(const std::string& label) const {
  H3_CHECK(!encoder_rates.empty() && encoder_rates.size() <= 16, ErrorCode::kInvalidFile, label,
           ": 'encoder_rates' must hold 1 to 16 strides");
  H3_CHECK(encoder_trunk_width() <= io::kMaxConfigSize, ErrorCode::kInvalidFile, label,
           ": encoder_dim ", encoder_dim, " doubled ", encoder_rates.size(),
           " times is implausibly wide");
  H3_CHECK(hop_length() <= io::kMaxConfigSize, ErrorCode::kInvalidFile, label,
           ": the product of 'encoder_rates' is implausibly large");
  H3_CHECK(product(decoder_rates) == hop_length(), ErrorCode::kInvalidFile, label,
           ": 'decoder_rates' must upsample by the encoder hop length ", hop_length(), ", got ",
           product(decoder_rates));
  H3_CHECK(latent_dim % latent_channels == 0, ErrorCode::kInvalidFile, label, ": latent_dim (",
           latent_dim, ") must be a multiple of latent_channels (", latent_channels, ")");
  H3_CHECK(latent_dim % num_attention_heads == 0, ErrorCode::kInvalidFile, label, ": latent_dim (",
           latent_dim, ") must be a multiple of num_attention_heads (", num_attention_heads, ")");
  H3_CHECK(decoder_rates.size() == decoder_kernel_sizes.size(), ErrorCode::kInvalidFile, label,
           ": 'decoder_rates' and 'decoder_kernel_sizes' must have equal length");
  H3_CHECK(decoder_rates.size() < 31 && (decoder_dim >> decoder_rates.size()) >= 1 &&
               decoder_dim % (int64_t{1} << decoder_rates.size()) == 0,
           ErrorCode::kInvalidFile, label, ": decoder_dim ", decoder_dim, " cannot be halved ",
           decoder_rates.size(), " times");
  for (size_t i = 0; i < decoder_rates.size(); ++i) {
    const int64_t k = decoder_kernel_sizes[i], r = decoder_rates[i];
    // padding (k - r)//2 gives exactly r*L samples only when k - r is even and non-negative.
    H3_CHECK(k >= r && (k - r) % 2 == 0, ErrorCode::kUnsupported, label, ": decoder level ", i,
             " has kernel ", k, " and rate ", r, "; the transposed conv upsamples exactly by the "
             "rate only when kernel - rate is even and non-negative");
  }
  H3_CHECK(resblock_kernel_sizes.size() == resblock_dilation_sizes.size(), ErrorCode::kInvalidFile,
           label, ": 'resblock_dilation_sizes' must hold one list per entry of "
           "'resblock_kernel_sizes'");
  for (size_t j = 0; j < resblock_kernel_sizes.size(); ++j) {
    H3_CHECK(resblock_kernel_sizes[j] % 2 == 1, ErrorCode::kUnsupported, label,
             ": resblock kernel ", resblock_kernel_sizes[j],
             " is even; the AMP convolutions keep the length only for odd kernels");
    H3_CHECK(!resblock_dilation_sizes[j].empty(), ErrorCode::kInvalidFile, label,
             ": 'resblock_dilation_sizes' entries must be non-empty lists");
  }
  H3_CHECK(latents_mean.size() == static_cast<size_t>(latent_channels) &&
               latents_std.size() == static_cast<size_t>(latent_channels),
           ErrorCode::kInvalidFile, label, ": latents_mean and latents_std must have ",
           latent_channels, " entries (latent_channels), got ", latents_mean.size(), " and ",
           latents_std.size());
  for (float s : latents_std) {
    H3_CHECK(s != 0.0f, ErrorCode::kInvalidFile, label, ": latents_std entries must be non-zero");
  }
}

AudioVaeConfig AudioVaeConfig::from_json(const nlohmann::json& j, const std::string& label) {
  H3_CHECK(j.is_object(), ErrorCode::kInvalidFile, label, ": expected a JSON object");
  if (auto it = j.find("_class_name"); it != j.end()) {
    H3_CHECK(it->is_string() && it->get<std::string>() == "AutoencoderKLMiniMaxH3Audio",
             ErrorCode::kInvalidFile, label,
             ": _class_name must be \"AutoencoderKLMiniMaxH3Audio\", got ", it->dump());
  }
  AudioVaeConfig c;
  c.sampling_rate =
      io::config_int_in_or(j, "sampling_rate", label, c.sampling_rate, 1, io::kMaxConfigSize);
  c.encoder_dim =
      io::config_int_in_or(j, "encoder_dim", label, c.encoder_dim, 1, io::kMaxConfigSize);
  c.encoder_rates =
      io::config_int_list_in_or(j, "encoder_rates", label, c.encoder_rates, 1, io::kMaxConfigSize);
  c.latent_dim = io::config_int_in_or(j, "latent_dim", label, c.latent_dim, 1, io::kMaxConfigSize);
  c.latent_channels =
      io::config_int_in_or(j, "latent_channels", label, c.latent_channels, 1, io::kMaxConfigSize);
  c.num_attention_heads = io::config_int_in_or(j, "num_attention_heads", label,
                                               c.num_attention_heads, 1, io::kMaxConfigSize);
  c.decoder_dim =
      io::config_int_in_or(j, "decoder_dim", label, c.decoder_dim, 1, io::kMaxConfigSize);
  c.decoder_rates =
      io::config_int_list_in_or(j, "decoder_rates", label, c.decoder_rates, 1, io::kMaxConfigSize);
  c.decoder_kernel_sizes = io::config_int_list_in_or(j, "decoder_kernel_sizes", label,
                                                     c.decoder_kernel_sizes, 1, io::kMaxConfigSize);
  c.resblock_kernel_sizes = io::config_int_list_in_or(
      j, "resblock_kernel_sizes", label, c.resblock_kernel_sizes, 1, io::kMaxConfigSize);
  if (auto it = j.find("resblock_dilation_sizes"); it != j.end() && !it->is_null()) {
    H3_CHECK(it->is_array() && !it->empty(), ErrorCode::kInvalidFile, label,
             ": field 'resblock_dilation_sizes' must be a non-empty list of lists, got ",
             it->dump());
    c.resblock_dilation_sizes.clear();
    for (const auto& e : *it)
      c.resblock_dilation_sizes.push_back(
          io::config_int_list_in(e, "resblock_dilation_sizes", label, 1, io::kMaxConfigSize));
  }
  const size_t lc = static_cast<size_t>(c.latent_channels);
  c.latents_mean = io::config_float_list_or(j, "latents_mean", label, std::vector<float>(lc, 0.0f));
  c.latents_std = io::config_float_list_or(j, "latents_std", label, std::vector<float>(lc, 1.0f));
  c.validate(label);
  return c;
}

AudioVaeConfig AudioVaeConfig::load(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "config.json").string();
  return from_json(io::read_json_file(file), file);
}

nlohmann::json AudioVaeConfig::to_json() const {
  nlohmann::json j;
  j["_class_name"] = "AutoencoderKLMiniMaxH3Audio";
  j["sampling_rate"] = sampling_rate;
  j["encoder_dim"] = encoder_dim;
  j["encoder_rates"] = encoder_rates;
  j["latent_dim"] = latent_dim;
  j["latent_channels"] = latent_channels;
  j["num_attention_heads"] = num_attention_heads;
  j["decoder_dim"] = decoder_dim;
  j["decoder_rates"] = decoder_rates;
  j["decoder_kernel_sizes"] = decoder_kernel_sizes;
  j["resblock_kernel_sizes"] = resblock_kernel_sizes;
  j["resblock_dilation_sizes"] = resblock_dilation_sizes;
  j["latents_mean"] = latents_mean;
  j["latents_std"] = latents_std;
  return j;
}

}  // namespace h3::audio_vae
