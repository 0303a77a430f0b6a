// The DiT's VSA options (h3_dit_spec.md §5.1, §5.6) on random weights, and the `h3 bench dit`
// code at small sizes on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/h3_dit/dit_bench.h"
#include "models/h3_dit/dit_model.h"
#include "ops/ops.h"

namespace h3::dit {
namespace {

template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.what();
    std::printf("  error: %s\n", e.what());
  }
}

DitConfig tiny_config(int64_t head_dim = 64) {
  DitConfig c;
  c.num_attention_heads = 2;
  c.attention_head_dim = head_dim;
  c.hidden_size = 32;
  c.num_layers = 3;
  c.num_refiner_layers = 0;
  c.ffn_dim = 48;
  c.in_channels = 24;
  c.audio_in_channels = 32;
  c.text_dim = 32;
  c.freq_dim = 16;
  c.time_embed_hidden_dim = 32;
  c.time_embed_dim = 16;
  c.rope_freq_dim = std::min<int64_t>(8, head_dim / 6);
  return c;
}

DitModel tiny_model(DitAttentionBackend backend, bool gates, double sparsity = -1.0,
                    std::vector<Tensor> block_masks = {}) {
  const DitConfig c = tiny_config();
  DitOptions o;
  o.attention = backend;
  o.vsa.sparsity = sparsity;
  o.vsa.dense_layers = {1};
  o.vsa.dense_first_steps = 2;
  o.vsa.block_masks = std::move(block_masks);
  return DitModel::from_weights(c, random_dit_block_weights(c, gates, 7, DType::kF32, Device::cpu()),
                                o);
}

// A T2VA-shaped layout: 8 text, 12 audio, grid 4x4x6 (96 video rows).
struct Packed {
  Tensor pos, tags, vidx, aidx, tidx;
  std::vector<int64_t> adaln;
  int64_t s = 0;
};

Packed tiny_packed() {
  Packed p;
  std::vector<double> pos;
  std::vector<int64_t> tags, v, a, t;
  auto row = [&](int64_t tag, double pt, double ph, double pw) {
    const int64_t r = static_cast<int64_t>(tags.size());
    tags.push_back(tag);
    pos.insert(pos.end(), {pt, ph, pw});
    (tag == 0 ? v : tag == 1 ? t : a).push_back(r);
    p.adaln.push_back((tag == 2 ? 0 : 1) * 3 + tag);
  };
  for (int i = 0; i < 8; ++i) row(1, 0, 0, 0);
  for (int i = 0; i < 12; ++i) row(2, i, 0, 0);
  for (int ti = 0; ti < 4; ++ti) {
    for (int h = 0; h < 4; ++h) {
      for (int w = 0; w < 6; ++w) row(0, ti, h, w);
    }
  }
  p.s = static_cast<int64_t>(tags.size());
  p.pos = Tensor::empty({p.s, 3}, DType::kF64);
  std::copy(pos.begin(), pos.end(), p.pos.data<double>());
  auto ids = [](const std::vector<int64_t>& x) {
    return Tensor::from_i64(x, {static_cast<int64_t>(x.size())});
  };
  p.tags = ids(tags);
  p.vidx = ids(v);
  p.aidx = ids(a);
  p.tidx = ids(t);
  return p;
}

Tensor run_one_block(const DitModel& m, const Packed& p, int64_t block, int64_t step,
                     DitTrace* trace = nullptr) {
  const DitLayout layout = m.make_layout(p.pos, p.tags, p.vidx, p.aidx, p.tidx);
  std::vector<float> xv(static_cast<size_t>(p.s * 32)), tv(2 * 16);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < tv.size(); ++i) tv[i] = std::cos(0.11f * static_cast<float>(i));
  return m.run_block(block, Tensor::from_f32(xv, {p.s, 32}), Tensor::from_f32(tv, {2, 16}),
                     Tensor::from_i64(p.adaln, {p.s}), layout, step, trace);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_f32_vector(), y = b.to_f32_vector();
  double m = 0.0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(x[i] - y[i])));
  return m;
}

TEST(DitVsa, ParsesBackendNames) {
  EXPECT_EQ(parse_attention_backend("dense"), DitAttentionBackend::kDense);
  EXPECT_EQ(parse_attention_backend("vsa"), DitAttentionBackend::kVsa);
  EXPECT_STREQ(attention_backend_name(DitAttentionBackend::kVsa), "vsa");
  expect_error([] { parse_attention_backend("sparse"); }, ErrorCode::kInvalidArgument, "sparse");
}

TEST(DitVsa, SparsityDefaultsAndOverrides) {
  const DitModel gated = tiny_model(DitAttentionBackend::kVsa, true);
  EXPECT_DOUBLE_EQ(gated.vsa_sparsity(), 0.9);  // FastH3 default (§5.1)
  EXPECT_DOUBLE_EQ(gated.vsa_sparsity_for(0, 5), 0.9);
  EXPECT_DOUBLE_EQ(gated.vsa_sparsity_for(1, 5), 0.0);  // dense layer
  EXPECT_DOUBLE_EQ(gated.vsa_sparsity_for(2, 1), 0.0);  // dense first steps
  EXPECT_DOUBLE_EQ(gated.vsa_sparsity_for(2, 2), 0.9);
  EXPECT_DOUBLE_EQ(tiny_model(DitAttentionBackend::kVsa, false).vsa_sparsity(), 0.0);
  EXPECT_DOUBLE_EQ(tiny_model(DitAttentionBackend::kVsa, true, 0.5).vsa_sparsity(), 0.5);
}

TEST(DitVsa, RejectsBadOptions) {
  const DitConfig c = tiny_config();
  auto make = [&](DitOptions o, const DitConfig& cfg) {
    return DitModel::from_weights(cfg, random_dit_block_weights(cfg, false, 1, DType::kF32, Device::cpu()), o);
  };
  DitOptions o;
  o.attention = DitAttentionBackend::kVsa;
  o.vsa.tile_size = 128;
  expect_error([&] { make(o, c); }, ErrorCode::kInvalidArgument, "tile size 128");
  o.vsa.tile_size = 64;
  o.vsa.sparsity = 1.0;
  expect_error([&] { make(o, c); }, ErrorCode::kInvalidArgument, "sparsity");
  o.vsa.sparsity = 0.5;
  o.vsa.dense_layers = {3};
  expect_error([&] { make(o, c); }, ErrorCode::kInvalidArgument, "dense layer 3");
  o.vsa.dense_layers = {};
  expect_error([&] { make(o, tiny_config(32)); }, ErrorCode::kUnsupported, "head size");
}

TEST(DitVsa, LayoutDerivesTilingFromTrailingVideoRows) {
  const Packed p = tiny_packed();
  const DitModel m = tiny_model(DitAttentionBackend::kVsa, true);
  const DitLayout layout = m.make_layout(p.pos, p.tags, p.vidx, p.aidx, p.tidx);
  ASSERT_TRUE(layout.has_vsa);
  std::printf("  %s\n", layout.vsa.summary().c_str());
  EXPECT_EQ(layout.vsa.grid[0], 4);
  EXPECT_EQ(layout.vsa.grid[1], 4);
  EXPECT_EQ(layout.vsa.grid[2], 6);
  EXPECT_EQ(layout.vsa.prefix_segments, (std::vector<int64_t>{8, 12}));  // zero cond dropped
  EXPECT_EQ(layout.vsa.seq_len, p.s);
  // A dense model builds no tiling.
  EXPECT_FALSE(tiny_model(DitAttentionBackend::kDense, true)
                   .make_layout(p.pos, p.tags, p.vidx, p.aidx, p.tidx)
                   .has_vsa);
}

TEST(DitVsa, SparsityZeroWithoutGatesIsDense) {
  const Packed p = tiny_packed();
  const Tensor dense = run_one_block(tiny_model(DitAttentionBackend::kDense, false), p, 0, 5);
  const Tensor vsa0 = run_one_block(tiny_model(DitAttentionBackend::kVsa, false, 0.0), p, 0, 5);
  const double d0 = max_abs_diff(dense, vsa0);
  std::printf("  vsa sp0 no gates vs dense: max|d|=%.3e (bound 1e-5)\n", d0);
  EXPECT_LE(d0, 1e-5);
  // §5.6: the gate branch runs even at sparsity 0, so a gated model differs from dense.
  DitTrace trace;
  const Tensor gated = run_one_block(tiny_model(DitAttentionBackend::kVsa, true, 0.0), p, 0, 5, &trace);
  const double dg = max_abs_diff(dense, gated);
  std::printf("  vsa sp0 with gates vs dense: max|d|=%.3e (expected > 1e-3)\n", dg);
  EXPECT_GT(dg, 1e-3);
  ASSERT_EQ(trace.vsa.size(), 1u);
  EXPECT_TRUE(trace.vsa[0].out_c_f32.defined());
  // A sparse layer changes the output; the same block as a dense layer (block 1 is in
  // dense_layers) or a dense first step keeps every tile.
  DitTrace t_sparse, t_step;
  run_one_block(tiny_model(DitAttentionBackend::kVsa, false, 0.75), p, 0, 5, &t_sparse);
  run_one_block(tiny_model(DitAttentionBackend::kVsa, false, 0.75), p, 0, 0, &t_step);
  auto kept = [](const Tensor& mask) {
    int64_t n = 0;
    for (int64_t i = 0; i < mask.numel(); ++i) n += mask.data<uint8_t>()[i];
    return n;
  };
  const int64_t kept_sparse = kept(t_sparse.vsa[0].mask), kept_step = kept(t_step.vsa[0].mask);
  std::printf("  kept tile pairs: sparse step %lld, dense first step %lld of %lld\n",
              static_cast<long long>(kept_sparse), static_cast<long long>(kept_step),
              static_cast<long long>(t_step.vsa[0].mask.numel()));
  EXPECT_LT(kept_sparse, kept_step);
  EXPECT_EQ(kept_step, t_step.vsa[0].mask.numel());
}

// DitVsaOptions::block_masks (parity tests attend with a reference's masks where a near tie went
// the other way): given its own masks back, a block reproduces its output bit for bit; given
// all-ones masks at sparsity 0.75, it is the sparsity-0 block bit for bit (same fine and gate
// branches); and the given mask is what the trace reports.
TEST(DitVsa, GivenBlockMasksReplaceTheTopkSelection) {
  const Packed p = tiny_packed();
  DitTrace own;
  const Tensor sparse = run_one_block(tiny_model(DitAttentionBackend::kVsa, true, 0.75), p, 0, 5, &own);
  ASSERT_EQ(own.vsa.size(), 1u);
  DitTrace again;
  const Tensor same = run_one_block(tiny_model(DitAttentionBackend::kVsa, true, 0.75, {own.vsa[0].mask}),
                                    p, 0, 5, &again);
  EXPECT_EQ(max_abs_diff(sparse, same), 0.0);
  EXPECT_EQ(again.vsa[0].mask.to_f32_vector(), own.vsa[0].mask.to_f32_vector());

  Tensor ones = Tensor::zeros(own.vsa[0].mask.shape(), DType::kU8);
  ones.fill(1);
  DitTrace forced;
  const Tensor all = run_one_block(tiny_model(DitAttentionBackend::kVsa, true, 0.75, {ones}), p, 0, 5, &forced);
  const Tensor sp0 = run_one_block(tiny_model(DitAttentionBackend::kVsa, true, 0.0), p, 0, 5);
  std::printf("  all-ones mask at sparsity 0.75 vs sparsity 0: max|d|=%.3e (expected 0); vs top-k: %.3e\n",
              max_abs_diff(all, sp0), max_abs_diff(all, sparse));
  EXPECT_EQ(max_abs_diff(all, sp0), 0.0);
  EXPECT_GT(max_abs_diff(all, sparse), 0.0);
  EXPECT_EQ(forced.vsa[0].mask.to_f32_vector(), ones.to_f32_vector());

  // A mask of the wrong shape is refused.
  const Tensor bad = Tensor::zeros({1, 2, 2}, DType::kU8);
  expect_error([&] { run_one_block(tiny_model(DitAttentionBackend::kVsa, true, 0.75, {bad}), p, 0, 5); },
               ErrorCode::kInvalidArgument, "block mask");
}

TEST(DitBench, ChoosesLayoutForRows) {
  DitBenchOptions o;
  o.rows = 700;
  o.text_rows = 32;
  o.audio_rows = 40;
  int64_t grid[3];
  int64_t cond = -1;
  choose_bench_layout(o, grid, &cond);
  std::printf("  700 rows: grid %lldx%lldx%lld + %lld cond\n", static_cast<long long>(grid[0]),
              static_cast<long long>(grid[1]), static_cast<long long>(grid[2]),
              static_cast<long long>(cond));
  EXPECT_EQ(32 + 40 + cond + grid[0] * grid[1] * grid[2], 700);
  EXPECT_GE(grid[0], 4);
  o.rows = 0;  // the released request
  choose_bench_layout(o, grid, &cond);
  EXPECT_EQ(256 + 414 + cond + grid[0] * grid[1] * grid[2], 37966);
  o.rows = 50;
  expect_error([&] { choose_bench_layout(o, grid, &cond); }, ErrorCode::kInvalidArgument, "--rows");
}

TEST(DitBench, RunsSmallOnCpu) {
  DitBenchOptions o;
  o.rows = 400;
  o.text_rows = 16;
  o.audio_rows = 24;
  o.hidden = 64;
  o.heads = 2;
  o.head_dim = 64;
  o.ffn = 96;
  o.iters = 1;
  o.warmup = 0;
  const DitBenchResult dense = run_dit_bench(o, false);
  EXPECT_TRUE(dense.unsupported.empty()) << dense.unsupported;
  EXPECT_EQ(dense.seq_len, 400);
  ASSERT_EQ(dense.block_ms.size(), 2u);
  EXPECT_GT(dense.block_ms[0], 0.0);
  EXPECT_GT(dense.attention_ms, 0.0);
  EXPECT_GT(dense.gemm_tflops(), 0.0);
  EXPECT_DOUBLE_EQ(dense.attention_flops, 4.0 * 400.0 * 400.0 * 128.0);
  std::printf("  dense: block %.3f ms, attention %.3f ms, GEMMs %.3f ms\n", dense.block_ms[0],
              dense.attention_ms, dense.gemm_ms);

  o.attention = DitAttentionBackend::kVsa;
  o.vsa_sparsity = 0.0;  // every tile kept: the fine branch's FLOPs are the dense ones
  const DitBenchResult all = run_dit_bench(o, false);
  EXPECT_TRUE(all.unsupported.empty()) << all.unsupported;
  EXPECT_DOUBLE_EQ(all.attention_flops, dense.attention_flops);
  o.vsa_sparsity = 0.9;
  const DitBenchResult sparse = run_dit_bench(o, false);
  std::printf("  vsa 0.9: attention %.1f MFLOP of dense %.1f; %s\n", sparse.attention_flops * 1e-6,
              dense.attention_flops * 1e-6, sparse.vsa_summary.c_str());
  EXPECT_LT(sparse.attention_flops, dense.attention_flops);
  EXPECT_GT(sparse.gemm_flops, dense.gemm_flops);  // the gate projection

  // Where a block's time goes: every part the block runs is named once, the glue parts carry
  // the bytes they move (the first norm's 2 row passes of the hidden width, the attention residual
  // with the second norm's 4 in one part, the last residual's 3; q/k read and written with the RoPE
  // tables, SwiGLU's 3 passes of the FFN width), and the parts add up to about a block.
  std::set<std::string> names, glue;
  double glue_bytes = 0.0;
  for (const auto& p : sparse.parts) {
    EXPECT_TRUE(names.insert(p.name).second) << p.name;
    EXPECT_GE(p.ms, 0.0) << p.name;
    if (p.glue) {
      glue.insert(p.name);
      EXPECT_GT(p.bytes, 0.0) << p.name;
      glue_bytes += p.bytes;
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"adaLN", "norm + modulate", "GEMM q", "GEMM k", "GEMM v",
                                          "q/k norm + RoPE", "GEMM gate", "attention", "GEMM out",
                                          "gated residual + norm + modulate", "gated residual",
                                          "GEMM ffn in", "SwiGLU", "GEMM ffn out"}));
  EXPECT_EQ(glue, (std::set<std::string>{"norm + modulate", "q/k norm + RoPE",
                                         "gated residual + norm + modulate", "gated residual",
                                         "SwiGLU"}));
  const double rows = 400, e = 2;  // bf16
  const double min_bytes = rows * e * (9 * 64 + 4 * 2 * 64 + 3 * 96);  // without the RoPE tables
  EXPECT_GT(glue_bytes, min_bytes);
  EXPECT_DOUBLE_EQ(sparse.glue_bytes, glue_bytes);
  double total = 0.0;
  for (const auto& p : sparse.parts) total += p.ms;
  std::printf("  parts: %zu, sum %.3f ms, block %.3f ms, glue %.3f ms, %.3f MB\n", sparse.parts.size(),
              total, sparse.block_ms_mean, sparse.glue_ms, glue_bytes * 1e-6);
  EXPECT_GT(total, 0.0);
}

}  // namespace
}  // namespace h3::dit
