#include "models/video_vae/video_vae_decoder.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/cuda_stream.h"
#include "core/status.h"
#include "models/video_vae/video_vae_assembly.h"
#include "ops/cuda/vae_assemble.h"
#include "ops/fp8.h"
#include "ops/ops.h"

namespace h3::video_vae {
namespace {

Tensor as_dtype(const Tensor& x, DType dt) { return x.dtype() == dt ? x : ops::cast(x, dt); }

}  // namespace

DecoderRope decoder_rope(const VideoVaeConfig& c, int64_t t, int64_t h, int64_t w) {
  const int64_t rot = c.decoder_rotary_dim();
  const int64_t f = rot / 6;  // frequencies per axis
  const int64_t suffix = c.decoder_num_register_tokens + 1;
  const int64_t patches = t * h * w;
  const int64_t n = patches + suffix;
  // inv_freq_k = 1 / theta^(k * 6/rot) in float32 (torch.arange(0, 1, 6/rot) then pow, §2.6).
  const double step = 6.0 / static_cast<double>(rot);
  std::vector<float> inv_freq(static_cast<size_t>(f));
  const float theta = static_cast<float>(c.decoder_rope_theta);
  for (int64_t k = 0; k < f; ++k) {
    const float e = static_cast<float>(static_cast<double>(k) * step);
    inv_freq[k] = 1.0f / std::pow(theta, e);
  }
  // Per axis of size s: 2 * ((i + 0.5) / s) - 1 in float32, relative to the window.
  auto grid = [](int64_t s) {
    std::vector<float> g(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i)
      g[i] = 2.0f * ((static_cast<float>(i) + 0.5f) / static_cast<float>(s)) - 1.0f;
    return g;
  };
  const std::vector<float> gt = grid(t), gy = grid(h), gx = grid(w);
  // (2*pi as a Python float) times a float32 tensor rounds the scalar to float32 first.
  const float two_pi = static_cast<float>(2.0 * M_PI);
  std::vector<float> cosv(static_cast<size_t>(n * rot)), sinv(static_cast<size_t>(n * rot));
  const int64_t half = rot / 2;
  for (int64_t i = 0; i < n; ++i) {
    float pos[3] = {0.0f, 0.0f, 0.0f};
    if (i < patches) {
      pos[0] = gt[i / (h * w)];
      pos[1] = gy[(i / w) % h];
      pos[2] = gx[i % w];
    }
    float* co = cosv.data() + i * rot;
    float* si = sinv.data() + i * rot;
    for (int a = 0; a < 3; ++a) {
      for (int64_t k = 0; k < f; ++k) {
        const float angle = (two_pi * pos[a]) * inv_freq[k];
        const float cv = std::cos(angle), sv = std::sin(angle);
        co[a * f + k] = co[half + a * f + k] = cv;
        si[a * f + k] = si[half + a * f + k] = sv;
      }
    }
  }
  return {Tensor::from_f32(cosv, {n, rot}), Tensor::from_f32(sinv, {n, rot})};
}

namespace {

// The LayerScale residual x + scale * float(branch) (§2.6): on CUDA one kernel with the same two
// float32 roundings (ops/cuda/vae_assemble.h), saving the widened branch and the product passes;
// H3_VAE_FUSED_RESIDUAL=0 or the CPU take the op composition.
Tensor layerscale_residual(const Tensor& x, const Tensor& branch, const Tensor& scale) {
  if (x.device().is_cuda() && fused_residual_enabled() && x.dim() == 2 && x.dtype() == DType::kF32 &&
      x.is_contiguous() && branch.is_contiguous() && branch.shape() == x.shape() &&
      scale.dtype() == DType::kF32 && scale.is_contiguous()) {
    return ops::cuda::vae_layerscale_residual(x, branch, scale);
  }
  return ops::add(x, ops::mul(as_dtype(branch, DType::kF32), scale));
}

// Accumulates wall time into a DecoderProfile field at each lap; synchronizes the device first so
// the time belongs to the stage that queued the work. A no-op without a profile.
class StageClock {
 public:
  StageClock(DecoderProfile* p, Device d) : p_(p), device_(d) {
    if (p_) last_ = now();
  }
  void lap(double DecoderProfile::*field) {
    if (!p_) return;
    const double t = now();
    p_->*field += t - last_;
    last_ = t;
  }

 private:
  double now() const {
    if (device_.is_cuda()) Stream().synchronize();  // the ops run on the legacy default stream
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  DecoderProfile* p_;
  Device device_;
  double last_ = 0;
};

}  // namespace

Tensor decoder_forward(const VideoVaeConfig& c, const DecoderWeights& wt, DType gd, const Tensor& z,
                       DecoderProfile* profile, const DecoderAttention& attention) {
  return decoder_forward_batch(c, wt, gd, {z}, profile, attention)[0];
}

int64_t decoder_activation_bytes(const VideoVaeConfig& c, DType gd, int64_t rows) {
  const int64_t d = c.decoder_width(), f = c.decoder_ffn_dim();
  const int64_t es = static_cast<int64_t>(dtype_size(gd));
  // Float32 stream: x, its norm, the promoted branch, the LayerScale product, the sum (5 x d);
  // GEMM dtype: n1, q, k, v, normed q/k, o, attn (8 x d), ff_in (2F), SwiGLU (F), ff_out (d).
  return rows * (5 * d * 4 + (9 * d + 3 * f) * es);
}

namespace {
// The activation budget of an automatic tile batch on CUDA: 4 tiles of 1,797 rows at the release's
// 256 px tiles (228 MB each by decoder_activation_bytes), 7,188 rows per GEMM, already enough to
// fill the GPU. On one H200 at 1344x768x124 (`h3 bench vae`, bench/RESULTS.md) batches of 4 took
// 3.892 s and batches of 14 (a 4 GiB budget) 3.851 s, while the pool's high-water mark fell from
// 9.45 to 8.10 GiB (weights and the float32 video included); the streamed decode of `h3 generate`
// then stays under the reference's 7.0 GB.
constexpr int64_t kAutoTileBatchBudget = 1LL << 30;
}  // namespace

int64_t auto_tile_batch(const VideoVaeConfig& config, DType gemm_dtype, int64_t tiles, int64_t rows_per_tile,
                        uint64_t device_free) {
  if (tiles <= 1) return 1;
  const int64_t budget = std::min<int64_t>(kAutoTileBatchBudget, static_cast<int64_t>(device_free / 2));
  const int64_t per_tile = std::max<int64_t>(1, decoder_activation_bytes(config, gemm_dtype, rows_per_tile));
  return std::clamp<int64_t>(budget / per_tile, 1, tiles);
}

std::vector<Tensor> decoder_forward_batch(const VideoVaeConfig& c, const DecoderWeights& wt, DType gd,
                                          const std::vector<Tensor>& tiles, DecoderProfile* profile,
                                          const DecoderAttention& attention) {
  H3_CHECK(!tiles.empty(), ErrorCode::kInvalidArgument, "video VAE decoder: no tiles to decode");
  const int64_t width = c.decoder_width();
  const int64_t heads = c.decoder_num_attention_heads, hd = c.decoder_attention_head_dim;
  const int rot = static_cast<int>(c.decoder_rotary_dim());
  const float eps = static_cast<float>(c.decoder_norm_eps);
  const int64_t suffix = c.decoder_num_register_tokens + 1;
  const Device dev = tiles[0].device();
  StageClock clock(profile, dev);

  struct TileRows {
    int64_t t, h, w, patches, begin;  // begin: the tile's first row in the stacked sequence
  };
  std::vector<TileRows> geo;
  std::vector<Tensor> stream_parts, cos_parts, sin_parts;
  std::vector<int64_t> cu = {0};
  const Tensor zero = Tensor::zeros({1, width}, DType::kF32, dev);
  for (const Tensor& z : tiles) {
    H3_CHECK(z.dim() == 4 && z.size(0) == c.latent_channels && z.device() == dev,
             ErrorCode::kInvalidArgument, "video VAE decoder: expected latents [", c.latent_channels,
             ", t, h, w] on ", dev.str(), ", got ", z.desc());
    const int64_t t = z.size(1), h = z.size(2), w = z.size(3);
    const int64_t patches = t * h * w;
    geo.push_back({t, h, w, patches, cu.back()});
    // post_quant_conv (a 1x1x1 conv: a linear over channels) on tokens ordered (t, y, x), proj_in.
    const Tensor tokens = ops::copy(z.permute({1, 2, 3, 0})).view({patches, c.latent_channels});
    clock.lap(&DecoderProfile::other_s);
    Tensor hcur = ops::linear(as_dtype(tokens, gd), wt.post_quant_w, &wt.post_quant_b);
    hcur = ops::linear(as_dtype(hcur, gd), wt.proj_in_w, &wt.proj_in_b);
    clock.lap(&DecoderProfile::gemm_s);
    // Registers and one zero token follow the patches; float32 registers make the stream float32.
    stream_parts.push_back(as_dtype(hcur, DType::kF32));
    stream_parts.push_back(wt.register_tokens);
    stream_parts.push_back(zero);
    const DecoderRope rope = decoder_rope(c, t, h, w);
    cos_parts.push_back(rope.cos);
    sin_parts.push_back(rope.sin);
    cu.push_back(cu.back() + patches + suffix);
  }
  Tensor x = ops::concat(stream_parts, 0);
  const int64_t n = x.size(0);
  // The reference casts cos/sin to the q dtype before rotating (§2.6 step 4).
  const Tensor cos_all = cos_parts.size() == 1 ? cos_parts[0] : ops::concat(cos_parts, 0);
  const Tensor sin_all = sin_parts.size() == 1 ? sin_parts[0] : ops::concat(sin_parts, 0);
  const Tensor cos = as_dtype(cos_all.to(dev), gd), sin = as_dtype(sin_all.to(dev), gd);
  ops::AttentionParams ap;
  if (tiles.size() > 1) ap.cu_seqlens = cu;  // one tile: the plain dense call, as before batching
  ap.kernel = attention.kernel;
  bool report = attention.used != nullptr;
  // The GEMMs over the stacked rows keep the tiles apart (ops::linear_segmented): on the CPU each
  // tile's rows go through the very GEMM call its own forward makes, so a batch decodes every tile
  // bit for bit as alone, whatever kernel the BLAS would pick for the larger row count.
  auto linear = [&cu](const Tensor& in, const Tensor& w, const Tensor& b) {
    return ops::linear_segmented(in, w, &b, cu);
  };
  // A block projection, on the FP8 tensor cores when its weight is E4M3 (--vae-dtype fp8; rows
  // quantized per token, which keeps the tiles apart too); `xq` carries the quantized input from
  // one projection of the same input to the next (q, k and v).
  auto project = [&linear](const Tensor& in, ops::Fp8Activation& xq, const Tensor& w, const Tensor& scale,
                           const Tensor& b) {
    if (w.dtype() == DType::kF8E4M3) return ops::linear_projection(in, xq, w, scale, &b);
    return linear(in, w, b);
  };
  clock.lap(&DecoderProfile::other_s);

  // Each block's first norm comes from the previous block's last residual (one pass for both).
  Tensor n1;
  for (size_t li = 0; li < wt.blocks.size(); ++li) {
    const DecoderBlockWeights& b = wt.blocks[li];
    // Attention branch: RMSNorm in float32, q/k/v in the GEMM dtype, per-head q/k RMSNorm (no
    // affine) and partial RoPE, dense attention per tile, output projection, LayerScale.
    if (li == 0) n1 = as_dtype(ops::rms_norm(x, &b.norm1, eps), gd);
    clock.lap(&DecoderProfile::norm_s);
    ops::Fp8Activation n1q, oq, n2q, actq;
    Tensor q = project(n1, n1q, b.q_w, b.q_s, b.q_b).view({n, heads, hd});
    Tensor k = project(n1, n1q, b.k_w, b.k_s, b.k_b).view({n, heads, hd});
    const Tensor v = project(n1, n1q, b.v_w, b.v_s, b.v_b).view({n, heads, hd});
    clock.lap(&DecoderProfile::gemm_s);
    q = ops::qk_norm_rope(q, nullptr, eps, cos, sin, rot);
    k = ops::qk_norm_rope(k, nullptr, eps, cos, sin, rot);
    clock.lap(&DecoderProfile::norm_s);
    if (report) {  // every layer's q/k/v share one shape and layout: the first answers for all
      *attention.used = ops::attention_kernel_for(q, k, v, ap);
      report = false;
    }
    const Tensor o = ops::attention(q, k, v, ap).view({n, width});
    clock.lap(&DecoderProfile::attention_s);
    const Tensor attn = project(o, oq, b.out_w, b.out_s, b.out_b);
    clock.lap(&DecoderProfile::gemm_s);
    // LayerScale residual and the feed-forward pre-norm (float32, then the GEMM dtype).
    ops::ResidualNorm rn = ops::layerscale_residual_rms_norm(x, attn, b.scale1, &b.norm2, eps, gd);
    x = std::move(rn.x);
    const Tensor n2 = std::move(rn.normed);
    clock.lap(&DecoderProfile::norm_s);
    // Feed-forward branch: SwiGLU with the fused projection split [value | gate].
    const Tensor up = project(n2, n2q, b.ff_in_w, b.ff_in_s, b.ff_in_b);
    clock.lap(&DecoderProfile::gemm_s);
    // An FP8 output projection is the product's only reader: straight to E4M3 (the same bits as
    // swiglu, then quantize), never written in f16.
    Tensor act;
    if (b.ff_out_w.dtype() == DType::kF8E4M3) {
      actq = ops::swiglu_fp8(up, ops::Fp8ActScaling::kPerToken);
    } else {
      act = ops::swiglu(up);
    }
    clock.lap(&DecoderProfile::other_s);
    const Tensor ff = project(act, actq, b.ff_out_w, b.ff_out_s, b.ff_out_b);
    clock.lap(&DecoderProfile::gemm_s);
    if (li + 1 < wt.blocks.size()) {
      rn = ops::layerscale_residual_rms_norm(x, ff, b.scale2, &wt.blocks[li + 1].norm1, eps, gd);
      x = std::move(rn.x);
      n1 = std::move(rn.normed);
      clock.lap(&DecoderProfile::norm_s);
    } else {
      x = layerscale_residual(x, ff, b.scale2);
      clock.lap(&DecoderProfile::other_s);
    }
  }

  const Tensor normed = ops::layer_norm(x, &wt.norm_out_w, &wt.norm_out_b, eps);
  clock.lap(&DecoderProfile::norm_s);
  const int64_t pt = c.temporal_ratio(), ps = c.spatial_ratio(), co = c.out_channels;
  std::vector<Tensor> out;
  for (const TileRows& g : geo) {
    const Tensor rows = normed.slice(0, g.begin, g.begin + g.patches);
    const Tensor head = ops::linear(as_dtype(rows.is_contiguous() ? rows : ops::copy(rows), gd),
                                    wt.proj_out_w, &wt.proj_out_b);
    clock.lap(&DecoderProfile::gemm_s);
    // Un-patch: [t, h, w, C, pt, ps, ps] -> [C, t, pt, h, ps, w, ps] (§2.6 step 5).
    const Tensor un = ops::copy(head.view({g.t, g.h, g.w, co, pt, ps, ps}).permute({3, 0, 4, 1, 5, 2, 6}));
    out.push_back(un.view({co, g.t * pt, g.h * ps, g.w * ps}));
    clock.lap(&DecoderProfile::other_s);
  }
  if (profile) {
    profile->calls += 1;
    profile->tiles += static_cast<int64_t>(tiles.size());
    profile->rows += n;
  }
  return out;
}

}  // namespace h3::video_vae
