// Qwen3-VL conditioner configuration (h3_components_spec.md §1.2), read from
// `text_encoder/config.json` (transformers layout: `text_config` and `vision_config` objects).
//
// Validation follows the reference's `__post_init__` checks (§1.2): the tap layer must exist,
// mRoPE must be interleaved with exactly 3 sections whose sum times 2 is the head dim, the vision
// output width must equal the text width, GQA heads must divide, activations must be the ones the
// engine implements. Every error names the file and the field.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3::qwen3_vl {

struct TextConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;  // nominal depth stored in the file
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 5e6;
  std::array<int64_t, 3> mrope_section{};  // (t, h, w) frequency counts, interleaved
};

struct VisionConfig {
  int64_t depth = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_heads = 0;
  int64_t in_channels = 0;
  int64_t patch_size = 0;
  int64_t temporal_patch_size = 0;
  int64_t spatial_merge_size = 0;
  int64_t out_hidden_size = 0;
  int64_t num_position_embeddings = 0;
  std::vector<int64_t> deepstack_visual_indexes;
};

struct Qwen3VlConfig {
  TextConfig text;
  VisionConfig vision;
  int64_t tap_layers = 50;  // layers built and run; the output is hidden_states[tap_layers]
  int64_t image_token_id = -1;
  int64_t video_token_id = -1;
  int64_t vision_start_token_id = -1;
  int64_t vision_end_token_id = -1;

  // Parses and validates; throws h3::Error (kInvalidFile, or kUnsupported for valid settings the
  // engine does not implement) naming `file` and the field.
  static Qwen3VlConfig from_json(const nlohmann::json& j, const std::string& file);
  static Qwen3VlConfig from_file(const std::string& path);
};

}  // namespace h3::qwen3_vl
