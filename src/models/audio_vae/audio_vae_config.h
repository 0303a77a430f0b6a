// Configuration of the MiniMax-H3 audio VAE (`AutoencoderKLMiniMaxH3Audio`), read from
// `audio_vae/config.json` (h3_components_spec.md §3.1). Absent fields take the released values, as
// the reference constructor's defaults do; `latents_mean` / `latents_std` of null mean 0 / 1.
// Present fields are validated, including the relations the reference checks at construction
// (decoder upsampling equals the encoder hop, latent_dim a multiple of latent_channels).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace h3::audio_vae {

struct AudioVaeConfig {
  int64_t sampling_rate = 32000;
  int64_t encoder_dim = 64;
  std::vector<int64_t> encoder_rates = {2, 4, 4, 5, 5};
  int64_t latent_dim = 2048;  // encoder trunk width
  int64_t latent_channels = 32;
  int64_t num_attention_heads = 8;
  int64_t decoder_dim = 1024;
  std::vector<int64_t> decoder_rates = {5, 5, 2, 2, 2, 2, 2};
  std::vector<int64_t> decoder_kernel_sizes = {9, 9, 4, 4, 4, 4, 4};
  std::vector<int64_t> resblock_kernel_sizes = {3, 7, 11};
  std::vector<std::vector<int64_t>> resblock_dilation_sizes = {{1, 3, 5}, {1, 3, 5}, {1, 3, 5}};
  std::vector<float> latents_mean = std::vector<float>(32, 0.0f);  // float32, as the reference
  std::vector<float> latents_std = std::vector<float>(32, 1.0f);

  // ---- derived (§3.1) ----
  int64_t hop_length() const;  // product of encoder_rates (800 released)
  int64_t head_dim() const { return latent_dim / num_attention_heads; }
  // Width of the encoder trunk before its last conv: encoder_dim * 2^len(encoder_rates).
  int64_t encoder_trunk_width() const;
  // Channels after decoder level i (0-based): decoder_dim / 2^(i+1).
  int64_t decoder_channels(size_t level) const;
  // Latent frames of a request of `num_frames` video frames at 24 fps: round(num_frames/24 * 40)
  // with Python's half-to-even rounding (124 -> 207, 22 -> 37); 40 = sampling_rate / hop_length.
  int64_t latent_frames_for_video_frames(int64_t num_frames) const;

  static AudioVaeConfig from_json(const nlohmann::json& j, const std::string& label);
  // Reads `path`: a config.json file or a component folder holding one.
  static AudioVaeConfig load(const std::string& path);
  // Checks the relations between fields; from_json calls it.
  void validate(const std::string& label) const;
  // The config as the reference names its fields (for the schema builder and for writing files).
  nlohmann::json to_json() const;
};

}  // namespace h3::audio_vae
