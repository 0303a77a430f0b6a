// Backend-ops cases: attention (plain, causal, grouped-query, block-diagonal cu_seqlens, additive
// mask, custom scale) against a naive float64 softmax(QK^T)V.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "backend_ops.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"

namespace h3::test::ops {
namespace {

struct AttnShape {
  int64_t s, skv, hq, hkv, d;
  bool causal = false;
  std::vector<int64_t> cu = {};  // cu_seqlens
  bool mask = false;
  float scale = 0.0f;
};

std::vector<double> ref_attention(const std::vector<Tensor>& in, const AttnShape& a) {
  const std::vector<double> q = f64(in[0]), k = f64(in[1]), v = f64(in[2]);
  const std::vector<double> mask = a.mask ? f64(in[3]) : std::vector<double>();
  const double scale = a.scale != 0.0f ? a.scale : 1.0 / std::sqrt(double(a.d));
  const int64_t group = a.hq / a.hkv;
  std::vector<int64_t> seg_of(static_cast<size_t>(std::max(a.s, a.skv)), 0);
  for (size_t i = 0; i + 1 < a.cu.size(); ++i)
    for (int64_t j = a.cu[i]; j < a.cu[i + 1]; ++j) seg_of[j] = static_cast<int64_t>(i);
  std::vector<double> out(static_cast<size_t>(a.s * a.hq * a.d), 0.0);
  std::vector<double> w(static_cast<size_t>(a.skv));
  for (int64_t h = 0; h < a.hq; ++h) {
    const int64_t hk = h / group;
    for (int64_t i = 0; i < a.s; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < a.skv; ++j) {
        bool allowed = !(a.causal && j > i) && seg_of[i] == seg_of[j];
        double sc = 0;
        for (int64_t e = 0; e < a.d; ++e) sc += q[(i * a.hq + h) * a.d + e] * k[(j * a.hkv + hk) * a.d + e];
        sc *= scale;
        if (a.mask) sc += mask[i * a.skv + j];
        w[j] = allowed ? sc : -std::numeric_limits<double>::infinity();
        mx = std::max(mx, w[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < a.skv; ++j) sum += (w[j] = std::exp(w[j] - mx));
      for (int64_t e = 0; e < a.d; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < a.skv; ++j) acc += w[j] * v[(j * a.hkv + hk) * a.d + e];
        out[(i * a.hq + h) * a.d + e] = acc / sum;
      }
    }
  }
  return out;
}

void add_attention(const std::string& tag, const AttnShape& a, DType t, bool large = false) {
  OpCase c;
  c.op = "attention";
  c.name = "attention_" + tag + "_" + dtype_tag(t) + "_s" + std::to_string(a.s) + "_kv" +
           std::to_string(a.skv) + "_h" + std::to_string(a.hq) + "x" + std::to_string(a.hkv) + "_d" +
           std::to_string(a.d);
  c.dtype = t;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    // Spread of ~±2 in q·k/sqrt(d): peaked enough that the softmax is not nearly uniform.
    std::vector<Tensor> in = {r.normal_tensor({a.s, a.hq, a.d}, t, 0.0f, 1.2f),
                              r.normal_tensor({a.skv, a.hkv, a.d}, t, 0.0f, 1.2f),
                              r.uniform_tensor({a.skv, a.hkv, a.d}, t)};
    if (a.mask) {
      // Random additive biases with about a quarter of the entries blocked, never a whole row.
      std::vector<float> m = r.uniform(a.s * a.skv, -2.0f, 2.0f);
      for (int64_t i = 0; i < a.s; ++i)
        for (int64_t j = 1; j < a.skv; ++j)
          if (m[i * a.skv + j] > 1.0f) m[i * a.skv + j] = -std::numeric_limits<float>::infinity();
      in.push_back(Tensor::from_f32(m, {a.s, a.skv}));
    }
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    h3::ops::AttentionParams p;
    p.causal = a.causal;
    p.cu_seqlens = a.cu;
    p.scale = a.scale;
    return h3::ops::attention(in[0], in[1], in[2], p, a.mask ? &in[3] : nullptr);
  };
  c.reference = [=](const std::vector<Tensor>& in) { return ref_attention(in, a); };
  register_case(std::move(c));
}

void add_cases() {
  for (DType t : {DType::kF32, DType::kBF16}) {
    add_attention("dit", {37, 37, 4, 4, 32}, t);                   // tiny DiT: 4 heads x 32
    add_attention("single", {1, 1, 1, 1, 8}, t);                   // degenerate sizes
    add_attention("qwen_causal_gqa", {23, 23, 4, 2, 16, true}, t);  // tiny Qwen3 text model
    add_attention("vision_varlen", {41, 41, 2, 2, 16, false, {0, 16, 25, 41}}, t);
    add_attention("vae", {29, 29, 2, 2, 64}, t);  // video VAE decoder head dim 64
    add_attention("cross", {5, 31, 3, 1, 24}, t);
    add_attention("mask", {9, 14, 2, 2, 16, false, {}, true}, t);
    add_attention("causal_varlen", {20, 20, 2, 1, 8, true, {0, 7, 20}}, t);
    add_attention("scale", {11, 11, 2, 2, 16, false, {}, false, 0.3f}, t);
    add_attention("long", {300, 300, 2, 2, 32}, t);  // more rows than one CPU row block
    // Enough scores that the CPU shares the heads out over threads (kParallelScores).
    add_attention("threads", {1040, 1040, 4, 2, 16, false, {0, 1030, 1040}}, t);
    add_attention("dit_big", {1024, 1024, 4, 4, 128}, t, /*large=*/true);
    add_attention("qwen_big", {777, 777, 8, 2, 128, true}, t, /*large=*/true);
  }
  add_attention("vae", {29, 29, 2, 2, 64}, DType::kF16);
  add_attention("audio_causal", {13, 13, 1, 1, 256, true}, DType::kF32);  // audio VAE: causal, hd 256
  add_attention("vae_big", {1797, 1797, 4, 4, 64}, DType::kF16, /*large=*/true);
  // Video VAE tile batches: several decoder tiles stacked, attention within each (uneven sizes).
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16})
    add_attention("vae_tiles", {350, 350, 2, 2, 64, false, {0, 117, 234, 350}}, t);
  add_attention("vae_tiles_big", {3594, 3594, 2, 2, 64, false, {0, 1797, 3594}}, DType::kF16, /*large=*/true);
}
H3_OPS_CASES(add_cases);

// Above the threading threshold the heads run on several threads; each must come out bit for bit
// as the same head run alone (one head: no threads), whatever thread computed it.
TEST(CpuAttention, HeadsOnThreadsEqualEachHeadAlone) {
  const int64_t s = 1100, h = 4, d = 16;
  Rng r(7);
  const std::vector<float> q = r.uniform(s * h * d, -1.5f, 1.5f),
                           k = r.uniform(s * h * d, -1.5f, 1.5f),
                           v = r.uniform(s * h * d, -1.0f, 1.0f);
  const std::vector<float> all =
      h3::ops::attention(Tensor::from_f32(q, {s, h, d}), Tensor::from_f32(k, {s, h, d}),
                         Tensor::from_f32(v, {s, h, d}))
          .to_f32_vector();
  for (int64_t head = 0; head < h; ++head) {
    std::vector<float> qh, kh, vh;
    for (int64_t i = 0; i < s; ++i) {
      const auto at = [&](const std::vector<float>& x) { return x.begin() + (i * h + head) * d; };
      qh.insert(qh.end(), at(q), at(q) + d);
      kh.insert(kh.end(), at(k), at(k) + d);
      vh.insert(vh.end(), at(v), at(v) + d);
    }
    const std::vector<float> one =
        h3::ops::attention(Tensor::from_f32(qh, {s, 1, d}), Tensor::from_f32(kh, {s, 1, d}),
                           Tensor::from_f32(vh, {s, 1, d}))
            .to_f32_vector();
    for (int64_t i = 0; i < s; ++i)
      ASSERT_EQ(std::memcmp(one.data() + i * d, all.data() + (i * h + head) * d, d * sizeof(float)),
                0)
          << "head " << head << ", row " << i;
  }
}

// The CPU softmax's own e^x (vectorizable, not libm's): within 2 ulp of e^x over the whole range
// a max-subtracted score takes, exactly 1 at 0, 0 below -87 and for -inf, NaN kept.
TEST(AttentionSoftmaxExp, WithinTwoUlpOfExp) {
  double worst = 0.0;
  float worst_x = 0.0f;
  for (int i = 0; i <= 4'000'000; ++i) {
    const float x = -87.0f * static_cast<float>(i) / 4'000'000.0f;
    const double want = std::exp(static_cast<double>(x));
    const double rel = std::abs(h3::ops::cpu::softmax_exp(x) - want) / want;
    if (rel > worst) worst = rel, worst_x = x;
  }
  EXPECT_LE(worst, 2.0 * std::ldexp(1.0, -23)) << "at x = " << worst_x;
  EXPECT_EQ(h3::ops::cpu::softmax_exp(0.0f), 1.0f);
  EXPECT_EQ(h3::ops::cpu::softmax_exp(-87.5f), 0.0f);
  EXPECT_EQ(h3::ops::cpu::softmax_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(h3::ops::cpu::softmax_exp(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace h3::test::ops
