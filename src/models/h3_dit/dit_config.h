// Configuration of the MiniMax-H3 diffusion transformer, read from a component's `config.json`
// (h3_dit_spec.md §1.2). Both partitions (`transformer/`, `transformer_ref/`) use this format.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace h3::dit {

struct DitConfig {
  int64_t num_attention_heads = 0;
  int64_t attention_head_dim = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_refiner_layers = 0;
  int64_t ffn_dim = 0;
  int64_t in_channels = 0;
  int64_t audio_in_channels = 0;
  std::array<int64_t, 3> patch_size = {1, 2, 2};  // (t, h, w)
  int64_t text_dim = 0;
  int64_t freq_dim = 0;
  int64_t time_embed_hidden_dim = 0;
  int64_t time_embed_dim = 0;
  int64_t rope_freq_dim = 0;  // frequencies per RoPE axis (F); rotary width is 6F
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  double qk_norm_eps = 1e-5;
  double final_norm_eps = 1e-5;

  // Derived sizes.
  int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  int64_t rotary_dim() const { return 6 * rope_freq_dim; }
  int64_t video_patch_dim() const { return in_channels * patch_size[0] * patch_size[1] * patch_size[2]; }
  int64_t adaln_width() const { return 3 * 6 * hidden_size; }  // 3 modalities x 6 chunks (§1.3)

  // Parses and validates a config object; `label` (the file name) prefixes every error message.
  // Throws h3::Error kInvalidFile for a missing or malformed field and kUnsupported for variants
  // this engine does not run (rank-reduced AdaLN, §1.6).
  static DitConfig from_json(const nlohmann::json& j, const std::string& label);
  // Reads `path` (a config.json file, or a component folder holding one).
  static DitConfig load(const std::string& path);
  // Checks the relations between fields (§1.2: FastVideo's validation plus the sizes the forward
  // relies on). from_json calls it; call it again after editing a config by hand.
  void validate(const std::string& label) const;
};

}  // namespace h3::dit
