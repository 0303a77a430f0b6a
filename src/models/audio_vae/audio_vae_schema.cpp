// Tensor inventory of AutoencoderKLMiniMaxH3Audio (audio_vae/, all fp32): the DAC-style encoder
// (h3_components_spec.md §3.3), the attention pre-block and posterior projections, and the
// BigVGAN-v2 decoder (§3.4). Every weight-normed conv stores `weight_g` / `weight_v` (§3.2); the
// anti-aliasing filters and the zero key bias are persistent buffers and are stored too.
#include "core/status.h"
#include "models/schema.h"

namespace h3::models {

namespace {
// Anti-aliased activations resample by 2 with a 12-tap Kaiser-sinc filter (§3.4).
constexpr int64_t kAliasFilterTaps = 12;
}  // namespace

Schema audio_vae_schema(const nlohmann::json& c, const std::string& file) {
  using io::config_int;
  const int64_t enc_dim = config_int(c, "encoder_dim", file);
  const auto enc_rates = io::config_int_list(c, "encoder_rates", file);
  const int64_t latent_dim = config_int(c, "latent_dim", file);
  const int64_t latent = config_int(c, "latent_channels", file);
  const int64_t dec_dim = config_int(c, "decoder_dim", file);
  const auto dec_rates = io::config_int_list(c, "decoder_rates", file);
  const auto dec_kernels = io::config_int_list(c, "decoder_kernel_sizes", file);
  const auto res_kernels = io::config_int_list(c, "resblock_kernel_sizes", file);
  const nlohmann::json& dil = io::config_field(c, "resblock_dilation_sizes", file);

  H3_CHECK(dec_rates.size() == dec_kernels.size(), ErrorCode::kInvalidFile, file,
           ": 'decoder_rates' and 'decoder_kernel_sizes' must have equal length");
  H3_CHECK(dil.is_array() && dil.size() == res_kernels.size(), ErrorCode::kInvalidFile, file,
           ": 'resblock_dilation_sizes' must hold one list per entry of 'resblock_kernel_sizes'");
  std::vector<size_t> n_dil;
  for (const auto& d : dil) {
    H3_CHECK(d.is_array() && !d.empty(), ErrorCode::kInvalidFile, file,
             ": 'resblock_dilation_sizes' entries must be non-empty lists");
    n_dil.push_back(d.size());
  }
  H3_CHECK((dec_dim >> dec_rates.size()) >= 1, ErrorCode::kInvalidFile, file, ": decoder_dim ",
           dec_dim, " cannot be halved ", dec_rates.size(), " times");

  Schema s;
  s.family = "audio_vae";
  auto add = [&s](std::string name, Shape shape) {
    s.tensors.push_back({std::move(name), std::move(shape), DType::kF32});
  };
  // Weight-normed Conv1d [out, in, k] (norm per output channel) or ConvTranspose1d [in, out, k]
  // (norm per input channel): g has the first dim of v.
  auto add_wn = [&](const std::string& p, int64_t d0, int64_t d1, int64_t k, int64_t bias) {
    if (bias > 0) add(p + "bias", {bias});
    add(p + "weight_g", {d0, 1, 1});
    add(p + "weight_v", {d0, d1, k});
  };
  auto add_linear = [&](const std::string& p, int64_t out, int64_t in) {
    add(p + "weight", {out, in});
    add(p + "bias", {out});
  };
  auto add_norm = [&](const std::string& p, int64_t ch) {
    add(p + "weight", {ch});
    add(p + "bias", {ch});
  };

  // Encoder: WNConv(1 -> d, k7); per stride s an EncoderBlock (3 residual units with Snake, Snake,
  // WNConv(d -> 2d, k 2s)); Snake; WNConv(-> latent_dim, k3).
  add_wn("encoder.block.0.", enc_dim, 1, 7, enc_dim);
  int64_t d = enc_dim;
  for (size_t i = 0; i < enc_rates.size(); ++i) {
    const std::string p = "encoder.block." + std::to_string(i + 1) + ".block.";
    for (int u = 0; u < 3; ++u) {
      const std::string r = p + std::to_string(u) + ".block.";
      add(r + "0.alpha", {1, d, 1});
      add_wn(r + "1.", d, d, 7, d);
      add(r + "2.alpha", {1, d, 1});
      add_wn(r + "3.", d, d, 1, d);
    }
    add(p + "3.alpha", {1, d, 1});
    add_wn(p + "4.", 2 * d, d, 2 * enc_rates[i], 2 * d);
    d *= 2;
  }
  const std::string tail = "encoder.block." + std::to_string(enc_rates.size() + 1) + ".";
  add(tail + "alpha", {1, d, 1});
  add_wn("encoder.block." + std::to_string(enc_rates.size() + 2) + ".", latent_dim, d, 3,
         latent_dim);

  // Pre-block: u = proj(LN3(x)) + attn(LN1(x)); u += MLP(LN2(u)) (GeGLU with its own norm).
  add_norm("pre_block.norm1.", latent_dim);
  add("pre_block.attn.qkv.weight", {3 * latent_dim, latent_dim});
  add("pre_block.attn.q_bias", {latent_dim});
  add("pre_block.attn.zero_k_bias", {latent_dim});
  add("pre_block.attn.v_bias", {latent_dim});
  add_linear("pre_block.attn.proj.", latent, latent);
  add_norm("pre_block.norm3.", latent_dim);
  add_linear("pre_block.proj.", latent, latent_dim);
  add_norm("pre_block.norm2.", latent);
  add_norm("pre_block.mlp.norm.", latent);
  add_linear("pre_block.mlp.w0.", 2 * latent, latent);
  add_linear("pre_block.mlp.w1.", 2 * latent, latent);
  add_linear("pre_block.mlp.w2.", latent, 2 * latent);
  add("mean_proj.weight", {latent, latent, 1});
  add("mean_proj.bias", {latent});
  add("logs_proj.weight", {latent, latent, 1});
  add("logs_proj.bias", {latent});

  // Decoder: 1x1 conv to latent_dim, conv_pre, per rate a transposed conv halving the width and
  // one AMP block per resblock kernel, then an anti-aliased SnakeBeta and conv_post (no bias).
  add("dec_in_proj.weight", {latent_dim, latent, 1});
  add("dec_in_proj.bias", {latent_dim});
  add_wn("decoder.conv_pre.", dec_dim, latent_dim, 7, dec_dim);
  auto add_activation = [&](const std::string& p, int64_t ch) {
    add(p + "act.alpha", {ch});
    add(p + "act.beta", {ch});
    add(p + "upsample.filter", {1, 1, kAliasFilterTaps});
    add(p + "downsample.lowpass.filter", {1, 1, kAliasFilterTaps});
  };
  int64_t ch = dec_dim;
  for (size_t i = 0; i < dec_rates.size(); ++i) {
    add_wn("decoder.ups." + std::to_string(i) + ".0.", ch, ch / 2, dec_kernels[i], ch / 2);
    ch /= 2;
  }
  ch = dec_dim;
  for (size_t i = 0; i < dec_rates.size(); ++i) {
    ch /= 2;
    for (size_t j = 0; j < res_kernels.size(); ++j) {
      const std::string p = "decoder.resblocks." + std::to_string(i * res_kernels.size() + j) + ".";
      for (size_t a = 0; a < 2 * n_dil[j]; ++a)
        add_activation(p + "activations." + std::to_string(a) + ".", ch);
      for (const char* conv : {"convs1.", "convs2."}) {
        for (size_t m = 0; m < n_dil[j]; ++m) {
          add_wn(p + conv + std::to_string(m) + ".", ch, ch, res_kernels[j], ch);
        }
      }
    }
  }
  add_activation("decoder.activation_post.", ch);
  add_wn("decoder.conv_post.", 1, ch, 7, 0);
  return s;
}

}  // namespace h3::models
