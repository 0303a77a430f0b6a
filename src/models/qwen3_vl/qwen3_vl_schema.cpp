// Tensor inventory of the text_encoder/ checkpoint (transformers Qwen3VLForConditionalGeneration,
// stored bf16): h3_components_spec.md §1.1-§1.7. The engine builds the language model only up to
// the tap (layers 0..49, hidden_states[50]) plus the vision tower; later layers, the final norm and
// the LM head are in the file and are skipped (`used = false`), as FastVideo's loader does (§1.1).
#include "core/status.h"
#include "models/schema.h"

namespace h3::models {

Schema qwen3_vl_schema(const nlohmann::json& c, const std::string& file) {
  using io::config_int;
  const int64_t vocab = config_int(c, "text_config.vocab_size", file);
  const int64_t hidden = config_int(c, "text_config.hidden_size", file);
  const int64_t inter = config_int(c, "text_config.intermediate_size", file);
  const int64_t layers = config_int(c, "text_config.num_hidden_layers", file);
  const int64_t heads = config_int(c, "text_config.num_attention_heads", file);
  const int64_t kv_heads = config_int(c, "text_config.num_key_value_heads", file);
  const int64_t head_dim = config_int(c, "text_config.head_dim", file);
  // transformers writes tie_word_embeddings at the top level and/or inside text_config.
  const bool tied =
      io::config_bool_or(c, "tie_word_embeddings", file,
                         io::config_bool_or(c, "text_config.tie_word_embeddings", file, false));

  const int64_t v_depth = config_int(c, "vision_config.depth", file);
  const int64_t v_hidden = config_int(c, "vision_config.hidden_size", file);
  const int64_t v_inter = config_int(c, "vision_config.intermediate_size", file);
  const int64_t v_in = config_int(c, "vision_config.in_channels", file);
  const int64_t v_patch = config_int(c, "vision_config.patch_size", file);
  const int64_t v_tpatch = config_int(c, "vision_config.temporal_patch_size", file);
  const int64_t v_merge = config_int(c, "vision_config.spatial_merge_size", file);
  const int64_t v_out = config_int(c, "vision_config.out_hidden_size", file);
  const int64_t v_pos = config_int(c, "vision_config.num_position_embeddings", file);
  const auto deepstack = io::config_int_list(c, "vision_config.deepstack_visual_indexes", file);

  H3_CHECK(layers >= kQwen3VlTapLayers, ErrorCode::kInvalidFile, file,
           ": field 'text_config.num_hidden_layers' is ", layers,
           " but the pipeline reads the output "
           "of decoder layer ",
           kQwen3VlTapLayers, " (hidden_states[50])");
  H3_CHECK(heads > 0 && kv_heads > 0 && heads % kv_heads == 0, ErrorCode::kInvalidFile, file,
           ": text_config.num_attention_heads (", heads,
           ") must be a positive multiple of "
           "num_key_value_heads (",
           kv_heads, ")");
  H3_CHECK(v_out == hidden, ErrorCode::kInvalidFile, file,
           ": field 'vision_config.out_hidden_size' (", v_out,
           ") must equal text_config.hidden_size (", hidden, ")");
  for (int64_t d : deepstack) {
    H3_CHECK(d >= 0 && d < v_depth, ErrorCode::kInvalidFile, file,
             ": vision_config.deepstack_visual_indexes holds ", d, ", outside the ", v_depth,
             " vision blocks");
  }

  Schema s;
  s.family = "qwen3_vl";
  const DType bf16 = DType::kBF16;
  auto add = [&s, bf16](std::string name, Shape shape, bool used = true) {
    s.tensors.push_back({std::move(name), std::move(shape), bf16, used});
  };

  // Vision tower (§1.5): patch embed as a Conv3d, learned position table, pre-norm blocks, the
  // final merger (norm before the 2x2 shuffle) and one DeepStack merger per tap (norm after).
  const std::string v = "model.visual.";
  add(v + "patch_embed.proj.weight", {v_hidden, v_in, v_tpatch, v_patch, v_patch});
  add(v + "patch_embed.proj.bias", {v_hidden});
  add(v + "pos_embed.weight", {v_pos, v_hidden});
  for (int64_t i = 0; i < v_depth; ++i) {
    const std::string p = v + "blocks." + std::to_string(i) + ".";
    add(p + "norm1.weight", {v_hidden});
    add(p + "norm1.bias", {v_hidden});
    add(p + "attn.qkv.weight", {3 * v_hidden, v_hidden});
    add(p + "attn.qkv.bias", {3 * v_hidden});
    add(p + "attn.proj.weight", {v_hidden, v_hidden});
    add(p + "attn.proj.bias", {v_hidden});
    add(p + "norm2.weight", {v_hidden});
    add(p + "norm2.bias", {v_hidden});
    add(p + "mlp.linear_fc1.weight", {v_inter, v_hidden});
    add(p + "mlp.linear_fc1.bias", {v_inter});
    add(p + "mlp.linear_fc2.weight", {v_hidden, v_inter});
    add(p + "mlp.linear_fc2.bias", {v_hidden});
  }
  const int64_t merged = v_hidden * v_merge * v_merge;
  auto add_merger = [&](const std::string& p, int64_t norm_dim) {
    add(p + "norm.weight", {norm_dim});
    add(p + "norm.bias", {norm_dim});
    add(p + "linear_fc1.weight", {merged, merged});
    add(p + "linear_fc1.bias", {merged});
    add(p + "linear_fc2.weight", {v_out, merged});
    add(p + "linear_fc2.bias", {v_out});
  };
  add_merger(v + "merger.", v_hidden);
  for (size_t k = 0; k < deepstack.size(); ++k) {
    add_merger(v + "deepstack_merger_list." + std::to_string(k) + ".", merged);
  }

  // Language model (§1.7).
  const std::string lm = "model.language_model.";
  add(lm + "embed_tokens.weight", {vocab, hidden});
  for (int64_t i = 0; i < layers; ++i) {
    const bool used = i < kQwen3VlTapLayers;
    const std::string p = lm + "layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {hidden}, used);
    add(p + "self_attn.q_proj.weight", {heads * head_dim, hidden}, used);
    add(p + "self_attn.k_proj.weight", {kv_heads * head_dim, hidden}, used);
    add(p + "self_attn.v_proj.weight", {kv_heads * head_dim, hidden}, used);
    add(p + "self_attn.o_proj.weight", {hidden, heads * head_dim}, used);
    add(p + "self_attn.q_norm.weight", {head_dim}, used);
    add(p + "self_attn.k_norm.weight", {head_dim}, used);
    add(p + "post_attention_layernorm.weight", {hidden}, used);
    add(p + "mlp.gate_proj.weight", {inter, hidden}, used);
    add(p + "mlp.up_proj.weight", {inter, hidden}, used);
    add(p + "mlp.down_proj.weight", {hidden, inter}, used);
  }
  add(lm + "norm.weight", {hidden}, false);
  if (!tied) add("lm_head.weight", {vocab, hidden}, false);
  return s;
}

}  // namespace h3::models
