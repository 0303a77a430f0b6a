// Configuration of the MiniMax-H3 video VAE (`AutoencoderKLMiniMaxH3`), read from `vae/config.json`
// (h3_components_spec.md §2.1). Absent fields take the released values, as the reference's
// constructor defaults do; present fields are validated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ops/ops.h"

namespace h3::video_vae {

struct VideoVaeConfig {
  int64_t in_channels = 3;
  int64_t out_channels = 3;
  int64_t latent_channels = 24;
  std::vector<int64_t> block_out_channels = {128, 256, 256, 512, 512, 1024};
  int64_t layers_per_block = 2;
  std::vector<int64_t> spatial_downsample_factors = {2, 2, 2, 2, 1, 1};
  std::vector<int64_t> temporal_downsample_factors = {1, 2, 2, 1, 1, 1};
  int64_t norm_num_groups = 32;
  double norm_eps = 1e-6;
  ops::PadMode spatial_padding_mode = ops::PadMode::kReflect;
  int64_t decoder_num_layers = 36;
  int64_t decoder_num_attention_heads = 32;
  int64_t decoder_attention_head_dim = 64;
  int64_t decoder_num_register_tokens = 4;
  int64_t decoder_ffn_mult = 4;
  double decoder_rope_theta = 100.0;
  double decoder_rope_dim_ratio = 0.75;
  double decoder_norm_eps = 1e-5;
  int64_t clip_length = 17;
  int64_t token_drop = 3;
  std::vector<float> latents_mean = std::vector<float>(24, 0.0f);  // float32, as the reference
  std::vector<float> latents_std = std::vector<float>(24, 1.0f);

  // ---- derived (§2.1) ----
  int64_t spatial_ratio() const;   // product of spatial_downsample_factors (16 released)
  int64_t temporal_ratio() const;  // product of temporal_downsample_factors (4 released)
  int64_t decoder_width() const { return decoder_num_attention_heads * decoder_attention_head_dim; }
  int64_t decoder_ffn_dim() const { return decoder_ffn_mult * decoder_width(); }
  // Rotated channels per head: int(head_dim * ratio), 48 of 64 released (§2.6 step 3).
  int64_t decoder_rotary_dim() const;
  int64_t frame_pre_padding() const;  // (-clip_length) mod temporal_ratio = 3
  int64_t tokens_chunk_size() const;  // ceil(clip_length / temporal_ratio) = 5
  int64_t token_overlap() const;      // (-token_drop) mod tokens_chunk_size = 2
  int64_t frame_overlap() const;      // max(token_overlap*temporal_ratio - frame_pre_padding, 0) = 5
  // Latent frames one clip of `frames` pixel frames encodes to (17 -> 5, 1 -> 1): the causal
  // stride-2 levels map T to floor((T - 1)/2) + 1 (§2.3 shape trace).
  int64_t clip_latent_frames(int64_t frames) const;
  // Latent frames of a whole encode (§2.5): 1 frame -> 1 (spatial path, no drop); otherwise
  // ceil(F/clip) clips, minus token_drop. 17n+5 -> 5n+2.
  int64_t encoded_latent_frames(int64_t frames) const;

  static VideoVaeConfig from_json(const nlohmann::json& j, const std::string& label);
  // Reads `path`: a config.json file or a component folder holding one.
  static VideoVaeConfig load(const std::string& path);
  // Checks the relations between fields; from_json calls it.
  void validate(const std::string& label) const;
  // The config as the reference names its fields (for the schema builder and for writing files).
  nlohmann::json to_json() const;
};

}  // namespace h3::video_vae
