// Tensor inventory of AutoencoderKLMiniMaxH3 (vae/, all fp32): the causal 3-D CNN encoder
// (h3_components_spec.md §2.3), quant/post-quant 1x1x1 convs, and the ViT decoder (§2.6).
#include "core/status.h"
#include "models/schema.h"

namespace h3::models {

Schema video_vae_schema(const nlohmann::json& c, const std::string& file) {
  using io::config_int;
  const int64_t in_ch = config_int(c, "in_channels", file);
  const int64_t out_ch = config_int(c, "out_channels", file);
  const int64_t latent = config_int(c, "latent_channels", file);
  const int64_t per_block = config_int(c, "layers_per_block", file);
  const auto boc = io::config_int_list(c, "block_out_channels", file);
  const auto sdf = io::config_int_list(c, "spatial_downsample_factors", file);
  const auto tdf = io::config_int_list(c, "temporal_downsample_factors", file);
  const int64_t dec_layers = config_int(c, "decoder_num_layers", file);
  const int64_t dec_heads = config_int(c, "decoder_num_attention_heads", file);
  const int64_t dec_head_dim = config_int(c, "decoder_attention_head_dim", file);
  const int64_t registers = config_int(c, "decoder_num_register_tokens", file);
  const int64_t ffn_mult = config_int(c, "decoder_ffn_mult", file);

  H3_CHECK(!boc.empty() && sdf.size() == boc.size() && tdf.size() == boc.size(),
           ErrorCode::kInvalidFile, file,
           ": 'block_out_channels', 'spatial_downsample_factors' and 'temporal_downsample_factors' "
           "must be non-empty lists of equal length");
  int64_t spatial = 1, temporal = 1;
  for (size_t i = 0; i < boc.size(); ++i) {
    H3_CHECK(sdf[i] >= 1 && tdf[i] >= 1, ErrorCode::kInvalidFile, file,
             ": downsample factors must be >= 1");
    spatial *= sdf[i];
    temporal *= tdf[i];
  }

  Schema s;
  s.family = "video_vae";
  auto add = [&s](std::string name, Shape shape) {
    s.tensors.push_back({std::move(name), std::move(shape), DType::kF32});
  };
  auto add_conv = [&](const std::string& p, int64_t cout, int64_t cin, int64_t k) {
    add(p + "weight", {cout, cin, k, k, k});
    add(p + "bias", {cout});
  };
  auto add_norm = [&](const std::string& p, int64_t ch) {
    add(p + "weight", {ch});
    add(p + "bias", {ch});
  };

  // Encoder: conv_in, per level `layers_per_block` ResNets (1x1x1 shortcut iff the width changes)
  // and a strided downsampler where the level reduces space or time, then GN + conv_out to
  // mean ++ logvar.
  add_conv("encoder.conv_in.", boc[0], in_ch, 3);
  int64_t ch = boc[0];
  for (size_t i = 0; i < boc.size(); ++i) {
    const std::string p = "encoder.down_blocks." + std::to_string(i) + ".";
    for (int64_t j = 0; j < per_block; ++j) {
      const std::string r = p + "resnets." + std::to_string(j) + ".";
      add_norm(r + "norm1.", ch);
      add_conv(r + "conv1.", boc[i], ch, 3);
      add_norm(r + "norm2.", boc[i]);
      add_conv(r + "conv2.", boc[i], boc[i], 3);
      if (ch != boc[i]) add_conv(r + "conv_shortcut.", boc[i], ch, 1);
      ch = boc[i];
    }
    if (sdf[i] * tdf[i] > 1) add_conv(p + "downsamplers.0.conv.", boc[i], boc[i], 3);
  }
  add_norm("encoder.norm_out.", ch);
  add_conv("encoder.conv_out.", 2 * latent, ch, 3);
  add_conv("quant_conv.", 2 * latent, 2 * latent, 1);
  add_conv("post_quant_conv.", latent, latent, 1);

  // Decoder (ViT): tokens of `latent` features -> width, registers, pre-norm blocks with
  // LayerScale, SwiGLU FF fused as [value | gate], LayerNorm and a head to pixel patches.
  const int64_t width = dec_heads * dec_head_dim;
  const int64_t ff = ffn_mult * width;
  add("decoder.proj_in.weight", {width, latent});
  add("decoder.proj_in.bias", {width});
  add("decoder.register_tokens", {1, registers, width});
  for (int64_t i = 0; i < dec_layers; ++i) {
    const std::string p = "decoder.transformer_blocks." + std::to_string(i) + ".";
    add(p + "norm1.weight", {width});
    for (const char* m : {"to_q", "to_k", "to_v", "to_out.0"}) {
      add(p + "attn." + m + ".weight", {width, width});
      add(p + "attn." + m + ".bias", {width});
    }
    add(p + "scale1", {width});
    add(p + "norm2.weight", {width});
    add(p + "ff.net.0.proj.weight", {2 * ff, width});
    add(p + "ff.net.0.proj.bias", {2 * ff});
    add(p + "ff.net.2.weight", {width, ff});
    add(p + "ff.net.2.bias", {width});
    add(p + "scale2", {width});
  }
  add_norm("decoder.norm_out.", width);
  const int64_t patch_out = out_ch * temporal * spatial * spatial;
  add("decoder.proj_out.weight", {patch_out, width});
  add("decoder.proj_out.bias", {patch_out});
  return s;
}

}  // namespace h3::models
