// Tensor inventory of MiniMaxH3Transformer3DModel (transformer/ and transformer_ref/), diffusers
// names as stored: h3_dit_spec.md §1.3, with the rank-reduced AdaLN variant of §1.6 and the fp32
// islands of §1.7.
#include "core/status.h"
#include "models/schema.h"

namespace h3::models {

Schema dit_schema(const nlohmann::json& c, const std::string& file) {
  using io::config_int;
  const int64_t heads = config_int(c, "num_attention_heads", file);
  const int64_t head_dim = config_int(c, "attention_head_dim", file);
  const int64_t hidden = config_int(c, "hidden_size", file);
  const int64_t layers = config_int(c, "num_layers", file);
  const int64_t refiner = config_int(c, "num_refiner_layers", file);
  const int64_t ffn = config_int(c, "ffn_dim", file);
  const int64_t in_ch = config_int(c, "in_channels", file);
  const int64_t audio_ch = config_int(c, "audio_in_channels", file);
  const int64_t text_dim = config_int(c, "text_dim", file);
  const int64_t freq_dim = config_int(c, "freq_dim", file);
  const int64_t t_hidden = config_int(c, "time_embed_hidden_dim", file);
  const int64_t t_embed = config_int(c, "time_embed_dim", file);
  const int64_t rope_freq = config_int(c, "rope_freq_dim", file);
  const auto patch = io::config_int_list(c, "patch_size", file);
  const int64_t rank = io::config_int_or(c, "adaln_rank", file, 0);

  // The validation FastVideo applies to the same config (§1.2).
  H3_CHECK(patch.size() == 3, ErrorCode::kInvalidFile, file,
           ": field 'patch_size' must have 3 entries (t, h, w)");
  H3_CHECK(heads > 0 && head_dim > 0 && hidden > 0 && ffn > 0 && t_embed > 0,
           ErrorCode::kInvalidFile, file,
           ": num_attention_heads, attention_head_dim, hidden_size, ffn_dim and time_embed_dim "
           "must be positive");
  H3_CHECK(6 * rope_freq <= head_dim, ErrorCode::kInvalidFile, file,
           ": field 'rope_freq_dim' gives a rotary width 6*", rope_freq, " = ", 6 * rope_freq,
           " wider than attention_head_dim ", head_dim);
  H3_CHECK(!c.contains("adaln_rank") || c["adaln_rank"].is_null() || (rank > 0 && rank <= t_embed),
           ErrorCode::kInvalidFile, file,
           ": field 'adaln_rank' must be in (0, time_embed_dim = ", t_embed, "], got ", rank);

  const int64_t inner = heads * head_dim;
  const int64_t patch_dim = in_ch * patch[0] * patch[1] * patch[2];
  // AdaLN rows: [modality (video, text, audio)] x [6 chunks] x [hidden] (§1.3).
  const int64_t adaln_rows = 3 * 6 * hidden;
  const DType adaln_dtype = rank > 0 ? DType::kF16 : DType::kBF16;
  const int64_t adaln_in = rank > 0 ? rank : t_embed;

  Schema s;
  s.family = "h3_dit";
  auto add = [&s](std::string name, Shape shape, DType dt) {
    s.tensors.push_back({std::move(name), std::move(shape), dt});
  };
  const DType f32 = DType::kF32, bf16 = DType::kBF16;
  add("proj_in.weight", {hidden, patch_dim}, f32);
  add("proj_in.bias", {hidden}, f32);
  add("audio_proj_in.weight", {hidden, audio_ch}, f32);
  add("audio_proj_in.bias", {hidden}, f32);
  add("context_embedder.weight", {hidden, text_dim}, bf16);
  add("context_embedder.bias", {hidden}, bf16);
  add("time_embedder.linear_1.weight", {t_hidden, freq_dim}, f32);
  add("time_embedder.linear_1.bias", {t_hidden}, f32);
  add("time_embedder.linear_2.weight", {t_embed, t_hidden}, f32);
  add("time_embedder.linear_2.bias", {t_embed}, f32);
  if (rank > 0) add("adaln_basis.weight", {rank, t_embed}, DType::kF16);

  // Attention + SwiGLU body shared by the refiner and the main blocks (no biases, §1.3).
  auto add_body = [&](const std::string& p) {
    add(p + "norm1.weight", {hidden}, bf16);
    add(p + "attn.to_q.weight", {inner, hidden}, bf16);
    add(p + "attn.to_k.weight", {inner, hidden}, bf16);
    add(p + "attn.to_v.weight", {inner, hidden}, bf16);
    add(p + "attn.norm_q.weight", {head_dim}, bf16);
    add(p + "attn.norm_k.weight", {head_dim}, bf16);
    add(p + "attn.to_out.0.weight", {hidden, inner}, bf16);
    add(p + "norm2.weight", {hidden}, bf16);
    add(p + "ff.net.0.proj.weight", {2 * ffn, hidden}, bf16);  // [value | gate]
    add(p + "ff.net.2.weight", {hidden, ffn}, bf16);
  };
  for (int64_t j = 0; j < refiner; ++j) {
    add_body("token_refiner.refiner_blocks." + std::to_string(j) + ".");
  }
  add("token_refiner.final_norm.weight", {hidden}, bf16);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "transformer_blocks." + std::to_string(i) + ".";
    add_body(p);
    add(p + "adaln_proj.linear.weight", {adaln_rows, adaln_in}, adaln_dtype);
    add(p + "adaln_proj.linear.bias", {adaln_rows}, adaln_dtype);
    // FastH3 students add trained VSA compression gates (§1.6); the base release has none.
    s.tensors.push_back({p + "attn.to_gate_compress.weight", {inner, hidden}, bf16, true, true});
  }
  add("norm_out.norm.weight", {hidden}, bf16);
  add("norm_out.linear.weight", {2 * hidden, adaln_in}, adaln_dtype);  // [shift | scale]
  add("norm_out.linear.bias", {2 * hidden}, adaln_dtype);
  add("proj_out.weight", {patch_dim, hidden}, f32);
  add("proj_out.bias", {patch_dim}, f32);
  add("audio_proj_out.weight", {audio_ch, hidden}, f32);
  add("audio_proj_out.bias", {audio_ch}, f32);
  return s;
}

}  // namespace h3::models
