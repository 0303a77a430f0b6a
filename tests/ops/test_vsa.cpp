// Backend-ops cases for VSA-H3 attention (h3_dit_spec.md §5): the CUDA kernels against the CPU oracle on
// small packed geometries (ragged prefix and video tiles, tiles 64 and 256, exempt and compete, with and
// without the gate branch, head dims 32/64/128, bf16 and f16): the attention output within the dtype's
// bounds, the block masks and the pooled scores exactly. Plus, on CUDA only: at sparsity 0 without a gate,
// VSA is dense attention, so it must equal our dense CUDA attention within 2e-4 max-abs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend_ops.h"
#include "core/device.h"
#include "ops/cuda/vsa_cuda.h"
#include "ops/ops.h"
#include "ops/vsa.h"
#include "support/scoped_env.h"

namespace h3::test::ops {
namespace {

struct VsaShape {
  std::string tag;
  std::vector<int64_t> prefix;
  int64_t grid[3];
  int tile;
  int64_t heads, d;
};

int64_t rows_of(const VsaShape& s) {
  int64_t r = s.grid[0] * s.grid[1] * s.grid[2];
  for (int64_t p : s.prefix) r += p;
  return r;
}

h3::ops::VsaGeometry geometry_of(const VsaShape& s) {
  return h3::ops::build_vsa_geometry(s.tile, s.prefix, s.grid, rows_of(s));
}

std::string sparsity_tag(double sp) { return "sp" + std::to_string(static_cast<int>(std::lround(sp * 100))); }

// Random q, k, v (v within +-v_max) and gate in [0, 2] of a shape, drawn in that order, on the first
// CUDA device.
struct VsaInputs {
  Tensor q, k, v, g;
};
VsaInputs cuda_inputs(const VsaShape& s, DType t, uint64_t seed, float v_max = 1.0f) {
  Rng r(seed);
  const Shape shape = {rows_of(s), s.heads, s.d};
  const Device dev = Device::cuda(0);
  VsaInputs in;
  in.q = r.uniform_tensor(shape, t).to(dev);
  in.k = r.uniform_tensor(shape, t).to(dev);
  in.v = r.uniform_tensor(shape, t, -v_max, v_max).to(dev);
  in.g = r.uniform_tensor(shape, t, 0.0f, 2.0f).to(dev);
  return in;
}

// What a case returns: the attention output, the block mask, or the coarse scores.
enum class VsaOutput { kOut, kMask, kScores };

void add_vsa(const VsaShape& s, DType t, double sparsity, h3::ops::VsaMode mode, bool gate, VsaOutput what) {
  OpCase c;
  c.op = "vsa_attention";
  const char* out_tag = what == VsaOutput::kOut ? "out" : (what == VsaOutput::kMask ? "mask" : "scores");
  c.name = "vsa_" + std::string(out_tag) + "_" + s.tag + "_t" + std::to_string(s.tile) + "_" + dtype_tag(t) +
           "_h" + std::to_string(s.heads) + "_d" + std::to_string(s.d) + "_" + sparsity_tag(sparsity) + "_" +
           (mode == h3::ops::VsaMode::kExempt ? "exempt" : "compete") + (gate ? "_gate" : "_nogate");
  c.dtype = what == VsaOutput::kOut ? t : (what == VsaOutput::kMask ? DType::kU8 : DType::kF32);
  const int64_t S = rows_of(s);
  c.make_inputs = [s, S, t, gate](Rng& r) {
    std::vector<Tensor> in = {r.uniform_tensor({S, s.heads, s.d}, t), r.uniform_tensor({S, s.heads, s.d}, t),
                              r.uniform_tensor({S, s.heads, s.d}, t)};
    if (gate) in.push_back(r.uniform_tensor({S, s.heads, s.d}, t, 0.0f, 2.0f));
    return in;
  };
  c.run = [s, sparsity, mode, gate, what](const std::vector<Tensor>& in) {
    const h3::ops::VsaGeometry geo = geometry_of(s);
    h3::ops::VsaOptions opt;
    opt.sparsity = sparsity;
    opt.mode = mode;
    h3::ops::VsaTrace trace;
    Tensor out = h3::ops::vsa_attention(in[0], in[1], in[2], gate ? &in[3] : nullptr, geo, opt,
                                        what == VsaOutput::kOut ? nullptr : &trace);
    if (what == VsaOutput::kMask) return trace.mask;
    if (what == VsaOutput::kScores) return trace.scores;
    return out;
  };
  // Masks exact; scores exact too (float64 dot products of identical float32 tile means).
  if (what != VsaOutput::kOut) c.device_bounds = Bounds{0.0, 0.0};
  register_case(std::move(c));
}

void add_vsa_cases() {
  using h3::ops::VsaMode;
  const VsaShape t2va{"t2va", {37, 46}, {6, 7, 9}, 64, 2, 128};
  const VsaShape fl2va{"fl2va", {13, 260, 42}, {9, 10, 13}, 64, 3, 64};
  const VsaShape fl2va256{"fl2va", {13, 260, 42}, {9, 10, 13}, 256, 2, 64};
  const VsaShape video_only{"video", {}, {8, 8, 16}, 64, 2, 32};
  const VsaShape tiny{"tiny", {7, 5, 3}, {8, 4, 6}, 256, 2, 128};
  for (DType t : {DType::kBF16, DType::kF16}) {
    add_vsa(t2va, t, 0.9, VsaMode::kExempt, true, VsaOutput::kOut);
    add_vsa(fl2va, t, 0.5, VsaMode::kCompete, false, VsaOutput::kOut);
  }
  add_vsa(t2va, DType::kBF16, 0.5, VsaMode::kCompete, true, VsaOutput::kOut);
  add_vsa(t2va, DType::kBF16, 0.0, VsaMode::kExempt, false, VsaOutput::kOut);
  add_vsa(fl2va256, DType::kBF16, 0.5, VsaMode::kExempt, true, VsaOutput::kOut);
  add_vsa(fl2va256, DType::kBF16, 0.9, VsaMode::kCompete, false, VsaOutput::kOut);
  add_vsa(video_only, DType::kBF16, 0.75, VsaMode::kExempt, true, VsaOutput::kOut);
  add_vsa(tiny, DType::kBF16, 0.5, VsaMode::kExempt, true, VsaOutput::kOut);
  // Head dim 128 (the Hopper fine kernel's shapes on sm_90a): ragged tiles of both sizes, gate
  // on and off, exempt and compete, both dtypes.
  add_vsa(t2va, DType::kBF16, 0.75, VsaMode::kCompete, false, VsaOutput::kOut);
  add_vsa(tiny, DType::kF16, 0.5, VsaMode::kCompete, false, VsaOutput::kOut);
  add_vsa(tiny, DType::kBF16, 0.0, VsaMode::kExempt, true, VsaOutput::kOut);
  const VsaShape fl2va256d128{"fl2va", {13, 260, 42}, {9, 10, 13}, 256, 3, 128};
  add_vsa(fl2va256d128, DType::kBF16, 0.9, VsaMode::kExempt, true, VsaOutput::kOut);
  add_vsa(fl2va256d128, DType::kF16, 0.5, VsaMode::kCompete, false, VsaOutput::kOut);
  const VsaShape fl2va64d128{"fl2va", {13, 260, 42}, {9, 10, 13}, 64, 5, 128};
  add_vsa(fl2va64d128, DType::kBF16, 0.5, VsaMode::kExempt, false, VsaOutput::kOut);
  add_vsa(fl2va64d128, DType::kF16, 0.9, VsaMode::kCompete, true, VsaOutput::kOut);
  add_vsa(t2va, DType::kF32, 0.5, VsaMode::kExempt, true, VsaOutput::kOut);  // f32: the oracle on the host
  for (VsaMode m : {VsaMode::kExempt, VsaMode::kCompete}) {
    add_vsa(fl2va, DType::kBF16, 0.75, m, false, VsaOutput::kMask);
    add_vsa(fl2va256, DType::kBF16, 0.5, m, true, VsaOutput::kMask);
  }
  add_vsa(t2va, DType::kBF16, 0.9, VsaMode::kExempt, true, VsaOutput::kScores);
}

H3_OPS_CASES(add_vsa_cases);

// At sparsity 0 without a gate every key tile is visible, so the VSA kernel computes dense attention
// (in tile order instead of row order): within 2e-4 max-abs of ops::attention on the same device.
// Values of v in [-0.25, 0.25] keep the outputs below 2^-4, where one rounding step of either
// dtype stays under the bound.
TEST(VsaCuda, SparsityZeroEqualsDenseAttention) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine";
  const VsaShape shapes[] = {{"t2va", {37, 46}, {6, 7, 9}, 64, 2, 128},
                             {"fl2va", {13, 260, 42}, {9, 10, 13}, 256, 3, 64}};
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (const VsaShape& s : shapes) {
      SCOPED_TRACE(s.tag + " " + dtype_tag(t));
      const auto [q, k, v, g] = cuda_inputs(s, t, 1234, 0.25f);
      h3::ops::VsaOptions opt;  // sparsity 0, no gate
      const Tensor sparse = h3::ops::vsa_attention(q, k, v, nullptr, geometry_of(s), opt);
      const Tensor dense = h3::ops::attention(q, k, v);
      const Metrics m = measure(f64(sparse.to(Device::cpu())), f64(dense.to(Device::cpu())));
      std::printf("[vsa cuda] %s t%d %s sparsity 0 vs dense attention: max_abs=%.3e (bound 2e-4)\n",
                  s.tag.c_str(), s.tile, dtype_tag(t).c_str(), m.max_abs);
      EXPECT_LE(m.max_abs, 2e-4);
      EXPECT_EQ(m.nonfinite, 0);
    }
  }
}

// The Hopper fine kernel (wgmma + TMA, default on sm_90a) against the mma.sync one (H3_VSA_HOPPER=0)
// on the same inputs: both run the reference kernel's recurrence block for block (a running max, a
// rounding of P and a rescale per 64-key block, the same float32 row sums), with the same k-order in
// every tensor-core dot product, so the outputs must be identical; a difference means one of them
// left the reference's rounding points. Ragged tiles of 64 and 256 rows, gate on (the fused
// combine) and off.
TEST(VsaCuda, HopperFineKernelMatchesMmaSyncKernel) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine";
  const VsaShape shapes[] = {{"fl2va", {13, 260, 42}, {9, 10, 13}, 64, 3, 128},
                             {"fl2va", {13, 260, 42}, {9, 10, 13}, 256, 3, 128}};
  const ScopedEnv restore("H3_VSA_HOPPER", nullptr);  // the test sets it; the previous value comes back
  bool any_hopper = false;
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (const VsaShape& s : shapes) {
      for (bool gate : {false, true}) {
        SCOPED_TRACE(s.tag + " t" + std::to_string(s.tile) + " " + dtype_tag(t) + (gate ? " gate" : ""));
        const auto [q, k, v, g] = cuda_inputs(s, t, 99);
        h3::ops::VsaOptions opt;
        opt.sparsity = 0.75;
        const h3::ops::VsaGeometry geo = geometry_of(s);
        h3::ops::cuda::VsaStageTimes st;
        ::unsetenv("H3_VSA_HOPPER");
        const Tensor a = h3::ops::cuda::vsa_attention(q, k, v, gate ? &g : nullptr, geo, opt, nullptr, &st);
        ::setenv("H3_VSA_HOPPER", "0", 1);
        h3::ops::cuda::VsaStageTimes st0;
        const Tensor b = h3::ops::cuda::vsa_attention(q, k, v, gate ? &g : nullptr, geo, opt, nullptr, &st0);
        EXPECT_FALSE(st0.fine_hopper) << "H3_VSA_HOPPER=0 must select the mma.sync kernel";
        any_hopper = any_hopper || st.fine_hopper;
        const Metrics m = measure(f64(a.to(Device::cpu())), f64(b.to(Device::cpu())));
        std::printf("[vsa cuda] %s t%d %s%s fine kernel %s vs mma.sync: rel_l2=%.3e max_abs=%.3e "
                    "(bound: equal)\n",
                    s.tag.c_str(), s.tile, dtype_tag(t).c_str(), gate ? " gate" : "",
                    st.fine_hopper ? "hopper" : "mma.sync", m.rel_l2, m.max_abs);
        EXPECT_EQ(m.max_abs, 0.0);
        EXPECT_EQ(m.nonfinite, 0);
      }
    }
  }
  if (!any_hopper) std::printf("[vsa cuda] the Hopper fine kernel is not eligible on this device/build\n");
}

// The Hopper fine kernel's job order (query block fastest by default, head fastest with
// H3_VSA_HOPPER_ORDER=head) only changes which CTA computes a job, not how: the outputs must be
// bit-identical. A job mapping that skipped or repeated a job would leave rows unwritten or differ.
TEST(VsaCuda, HopperJobOrderDoesNotChangeResult) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine";
  const VsaShape shapes[] = {{"fl2va", {13, 260, 42}, {9, 10, 13}, 64, 3, 128},
                             {"fl2va", {13, 260, 42}, {9, 10, 13}, 256, 3, 128}};
  const ScopedEnv restore("H3_VSA_HOPPER_ORDER", nullptr);  // the test sets it; the previous value comes back
  bool any_hopper = false;
  for (const VsaShape& s : shapes) {
    for (bool gate : {false, true}) {
      SCOPED_TRACE(s.tag + " t" + std::to_string(s.tile) + (gate ? " gate" : ""));
      const auto [q, k, v, g] = cuda_inputs(s, DType::kBF16, 7);
      h3::ops::VsaOptions opt;
      opt.sparsity = 0.75;
      const h3::ops::VsaGeometry geo = geometry_of(s);
      h3::ops::cuda::VsaStageTimes st;
      ::unsetenv("H3_VSA_HOPPER_ORDER");
      const Tensor a = h3::ops::cuda::vsa_attention(q, k, v, gate ? &g : nullptr, geo, opt, nullptr, &st);
      ::setenv("H3_VSA_HOPPER_ORDER", "head", 1);
      const Tensor b = h3::ops::cuda::vsa_attention(q, k, v, gate ? &g : nullptr, geo, opt, nullptr, nullptr);
      any_hopper = any_hopper || st.fine_hopper;
      const Metrics m = measure(f64(a.to(Device::cpu())), f64(b.to(Device::cpu())));
      std::printf("[vsa cuda] %s t%d%s fine kernel (%s) query-block order vs head order: max_abs=%.3e (bound 0)\n",
                  s.tag.c_str(), s.tile, gate ? " gate" : "", st.fine_hopper ? "hopper" : "mma.sync", m.max_abs);
      EXPECT_EQ(m.max_abs, 0.0);
      EXPECT_EQ(m.nonfinite, 0);
    }
  }
  if (!any_hopper) std::printf("[vsa cuda] the Hopper fine kernel is not eligible on this device/build\n");
}

// The top-k stage's radix select, a warp per row (default) or a block per row (H3_VSA_TOPK=block),
// and the bitonic sort (H3_VSA_TOPK=sort) pick the same key tiles: the masks must be equal and so,
// bit for bit, the outputs. Random scores with many near ties at sparsities 0.5 and 0.9, both
// modes (exempt adds the prefix tiles, compete ranks them).
TEST(VsaCuda, TopkRadixSelectEqualsSort) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine";
  const VsaShape s{"fl2va", {13, 260, 42}, {9, 10, 13}, 64, 3, 128};
  const ScopedEnv restore("H3_VSA_TOPK", nullptr);  // the test sets it; the previous value comes back
  for (h3::ops::VsaMode mode : {h3::ops::VsaMode::kExempt, h3::ops::VsaMode::kCompete}) {
    for (double sparsity : {0.5, 0.9}) {
      SCOPED_TRACE(std::string(mode == h3::ops::VsaMode::kExempt ? "exempt" : "compete") + " sparsity " +
                   std::to_string(sparsity));
      const auto [q, k, v, g] = cuda_inputs(s, DType::kBF16, 11);
      h3::ops::VsaOptions opt;
      opt.sparsity = sparsity;
      opt.mode = mode;
      const h3::ops::VsaGeometry geo = geometry_of(s);
      h3::ops::VsaTrace ta;
      ::unsetenv("H3_VSA_TOPK");
      const Tensor a = h3::ops::cuda::vsa_attention(q, k, v, &g, geo, opt, &ta);
      ASSERT_TRUE(ta.mask.defined());
      for (const char* other : {"block", "sort"}) {
        h3::ops::VsaTrace tb;
        ::setenv("H3_VSA_TOPK", other, 1);
        const Tensor b = h3::ops::cuda::vsa_attention(q, k, v, &g, geo, opt, &tb);
        ASSERT_TRUE(tb.mask.defined());
        const Metrics mm = measure(f64(ta.mask.to(Device::cpu())), f64(tb.mask.to(Device::cpu())));
        const Metrics mo = measure(f64(a.to(Device::cpu())), f64(b.to(Device::cpu())));
        std::printf("[vsa cuda] top-k warp radix select vs %s, %s sparsity %.2f: mask max_abs=%.0f, "
                    "out max_abs=%.3e (bounds 0)\n",
                    other, mode == h3::ops::VsaMode::kExempt ? "exempt" : "compete", sparsity, mm.max_abs,
                    mo.max_abs);
        EXPECT_EQ(mm.max_abs, 0.0) << other;
        EXPECT_EQ(mo.max_abs, 0.0) << other;
        EXPECT_EQ(mo.nonfinite, 0) << other;
      }
    }
  }
}

// The device copies of a geometry's index arrays are cached in the geometry (and shared by its
// copies); changing the arrays afterwards must not reuse stale copies. A copy of geometry A whose
// arrays are then replaced by geometry B's (same rows, prefix cut differently) must give B's
// output exactly.
TEST(VsaCuda, GeometryIndexCacheFollowsChangedArrays) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine";
  const VsaShape sa{"t2va", {37, 46}, {6, 7, 9}, 64, 2, 128};
  const VsaShape sb{"t2va", {46, 37}, {6, 7, 9}, 64, 2, 128};
  const auto [q, k, v, g] = cuda_inputs(sa, DType::kBF16, 5);
  h3::ops::VsaOptions opt;
  opt.sparsity = 0.5;
  const h3::ops::VsaGeometry ga = geometry_of(sa);
  const h3::ops::VsaGeometry gb = geometry_of(sb);
  ASSERT_NE(ga.tile_sizes, gb.tile_sizes);
  (void)h3::ops::cuda::vsa_attention(q, k, v, nullptr, ga, opt, nullptr, nullptr);
  ASSERT_TRUE(ga.device_cache != nullptr) << "the CUDA path caches the geometry's index arrays";
  h3::ops::VsaGeometry changed = ga;  // shares ga's cache
  changed.prefix_segments = gb.prefix_segments;
  changed.num_prefix_tiles = gb.num_prefix_tiles;
  changed.num_video_tiles = gb.num_video_tiles;
  changed.tile_sizes = gb.tile_sizes;
  changed.untile_index = gb.untile_index;
  changed.partition_rows = gb.partition_rows;
  const Tensor got = h3::ops::cuda::vsa_attention(q, k, v, nullptr, changed, opt, nullptr, nullptr);
  const Tensor want = h3::ops::cuda::vsa_attention(q, k, v, nullptr, gb, opt, nullptr, nullptr);
  const Metrics m = measure(f64(got.to(Device::cpu())), f64(want.to(Device::cpu())));
  std::printf("[vsa cuda] geometry changed after caching vs fresh geometry: max_abs=%.3e (bound 0)\n", m.max_abs);
  EXPECT_EQ(m.max_abs, 0.0);
  EXPECT_EQ(m.nonfinite, 0);
}

}  // namespace
}  // namespace h3::test::ops
