// Qwen3-VL config parsing and validation (h3_components_spec.md §1.2).
#include "models/qwen3_vl/qwen3_vl_config.h"

#include "core/status.h"
#include "io/repo.h"
#include "models/schema.h"

namespace h3::qwen3_vl {
namespace {

std::string string_or(const nlohmann::json& j, const std::string& field, const std::string& dflt) {
  // Dotted field lookup for optional strings (activation names); absent or null -> default.
  const nlohmann::json* cur = &j;
  size_t start = 0;
  while (true) {
    const size_t dot = field.find('.', start);
    const std::string key = field.substr(start, dot == std::string::npos ? dot : dot - start);
    if (!cur->is_object() || !cur->contains(key)) return dflt;
    cur = &(*cur)[key];
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (cur->is_null()) return dflt;
  return cur->is_string() ? cur->get<std::string>() : std::string("<not a string>");
}

bool has_field(const nlohmann::json& j, const std::string& a, const std::string& b) {
  return j.is_object() && j.contains(a) && j[a].is_object() && j[a].contains(b) &&
         !j[a][b].is_null();
}

}  // namespace

Qwen3VlConfig Qwen3VlConfig::from_json(const nlohmann::json& j, const std::string& file) {
  using io::config_int;
  using io::config_int_list;
  using io::config_number;
  H3_CHECK(j.is_object(), ErrorCode::kInvalidFile, file, ": expected a JSON object");
  H3_CHECK(j.contains("text_config") && j["text_config"].is_object(), ErrorCode::kInvalidFile, file,
           ": missing object 'text_config' (a Qwen3-VL config.json has one)");
  H3_CHECK(j.contains("vision_config") && j["vision_config"].is_object(), ErrorCode::kInvalidFile,
           file, ": missing object 'vision_config'");
  Qwen3VlConfig c;
  TextConfig& t = c.text;
  t.vocab_size = config_int(j, "text_config.vocab_size", file);
  t.hidden_size = config_int(j, "text_config.hidden_size", file);
  t.intermediate_size = config_int(j, "text_config.intermediate_size", file);
  t.num_hidden_layers = config_int(j, "text_config.num_hidden_layers", file);
  t.num_attention_heads = config_int(j, "text_config.num_attention_heads", file);
  t.num_key_value_heads = config_int(j, "text_config.num_key_value_heads", file);
  t.head_dim = config_int(j, "text_config.head_dim", file);
  t.rms_norm_eps = config_number(j, "text_config.rms_norm_eps", file);

  // transformers >= 5 stores RoPE settings in `rope_parameters`; 4.x in `rope_scaling` plus a
  // top-level `rope_theta`.
  const std::string rope_obj = has_field(j, "text_config", "rope_parameters")
                                   ? "text_config.rope_parameters"
                                   : "text_config.rope_scaling";
  t.rope_theta = has_field(j, "text_config", "rope_theta")
                     ? config_number(j, "text_config.rope_theta", file)
                     : config_number(j, rope_obj + ".rope_theta", file);
  const auto sections = config_int_list(j, rope_obj + ".mrope_section", file);
  H3_CHECK(sections.size() == 3, ErrorCode::kInvalidFile, file, ": field '", rope_obj,
           ".mrope_section' has ", sections.size(), " entries, expected 3 (t, h, w)");
  const bool interleaved = io::config_bool_or(j, rope_obj + ".mrope_interleaved", file, false);
  H3_CHECK(interleaved, ErrorCode::kUnsupported, file, ": field '", rope_obj,
           ".mrope_interleaved' must be true (Qwen3-VL interleaved mRoPE)");
  int64_t section_sum = 0;
  for (int i = 0; i < 3; ++i) {
    H3_CHECK(sections[i] > 0, ErrorCode::kInvalidFile, file, ": ", rope_obj, ".mrope_section[", i,
             "] is ", sections[i], ", expected > 0");
    t.mrope_section[i] = sections[i];
    section_sum += sections[i];
  }

  H3_CHECK(t.vocab_size > 0 && t.hidden_size > 0 && t.intermediate_size > 0 && t.head_dim > 0,
           ErrorCode::kInvalidFile, file,
           ": text_config vocab_size, hidden_size, intermediate_size and head_dim must be > 0");
  H3_CHECK(t.head_dim % 2 == 0, ErrorCode::kInvalidFile, file, ": text_config.head_dim (",
           t.head_dim, ") must be even (rotate-half RoPE)");
  H3_CHECK(section_sum * 2 == t.head_dim, ErrorCode::kInvalidFile, file, ": ", rope_obj,
           ".mrope_section sums to ", section_sum, ", expected head_dim/2 = ", t.head_dim / 2);
  // The interleave pattern gives h and w every third frequency below 3*section.
  H3_CHECK(3 * t.mrope_section[1] <= t.head_dim / 2 && 3 * t.mrope_section[2] <= t.head_dim / 2,
           ErrorCode::kInvalidFile, file, ": ", rope_obj,
           ".mrope_section: interleaving gives h and w every third of the ", t.head_dim / 2,
           " frequencies, so each of their sections must be at most a third of them");
  H3_CHECK(t.num_attention_heads > 0 && t.num_key_value_heads > 0 &&
               t.num_attention_heads % t.num_key_value_heads == 0,
           ErrorCode::kInvalidFile, file, ": text_config.num_attention_heads (",
           t.num_attention_heads, ") must be a positive multiple of num_key_value_heads (",
           t.num_key_value_heads, ")");
  H3_CHECK(t.rms_norm_eps > 0, ErrorCode::kInvalidFile, file,
           ": text_config.rms_norm_eps must be > 0");
  H3_CHECK(t.rope_theta > 0, ErrorCode::kInvalidFile, file, ": rope_theta must be > 0");
  const std::string act = string_or(j, "text_config.hidden_act", "silu");
  H3_CHECK(act == "silu", ErrorCode::kUnsupported, file, ": text_config.hidden_act is '", act,
           "', only 'silu' is implemented");
  H3_CHECK(!io::config_bool_or(j, "text_config.attention_bias", file, false),
           ErrorCode::kUnsupported, file,
           ": text_config.attention_bias is true; Qwen3-VL has no attention bias");
  c.tap_layers = models::kQwen3VlTapLayers;
  H3_CHECK(t.num_hidden_layers >= c.tap_layers, ErrorCode::kInvalidFile, file,
           ": field 'text_config.num_hidden_layers' is ", t.num_hidden_layers,
           " but the pipeline reads the output of decoder layer ", c.tap_layers, " (hidden_states[",
           c.tap_layers, "])");

  VisionConfig& v = c.vision;
  v.depth = config_int(j, "vision_config.depth", file);
  v.hidden_size = config_int(j, "vision_config.hidden_size", file);
  v.intermediate_size = config_int(j, "vision_config.intermediate_size", file);
  v.num_heads = config_int(j, "vision_config.num_heads", file);
  v.in_channels = config_int(j, "vision_config.in_channels", file);
  v.patch_size = config_int(j, "vision_config.patch_size", file);
  v.temporal_patch_size = config_int(j, "vision_config.temporal_patch_size", file);
  v.spatial_merge_size = config_int(j, "vision_config.spatial_merge_size", file);
  v.out_hidden_size = config_int(j, "vision_config.out_hidden_size", file);
  v.num_position_embeddings = config_int(j, "vision_config.num_position_embeddings", file);
  v.deepstack_visual_indexes = config_int_list(j, "vision_config.deepstack_visual_indexes", file);
  H3_CHECK(v.depth > 0 && v.hidden_size > 0 && v.num_heads > 0 && v.hidden_size % v.num_heads == 0,
           ErrorCode::kInvalidFile, file, ": vision_config depth (", v.depth, "), hidden_size (",
           v.hidden_size, ") and num_heads (", v.num_heads,
           ") must be positive with hidden_size divisible by num_heads");
  H3_CHECK(v.patch_size > 0 && v.temporal_patch_size > 0 && v.spatial_merge_size > 0 &&
               v.in_channels > 0,
           ErrorCode::kInvalidFile, file,
           ": vision_config patch_size, temporal_patch_size, spatial_merge_size and in_channels "
           "must be > 0");
  H3_CHECK(v.out_hidden_size == t.hidden_size, ErrorCode::kInvalidFile, file,
           ": field 'vision_config.out_hidden_size' (", v.out_hidden_size,
           ") must equal text_config.hidden_size (", t.hidden_size, ")");
  int64_t side = 0;
  while ((side + 1) * (side + 1) <= v.num_position_embeddings) ++side;
  H3_CHECK(v.num_position_embeddings > 0 && side * side == v.num_position_embeddings,
           ErrorCode::kInvalidFile, file, ": vision_config.num_position_embeddings (",
           v.num_position_embeddings, ") must be a perfect square (a square position grid)");
  for (int64_t d : v.deepstack_visual_indexes) {
    H3_CHECK(d >= 0 && d < v.depth, ErrorCode::kInvalidFile, file,
             ": vision_config.deepstack_visual_indexes holds ", d, ", outside the ", v.depth,
             " vision blocks");
  }
  H3_CHECK(static_cast<int64_t>(v.deepstack_visual_indexes.size()) <= c.tap_layers,
           ErrorCode::kInvalidFile, file,
           ": more DeepStack taps than language layers receiving them");
  const std::string vact = string_or(j, "vision_config.hidden_act", "gelu_pytorch_tanh");
  H3_CHECK(vact == "gelu_pytorch_tanh", ErrorCode::kUnsupported, file,
           ": vision_config.hidden_act is '", vact, "', only 'gelu_pytorch_tanh' is implemented");

  c.image_token_id = io::config_int_or(j, "image_token_id", file, -1);
  c.video_token_id = io::config_int_or(j, "video_token_id", file, -1);
  c.vision_start_token_id = io::config_int_or(j, "vision_start_token_id", file, -1);
  c.vision_end_token_id = io::config_int_or(j, "vision_end_token_id", file, -1);
  return c;
}

Qwen3VlConfig Qwen3VlConfig::from_file(const std::string& path) {
  return from_json(io::read_json_file(path), path);
}

}  // namespace h3::qwen3_vl
