#include "models/audio_vae/audio_vae_encoder.h"

#include <vector>

#include "core/status.h"
#include "ops/ops.h"

namespace h3::audio_vae {
namespace {

// nn.LayerNorm default (§3.3: eps 1e-5, affine).
constexpr float kLayerNormEps = 1e-5f;

// Convolutions accumulate in float64 on the CPU, as in the decoder (ops.h, Conv1dParams).
Tensor conv(const Tensor& x, const ConvWeights& c, ops::Conv1dParams p) {
  p.f64_accumulate = true;
  return ops::conv1d(x, c.w, c.bias(), p);
}

// DAC residual unit: x + conv2(snake(conv1(snake(x)))); k7 with "same" padding 3d keeps the
// length, so the reference's centre crop of x never triggers.
Tensor residual_unit(const ResidualUnitWeights& u, const Tensor& x) {
  const int d = static_cast<int>(u.dilation);
  Tensor y = ops::snake(x, u.alpha1);
  y = conv(y, u.conv1, {.stride = 1, .padding = 3 * d, .dilation = d});
  y = ops::snake(y, u.alpha2);
  y = conv(y, u.conv2, {});
  return ops::add(x, y);
}

Tensor layer_norm(const Tensor& x, const Tensor& w, const Tensor& b) {
  return ops::layer_norm(x, &w, &b, kLayerNormEps);
}

// Rows [T, 3C] of one batch item -> the q, k or v part [T, H, D] (contiguous copy).
Tensor qkv_part(const Tensor& qkv_item, int part, int64_t heads, int64_t head_dim) {
  const int64_t t = qkv_item.size(0), c = heads * head_dim;
  return ops::copy(qkv_item.slice(1, part * c, (part + 1) * c)).view({t, heads, head_dim});
}

}  // namespace

Tensor encoder_trunk(const EncoderWeights& w, const Tensor& x) {
  Tensor h = conv(x, w.conv_in, {.stride = 1, .padding = 3});
  for (const EncoderBlockWeights& blk : w.blocks) {
    for (const ResidualUnitWeights& u : blk.units) h = residual_unit(u, h);
    h = ops::snake(h, blk.alpha);
    const int s = static_cast<int>(blk.stride);
    h = conv(h, blk.down, {.stride = s, .padding = (s + 1) / 2});  // padding ceil(s/2)
  }
  h = ops::snake(h, w.alpha_out);
  return conv(h, w.conv_out, {.stride = 1, .padding = 1});
}

Tensor pre_block_forward(const AudioVaeConfig& config, const PreBlockWeights& w, const Tensor& h) {
  H3_CHECK(h.dim() == 3 && h.size(2) == config.latent_dim, ErrorCode::kInvalidArgument,
           "audio VAE pre_block: expected [B, T, ", config.latent_dim, "], got ", h.desc());
  const int64_t batch = h.size(0), t = h.size(1);
  const int64_t heads = config.num_attention_heads, hd = config.head_dim();

  // proj(norm3(x)): the direct projection to the latent width.
  const Tensor direct = ops::linear(layer_norm(h, w.norm3_w, w.norm3_b), w.proj_w, &w.proj_b);

  // attn(norm1(x)): causal attention over time, per batch item (SDPA scale 1/sqrt(head_dim)).
  const Tensor qkv = ops::linear(layer_norm(h, w.norm1_w, w.norm1_b), w.qkv_w, &w.qkv_b);
  std::vector<Tensor> items;
  ops::AttentionParams ap;
  ap.causal = true;
  for (int64_t b = 0; b < batch; ++b) {
    const Tensor rows = qkv.select(0, b);  // [T, 3C]
    const Tensor o = ops::attention(qkv_part(rows, 0, heads, hd), qkv_part(rows, 1, heads, hd),
                                    qkv_part(rows, 2, heads, hd), ap);
    items.push_back(o.view({1, t, heads * hd}));
  }
  const Tensor attn = batch == 1 ? items[0] : ops::concat(items, 0);  // [B, T, H*D]
  // mean over heads and adaptive_avg_pool1d(head_dim -> latent_channels) as one averaging map,
  // then the attention's own Linear(latent -> latent).
  const Tensor pooled = ops::linear(attn, w.head_pool);
  const Tensor attn_out = ops::linear(pooled, w.attn_proj_w, &w.attn_proj_b);
  Tensor u = ops::add(direct, attn_out);

  // u + MLP(norm2(u)); the GeGLU MLP normalizes once more with its own LayerNorm.
  Tensor m = layer_norm(layer_norm(u, w.norm2_w, w.norm2_b), w.mlp_norm_w, w.mlp_norm_b);
  const Tensor gate = ops::gelu(ops::linear(m, w.w0, &w.b0), /*tanh_approx=*/true);
  const Tensor value = ops::linear(m, w.w1, &w.b1);
  m = ops::linear(ops::mul(gate, value), w.w2, &w.b2);
  return ops::add(u, m);
}

AudioPosterior encode_padded(const AudioVaeConfig& config, const EncoderWeights& w, const Tensor& x,
                             EncodeTrace* trace) {
  const Tensor trunk = encoder_trunk(w, x);  // [B, latent_dim, T]
  const Tensor u = pre_block_forward(config, w.pre_block, ops::copy(trunk.permute({0, 2, 1})));
  const Tensor uc = ops::copy(u.permute({0, 2, 1}));  // [B, latent_channels, T]
  AudioPosterior post;
  post.mean = conv(uc, w.mean_proj, {});
  post.logs = conv(uc, w.logs_proj, {});
  if (trace) {
    trace->encoder_out = trunk;
    trace->pre_block_out = u;
  }
  return post;
}

}  // namespace h3::audio_vae
