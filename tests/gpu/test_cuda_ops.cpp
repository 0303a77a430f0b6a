// GPU-only checks of the CUDA ops that the cross-backend harness (tests/ops) does not cover:
// fusion switches restore the plain path, repeated runs give identical bytes, the flash and
// generic attention kernels agree, bad indices are errors rather than faults, and strided views.
// Every test skips visibly without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/fp8_cuda.h"
#include "ops/fp8.h"
#include "ops/ops.h"
#include "support/scoped_env.h"

namespace h3 {
namespace {

#define H3_REQUIRE_CUDA()                                                  \
  do {                                                                     \
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine"; \
  } while (0)

Tensor randn(const Shape& shape, DType t, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = nd(gen);
  return Tensor::from_f32(v, shape, t);
}

Tensor to_gpu(const Tensor& t) { return t.to(Device::cuda(0)); }

struct Diff {
  double rel_l2 = 0, max_abs = 0;
};
Diff diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_f64_vector(), y = b.to_f64_vector();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0, mx = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    const double d = x[i] - y[i];
    num += d * d;
    den += y[i] * y[i];
    mx = std::max(mx, std::fabs(d));
  }
  return {den > 0 ? std::sqrt(num / den) : std::sqrt(num), mx};
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  return x.nbytes() == y.nbytes() && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
}

// Two quantizations of the same rows: the same E4M3 bytes and the same scales.
void expect_same_fp8(const ops::Fp8Activation& a, const ops::Fp8Activation& b, const char* what) {
  EXPECT_TRUE(same_bytes(a.data, b.data)) << what << ": E4M3 values differ";
  EXPECT_TRUE(same_bytes(a.scale, b.scale)) << what << ": scales differ";
}

using ::h3::test::ScopedEnv;

// RoPE cos (or sin) tables [s, rot] on the GPU, both halves at the same angles.
Tensor rope_table(int64_t s, int rot, bool cosine) {
  std::vector<float> t(static_cast<size_t>(s * rot));
  for (int64_t i = 0; i < s; ++i)
    for (int k = 0; k < rot; ++k) {
      const float a = 0.01f * static_cast<float>(i) * static_cast<float>(k % (rot / 2) + 1);
      t[static_cast<size_t>(i * rot + k)] = cosine ? std::cos(a) : std::sin(a);
    }
  return to_gpu(Tensor::from_f32(t, {s, rot}));
}

TEST(CudaFusion, RmsNormModulateSwitchRestoresPlainPath) {
  H3_REQUIRE_CUDA();
  const Tensor x = to_gpu(randn({300, 512}, DType::kBF16, 1));
  const Tensor w = to_gpu(randn({512}, DType::kBF16, 2, 0.1f));
  const Tensor sc = to_gpu(randn({6, 512}, DType::kBF16, 3, 0.3f));
  const Tensor sh = to_gpu(randn({6, 512}, DType::kBF16, 4, 0.3f));
  std::vector<int64_t> iv(300);
  for (int i = 0; i < 300; ++i) iv[i] = (i * 5) % 6;
  const Tensor idx = to_gpu(Tensor::from_i64(iv, {300}));
  const Tensor fused = ops::rms_norm_modulate(x, &w, 1e-5f, sc, sh, idx);
  Tensor plain;
  {
    ScopedEnv off("H3_FUSE_RMSNORM_MODULATE", "0");
    plain = ops::rms_norm_modulate(x, &w, 1e-5f, sc, sh, idx);
  }
  const Tensor manual = ops::modulate(ops::rms_norm(x, &w, 1e-5f), sc, sh, idx);
  EXPECT_TRUE(same_bytes(plain, manual)) << "switch off must give exactly the plain composition";
  const Diff d = diff(fused, plain);
  std::printf("rms_norm_modulate fused vs plain (bf16): rel_l2=%.3e max_abs=%.3e (bound 1e-2)\n", d.rel_l2,
              d.max_abs);
  EXPECT_LE(d.rel_l2, 1e-2);
  EXPECT_GT(d.rel_l2, 0.0) << "fused and plain paths round differently; identical bytes mean the switch did nothing";
}

TEST(CudaFusion, QkNormRopeSwitchRestoresPlainPath) {
  H3_REQUIRE_CUDA();
  const int64_t s = 257, h = 8, d = 128;
  const int rot = 96;
  const Tensor x = to_gpu(randn({s, h, d}, DType::kBF16, 5));
  const Tensor w = to_gpu(randn({d}, DType::kBF16, 6, 0.2f));
  const Tensor c = rope_table(s, rot, true), sn_t = rope_table(s, rot, false);
  const Tensor fused = ops::qk_norm_rope(x, &w, 1e-5f, c, sn_t, rot);
  Tensor plain, manual;
  {
    ScopedEnv off("H3_FUSED", "0");
    plain = ops::qk_norm_rope(x, &w, 1e-5f, c, sn_t, rot);
    manual = ops::rope(ops::rms_norm(x, &w, 1e-5f), c, sn_t, rot);  // under the same switches
  }
  EXPECT_TRUE(same_bytes(plain, manual));
  // Float32 oracle on the CPU, same bf16-valued inputs.
  const Tensor wf = w.to(Device::cpu()).to(DType::kF32);
  const Tensor ref = ops::qk_norm_rope(x.to(Device::cpu()).to(DType::kF32), &wf, 1e-5f, c.to(Device::cpu()),
                                       sn_t.to(Device::cpu()), rot);
  const Diff dd = diff(fused, plain), dr = diff(fused, ref), pr = diff(plain, ref);
  std::printf("qk_norm_rope bf16: fused vs plain rel_l2=%.3e; vs f32 CPU: fused %.3e, plain %.3e (bound 1e-2)\n",
              dd.rel_l2, dr.rel_l2, pr.rel_l2);
  EXPECT_LE(dd.rel_l2, 1e-2);
  EXPECT_LE(dr.rel_l2, 1e-2);
  EXPECT_LE(dr.rel_l2, pr.rel_l2 * 1.5) << "one rounding should not be less accurate than two";
}

TEST(CudaFusion, SwigluAndGatedResidualSwitches) {
  H3_REQUIRE_CUDA();
  const Tensor x = to_gpu(randn({100, 2 * 320}, DType::kBF16, 7));
  const Tensor fused = ops::swiglu(x);
  Tensor plain;
  {
    ScopedEnv off("H3_FUSE_SWIGLU", "0");
    plain = ops::swiglu(x);
  }
  const Diff d = diff(fused, plain);
  std::printf("swiglu fused vs plain (bf16): rel_l2=%.3e (bound 1e-2)\n", d.rel_l2);
  EXPECT_LE(d.rel_l2, 1e-2);

  const Tensor res = to_gpu(randn({100, 320}, DType::kBF16, 8));
  const Tensor br = to_gpu(randn({100, 320}, DType::kBF16, 9));
  const Tensor gate = to_gpu(randn({3, 320}, DType::kBF16, 10));
  std::vector<int64_t> iv(100);
  for (int i = 0; i < 100; ++i) iv[i] = i % 3;
  const Tensor idx = to_gpu(Tensor::from_i64(iv, {100}));
  const Tensor gf = ops::gated_residual(res, br, gate, idx);
  Tensor gp;
  {
    ScopedEnv off("H3_FUSE_GATED_RESIDUAL", "0");
    gp = ops::gated_residual(res, br, gate, idx);
  }
  const Diff g = diff(gf, gp);
  std::printf("gated_residual fused vs plain (bf16): rel_l2=%.3e (bound 1e-2)\n", g.rel_l2);
  EXPECT_LE(g.rel_l2, 1e-2);
}

// The one-pass anti-aliased SnakeBeta against the composition it replaces (H3_FUSE_AA_SNAKE=0),
// across block edges (256 outputs per block) and at a row shorter than the filter.
TEST(CudaFusion, AntiAliasedSnakeBetaMatchesTheComposition) {
  H3_REQUIRE_CUDA();
  for (const int64_t l : {int64_t{1}, int64_t{5}, int64_t{1000}}) {
    const int64_t c = 6, k = 12;
    const Tensor x = to_gpu(randn({2, c, l}, DType::kF32, 31));
    const Tensor la = to_gpu(randn({c}, DType::kF32, 32, 0.5f)),
                 lb = to_gpu(randn({c}, DType::kF32, 33, 0.5f));
    const Tensor up = to_gpu(randn({c, 1, k}, DType::kF32, 34, 0.3f));
    const Tensor down = to_gpu(randn({c, 1, k}, DType::kF32, 35, 0.15f));
    const Tensor fused = ops::anti_aliased_snake_beta(x, la, lb, up, down, 2);
    Tensor plain;
    {
      ScopedEnv off("H3_FUSE_AA_SNAKE", "0");
      plain = ops::anti_aliased_snake_beta(x, la, lb, up, down, 2);
    }
    const Diff d = diff(fused, plain);
    std::printf(
        "anti_aliased_snake_beta L=%lld fused vs composition: rel_l2=%.3e max_abs=%.3e (bound "
        "1e-5)\n",
        static_cast<long long>(l), d.rel_l2, d.max_abs);
    EXPECT_LE(d.rel_l2, 1e-5) << "L=" << l;
  }
}

// The eight-values-per-thread kernels (vec8_ok) against the one-value kernels (H3_FUSE_VEC8=0) at
// the DiT's widths: SwiGLU and the gated residual do the same float32 arithmetic per value, so
// their bytes are equal; the norms add each row's squares in another order, so their float32
// scale may differ in the last bits and a bf16 output by one unit where it lies on a boundary.
TEST(CudaFusion, Vec8KernelsMatchTheScalarKernels) {
  H3_REQUIRE_CUDA();
  const int64_t s = 300, c = 5376, f = 1024, h = 8, d = 128;
  const int rot = 96;
  const Tensor x = to_gpu(randn({s, c}, DType::kBF16, 31));
  const Tensor w = to_gpu(randn({c}, DType::kF32, 32, 0.1f));
  const Tensor sc = to_gpu(randn({6, c}, DType::kBF16, 33, 0.3f));
  const Tensor sh = to_gpu(randn({6, c}, DType::kBF16, 34, 0.3f));
  const Tensor br = to_gpu(randn({s, c}, DType::kBF16, 35));
  const Tensor u = to_gpu(randn({s, 2 * f}, DType::kBF16, 36));
  const Tensor q = to_gpu(randn({s, h, d}, DType::kBF16, 37));
  const Tensor qw = to_gpu(randn({d}, DType::kBF16, 38, 0.2f));
  const Tensor ct = rope_table(s, rot, true), st = rope_table(s, rot, false);
  std::vector<int64_t> iv(s);
  for (int64_t i = 0; i < s; ++i) iv[i] = (i * 5) % 6;
  const Tensor idx = to_gpu(Tensor::from_i64(iv, {s}));
  auto run = [&] {
    return std::vector<Tensor>{ops::swiglu(u), ops::gated_residual(x, br, sc, idx),
                               ops::rms_norm_modulate(x, &w, 1e-6f, sc, sh, idx),
                               ops::rms_norm(x, &w, 1e-6f), ops::qk_norm_rope(q, &qw, 1e-6f, ct, st, rot)};
  };
  const std::vector<Tensor> vec = run();
  std::vector<Tensor> scalar;
  {
    ScopedEnv off("H3_FUSE_VEC8", "0");
    scalar = run();
  }
  EXPECT_TRUE(same_bytes(vec[0], scalar[0])) << "swiglu";
  EXPECT_TRUE(same_bytes(vec[1], scalar[1])) << "gated_residual";
  const char* names[] = {"rms_norm_modulate", "rms_norm", "qk_norm_rope"};
  for (int i = 0; i < 3; ++i) {
    const Diff dd = diff(vec[i + 2], scalar[i + 2]);
    std::printf("%s eight-wide vs scalar (bf16): rel_l2=%.3e max_abs=%.3e (bound 2e-3)\n", names[i],
                dd.rel_l2, dd.max_abs);
    EXPECT_LE(dd.rel_l2, 2e-3) << names[i];
  }
}

// The eight-wide q/k norm + RoPE kernel with a lane group on four, two or one rows of a token
// (H3_QKROPE_ROWS): each row's arithmetic and its sum's shuffle order are the same, so are the
// bytes. The DiT's 56 heads of 128 (96 rotated here) and the video VAE decoder's 32 of 64 (48).
TEST(CudaFusion, QkNormRopeRowsPerLaneGroupGiveTheSameBytes) {
  H3_REQUIRE_CUDA();
  struct Shape {
    int64_t s, h, d;
    int rot;
    DType dt;
  };
  for (const Shape& sh :
       {Shape{301, 56, 128, 96, DType::kBF16}, Shape{97, 32, 64, 48, DType::kF16}}) {
    SCOPED_TRACE("heads " + std::to_string(sh.h) + " x " + std::to_string(sh.d));
    const Tensor q = to_gpu(randn({sh.s, sh.h, sh.d}, sh.dt, 81));
    const Tensor w = to_gpu(randn({sh.d}, sh.dt, 82, 0.2f));
    const Tensor ct = rope_table(sh.s, sh.rot, true), st = rope_table(sh.s, sh.rot, false);
    std::vector<Tensor> outs;
    for (const char* rows : {"4", "2", "1"}) {
      ScopedEnv env("H3_QKROPE_ROWS", rows);
      outs.push_back(ops::qk_norm_rope(q, &w, 1e-6f, ct, st, sh.rot));
    }
    EXPECT_TRUE(same_bytes(outs[0], outs[2])) << "four rows against one";
    EXPECT_TRUE(same_bytes(outs[1], outs[2])) << "two rows against one";
  }
}

// The video VAE decoder's residual + pre-norm in one pass equals the composition it replaces
// (the LayerScale product and sum in float32, the vec8 RMSNorm, the cast) bit for bit.
TEST(CudaFusion, ResidualNormEqualsTheComposition) {
  H3_REQUIRE_CUDA();
  const int64_t s = 301, c = 2048;
  const Tensor x = to_gpu(randn({s, c}, DType::kF32, 41));
  const Tensor br = to_gpu(randn({s, c}, DType::kF16, 42));
  const Tensor sc = to_gpu(randn({c}, DType::kF32, 43, 0.2f));
  const Tensor w = to_gpu(randn({c}, DType::kF32, 44, 0.5f));
  const ops::ResidualNorm fused = ops::layerscale_residual_rms_norm(x, br, sc, &w, 1e-5f, DType::kF16);
  ops::ResidualNorm plain;
  {
    ScopedEnv off("H3_FUSE_RESIDUAL_NORM", "0");
    plain = ops::layerscale_residual_rms_norm(x, br, sc, &w, 1e-5f, DType::kF16);
  }
  const Tensor manual_x = ops::add(x, ops::mul(ops::cast(br, DType::kF32), sc));
  const Tensor manual_n = ops::cast(ops::rms_norm(manual_x, &w, 1e-5f), DType::kF16);
  ASSERT_EQ(fused.normed.dtype(), DType::kF16);
  EXPECT_TRUE(same_bytes(fused.x, manual_x)) << "x' differs from add(x, mul(cast(branch), scale))";
  EXPECT_TRUE(same_bytes(fused.normed, manual_n)) << "the norm differs from cast(rms_norm(x'))";
  EXPECT_TRUE(same_bytes(plain.x, manual_x));
  EXPECT_TRUE(same_bytes(plain.normed, manual_n));
}

// The FP8 GEMM's bias in cuBLASLt's epilogue against the float32 accumulator plus a bias kernel
// (H3_FUSE_FP8_BIAS=0): both add the bias in float32 to the scaled sum and round once to bf16, so
// they differ at most where the two kernels' float32 sums differ in the last bits.
TEST(CudaFusion, Fp8BiasInEpilogueMatchesTheFloat32Accumulator) {
  H3_REQUIRE_CUDA();
  const int64_t m = 300, k = 512, n = 384;
  const Tensor x = to_gpu(randn({m, k}, DType::kBF16, 21));
  const Tensor w = to_gpu(randn({n, k}, DType::kBF16, 22, 0.02f));
  const ops::Fp8Weight wq = ops::quantize_weight_fp8(w, ops::Fp8WeightScaling::kPerChannel);
  const ops::Fp8Activation xq = ops::quantize_activation_fp8(x, ops::Fp8ActScaling::kPerToken);
  for (DType bt : {DType::kBF16, DType::kF32}) {
    const Tensor bias = to_gpu(randn({n}, bt, 23, 0.1f));
    // Hopper's FP8 kernels take a bias of either dtype with bf16 outputs; where a GPU's do not,
    // both runs below take the accumulator and the comparison says nothing: skip visibly.
    if (!ops::cuda::linear_fp8_bias_in_epilogue(m, n, k, DType::kBF16, bt, 0)) {
      std::printf("no FP8 kernel with a %s bias in its epilogue here: not compared\n",
                  dtype_name(bt));
      continue;
    }
    const Tensor fused = ops::linear_fp8(xq, wq, &bias);
    const Tensor again = ops::linear_fp8(xq, wq, &bias);
    EXPECT_TRUE(same_bytes(fused, again)) << "two runs of the epilogue kernel differ";
    Tensor plain;
    {
      ScopedEnv off("H3_FUSE_FP8_BIAS", "0");
      EXPECT_FALSE(ops::cuda::linear_fp8_bias_in_epilogue(m, n, k, DType::kBF16, bt, 0));
      plain = ops::linear_fp8(xq, wq, &bias);
    }
    const Diff d = diff(fused, plain);
    std::printf("fp8 linear, %s bias in the epilogue vs the accumulator: rel_l2=%.3e max_abs=%.3e "
                "(bound 1e-3)\n",
                dtype_name(bt), d.rel_l2, d.max_abs);
    EXPECT_LE(d.rel_l2, 1e-3);
  }
}

// The vectorized quantization of bf16 (DiT) and f16 (video VAE decoder) rows, per token and per
// group, against the scalar kernels it replaces (H3_FUSE_FP8_QUANT_VEC=0): the same arithmetic, so
// the same bytes and scales, outliers, a NaN row and an all-zero row included.
TEST(CudaFusion, Fp8VectorQuantizationEqualsTheScalarKernel) {
  H3_REQUIRE_CUDA();
  // Per token k = 1,032 (k % 8 == 0, not a multiple of the block's 256 threads x 8); per group
  // k = 1,024 (runs of 128) over 37 rows, padded to 40.
  const std::pair<ops::Fp8ActScaling, int64_t> variants[] = {{ops::Fp8ActScaling::kPerToken, 1032},
                                                             {ops::Fp8ActScaling::kPerGroup, 1024}};
  for (const auto& [act, k] : variants) {
    SCOPED_TRACE(ops::fp8_act_scaling_name(act));
    const int64_t m = 37;
    std::vector<float> v = randn({m, k}, DType::kF32, 31).to_f32_vector();
    for (size_t i = 0; i < v.size(); i += 131) v[i] *= 40.0f;
    for (int64_t c = 0; c < k; ++c) v[static_cast<size_t>(3 * k + c)] = 0.0f;
    v[static_cast<size_t>(5 * k + 17)] = std::nanf("");
    v[static_cast<size_t>(6 * k + 3)] = INFINITY;
    for (DType dt : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(dtype_name(dt));
      const Tensor x = to_gpu(Tensor::from_f32(v, {m, k}, dt));
      ASSERT_TRUE(ops::cuda::quantizes_vectorized(x, act));
      const ops::Fp8Activation vec = ops::quantize_activation_fp8(x, act);
      ops::Fp8Activation plain;
      {
        ScopedEnv off("H3_FUSE_FP8_QUANT_VEC", "0");
        ASSERT_FALSE(ops::cuda::quantizes_vectorized(x, act));
        plain = ops::quantize_activation_fp8(x, act);
      }
      expect_same_fp8(vec, plain, "vectorized against scalar");
    }
  }
}

// The fused SwiGLU + quantization (the FP8 feed-forward's output projection input), per token and
// per group, against swiglu then quantize_activation_fp8: the same E4M3 bytes and scales, with a
// row of zeros (scale 1), one holding a NaN and one an infinity (their scales NaN), and leading
// dimensions folded into rows.
TEST(CudaFusion, SwigluFp8EqualsSwigluThenQuantize) {
  H3_REQUIRE_CUDA();
  // Per token (F = 2,056: not a multiple of the kernel's 256 threads x 8) and per group (F = 2,048,
  // runs of 128; 29 rows: padded to 32 for the block-scaled GEMM).
  const std::pair<ops::Fp8ActScaling, int64_t> variants[] = {{ops::Fp8ActScaling::kPerToken, 2056},
                                                             {ops::Fp8ActScaling::kPerGroup, 2048}};
  for (const auto& [act, f] : variants) {
    SCOPED_TRACE(ops::fp8_act_scaling_name(act));
    const int64_t m = 29;
    std::vector<float> v = randn({m, 2 * f}, DType::kF32, 41).to_f32_vector();
    for (size_t i = 0; i < v.size(); i += 137) v[i] *= 30.0f;
    for (int64_t c = 0; c < 2 * f; ++c) v[static_cast<size_t>(4 * 2 * f + c)] = 0.0f;
    v[static_cast<size_t>(7 * 2 * f + 11)] = std::nanf("");  // a value: NaN product
    v[static_cast<size_t>(9 * 2 * f + f + 5)] = -INFINITY;   // a gate: silu(-inf) * v
    v[static_cast<size_t>(12 * 2 * f + 3)] = INFINITY;
    for (DType dt : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(dtype_name(dt));
      const Tensor u = to_gpu(Tensor::from_f32(v, {1, m, 2 * f}, dt));
      ops::Fp8Activation fused;
      {
        ScopedEnv on("H3_FUSE_FP8_SWIGLU", "1");
        ASSERT_TRUE(ops::cuda::swiglu_fp8_fused(u, act));
        fused = ops::swiglu_fp8(u, act);
      }
      ops::Fp8Activation plain;
      {
        ScopedEnv off("H3_FUSE_FP8_SWIGLU", "0");
        ASSERT_FALSE(ops::cuda::swiglu_fp8_fused(u, act));
        plain = ops::swiglu_fp8(u, act);
      }
      const ops::Fp8Activation composed = ops::quantize_activation_fp8(ops::swiglu(u), act);
      EXPECT_EQ(fused.shape, (Shape{1, m, f}));
      EXPECT_EQ(fused.dtype, dt);
      EXPECT_EQ(fused.scaling, act);
      expect_same_fp8(fused, plain, "fused against the switch off");
      expect_same_fp8(fused, composed, "fused against the two ops");
    }
  }
}

// The DiT block's modulated rows straight to E4M3 against rms_norm_modulate then
// quantize_activation_fp8, per token and per group: the same bytes and scales for 16-bit and
// float32 rows (a row with a NaN, one with an outlier), with the switch off the composition itself
// (H3_FUSE_FP8_NORM_MODULATE=0), and a bad table index refused as rms_norm_modulate refuses it.
TEST(CudaFusion, RmsNormModulateFp8EqualsNormModulateThenQuantize) {
  H3_REQUIRE_CUDA();
  const int64_t m = 45, tables = 3;
  std::vector<float> idxv(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i)
    idxv[static_cast<size_t>(i)] = static_cast<float>((i * 7) % tables);
  const Tensor idx = to_gpu(Tensor::from_f32(idxv, {m}, DType::kI64));
  // Per token over 1,032 columns and per group over 1,024 (runs of 128; 45 rows padded to 48).
  // The DiT's 5,376 too: a CTA of four warps per row (16-bit rows held in registers).
  const std::pair<ops::Fp8ActScaling, int64_t> variants[] = {{ops::Fp8ActScaling::kPerToken, 1032},
                                                             {ops::Fp8ActScaling::kPerGroup, 1024},
                                                             {ops::Fp8ActScaling::kPerToken, 5376},
                                                             {ops::Fp8ActScaling::kPerGroup, 5376}};
  for (const auto& [act, c] : variants) {
    SCOPED_TRACE(ops::fp8_act_scaling_name(act));
    std::vector<float> xv = randn({m, c}, DType::kF32, 51).to_f32_vector();
    xv[static_cast<size_t>(6 * c + 9)] = std::nanf("");
    xv[static_cast<size_t>(8 * c + 100)] = 300.0f;
    for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
      SCOPED_TRACE(dtype_name(dt));
      const Tensor x = to_gpu(Tensor::from_f32(xv, {m, c}, dt));
      const Tensor w = to_gpu(randn({c}, dt, 52));
      const Tensor sc = to_gpu(randn({tables, c}, dt, 53));
      const Tensor sh = to_gpu(randn({tables, c}, dt, 54));
      ops::Fp8Activation fused;
      {
        ScopedEnv on("H3_FUSE_FP8_NORM_MODULATE", "1");
        ASSERT_TRUE(ops::cuda::rms_norm_modulate_fp8_fused(x, &w, sc, sh, act));
        fused = ops::rms_norm_modulate_fp8(x, &w, 1e-6f, sc, sh, idx, act);
      }
      const ops::Fp8Activation composed =
          ops::quantize_activation_fp8(ops::rms_norm_modulate(x, &w, 1e-6f, sc, sh, idx), act);
      ops::Fp8Activation off;
      {
        ScopedEnv env("H3_FUSE_FP8_NORM_MODULATE", "0");
        ASSERT_FALSE(ops::cuda::rms_norm_modulate_fp8_fused(x, &w, sc, sh, act));
        off = ops::rms_norm_modulate_fp8(x, &w, 1e-6f, sc, sh, idx, act);
      }
      EXPECT_EQ(fused.shape, (Shape{m, c}));
      EXPECT_EQ(fused.dtype, dt);
      EXPECT_EQ(fused.scaling, act);
      expect_same_fp8(fused, composed, "fused against the two ops");
      expect_same_fp8(off, composed, "the switch off against the two ops");
    }
  }
  const int64_t c = 1032;
  const std::vector<float> xv = randn({m, c}, DType::kF32, 51).to_f32_vector();
  std::vector<float> bad = idxv;
  bad[3] = static_cast<float>(tables);
  const Tensor x = to_gpu(Tensor::from_f32(xv, {m, c}, DType::kBF16));
  const Tensor t = to_gpu(randn({tables, c}, DType::kBF16, 55));
  EXPECT_THROW((void)ops::rms_norm_modulate_fp8(x, nullptr, 1e-6f, t, t,
                                                to_gpu(Tensor::from_f32(bad, {m}, DType::kI64)),
                                                ops::Fp8ActScaling::kPerToken),
               Error);
}

// The DiT block's attention residual and the feed-forward's norm in one pass, against
// gated_residual then rms_norm_modulate (and then rms_norm_modulate_fp8 for its E4M3 form), at a
// width a warp holds and at the DiT's (a CTA of four warps per row): the same bytes, the sum as
// gated_residual stores it. The row kernels that hold a row in registers against the two-pass
// ones (H3_FUSE_ROW_REGS=0): with a warp per row the squares add in the same order, so the same
// bytes; with four warps in another, so the norm's scale may move by its last bit.
TEST(CudaFusion, GatedNormEqualsGatedResidualThenNorm) {
  H3_REQUIRE_CUDA();
  const int64_t s = 75, tables = 4;
  std::vector<int64_t> iv(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i) iv[static_cast<size_t>(i)] = (i * 3) % tables;
  const Tensor idx = to_gpu(Tensor::from_i64(iv, {s}));
  for (int64_t c : {1024, 5376}) {
    SCOPED_TRACE("width " + std::to_string(c));
    const Tensor x = to_gpu(randn({s, c}, DType::kBF16, 61));
    const Tensor br = to_gpu(randn({s, c}, DType::kBF16, 62));
    const Tensor g = to_gpu(randn({tables, c}, DType::kBF16, 63, 0.5f));
    const Tensor sc = to_gpu(randn({tables, c}, DType::kBF16, 64, 0.3f));
    const Tensor sh = to_gpu(randn({tables, c}, DType::kBF16, 65, 0.3f));
    const Tensor w = to_gpu(randn({c}, DType::kBF16, 66, 0.2f));
    const ops::GatedNorm fused =
        ops::gated_residual_rms_norm_modulate(x, br, g, idx, &w, 1e-6f, sc, sh);
    const Tensor sum = ops::gated_residual(x, br, g, idx);
    const Tensor normed = ops::rms_norm_modulate(sum, &w, 1e-6f, sc, sh, idx);
    EXPECT_TRUE(same_bytes(fused.x, sum)) << "the sum";
    EXPECT_TRUE(same_bytes(fused.modulated, normed)) << "the modulated rows";
    {
      ScopedEnv off("H3_FUSE_GATED_NORM", "0");
      const ops::GatedNorm plain =
          ops::gated_residual_rms_norm_modulate(x, br, g, idx, &w, 1e-6f, sc, sh);
      EXPECT_TRUE(same_bytes(plain.x, sum) && same_bytes(plain.modulated, normed)) << "switch off";
    }
    for (ops::Fp8ActScaling act : {ops::Fp8ActScaling::kPerToken, ops::Fp8ActScaling::kPerGroup}) {
      SCOPED_TRACE(ops::fp8_act_scaling_name(act));
      const ops::GatedNormFp8 f8 =
          ops::gated_residual_rms_norm_modulate_fp8(x, br, g, idx, &w, 1e-6f, sc, sh, act);
      EXPECT_TRUE(same_bytes(f8.x, sum)) << "the sum (E4M3 rows)";
      expect_same_fp8(f8.modulated, ops::rms_norm_modulate_fp8(sum, &w, 1e-6f, sc, sh, idx, act),
                      "one pass against gated_residual then rms_norm_modulate_fp8");
    }
    Tensor two_pass;
    {
      ScopedEnv off("H3_FUSE_ROW_REGS", "0");
      two_pass = ops::rms_norm_modulate(sum, &w, 1e-6f, sc, sh, idx);
    }
    if (c <= 2048) {
      EXPECT_TRUE(same_bytes(normed, two_pass)) << "a warp per row against the two-pass kernel";
    } else {
      const Diff d = diff(normed, two_pass);
      std::printf(
          "rms_norm_modulate rows in registers (four warps) vs two-pass, width %lld: rel_l2=%.3e "
          "max_abs=%.3e (bound 1e-3)\n",
          static_cast<long long>(c), d.rel_l2, d.max_abs);
      EXPECT_LE(d.rel_l2, 1e-3);
    }
  }
  std::vector<int64_t> bad = iv;
  bad[5] = tables;
  const Tensor t = to_gpu(randn({tables, 1024}, DType::kBF16, 67));
  const Tensor x = to_gpu(randn({s, 1024}, DType::kBF16, 68));
  EXPECT_THROW((void)ops::gated_residual_rms_norm_modulate(
                   x, x, t, to_gpu(Tensor::from_i64(bad, {s})), nullptr, 1e-6f, t, t),
               Error);
}

TEST(CudaAttention, FlashAgreesWithGenericAndIsDeterministic) {
  H3_REQUIRE_CUDA();
  const int64_t s = 1000, h = 4, d = 128;
  const Tensor q = to_gpu(randn({s, h, d}, DType::kBF16, 11));
  const Tensor k = to_gpu(randn({s, h, d}, DType::kBF16, 12));
  const Tensor v = to_gpu(randn({s, h, d}, DType::kBF16, 13));
  ASSERT_EQ(ops::cuda::attention_path(q, k, v, nullptr), ops::cuda::AttentionPath::kFlash);
  const Tensor a = ops::attention(q, k, v);
  const Tensor b = ops::attention(q, k, v);
  EXPECT_TRUE(same_bytes(a, b)) << "two runs of the flash kernel differ";
  Tensor g;
  {
    ScopedEnv generic("H3_ATTN_GENERIC", "1");
    g = ops::attention(q, k, v);
  }
  // Float32 CPU oracle on the same (bf16-valued) inputs.
  const Tensor ref = ops::attention(q.to(Device::cpu()).to(DType::kF32), k.to(Device::cpu()).to(DType::kF32),
                                    v.to(Device::cpu()).to(DType::kF32));
  const Diff df = diff(a, ref), dg = diff(g, ref);
  std::printf("attention s=%lld h=%lld d=%lld bf16: flash rel_l2=%.3e, generic rel_l2=%.3e vs f32 CPU (bound 1e-2)\n",
              static_cast<long long>(s), static_cast<long long>(h), static_cast<long long>(d), df.rel_l2, dg.rel_l2);
  EXPECT_LE(df.rel_l2, 1e-2);
  EXPECT_LE(dg.rel_l2, 1e-2);
}

// The Hopper kernel at head dim 64 with three consumer warpgroups (192 query rows per CTA,
// H3_ATTN_HOPPER_D64_WARPGROUPS=3) against two: each row's softmax and products run in the same
// order whichever warpgroup owns it, so the outputs are the same bytes; f16 and bf16, the VAE's
// block-diagonal tiles of 1,797 rows and one segment whose rows are not a multiple of 192.
TEST(CudaAttention, HopperHeadDim64ThreeWarpgroupsEqualTwo) {
  H3_REQUIRE_CUDA();
  if (!ops::attention_kernel_available(ops::AttentionKernel::kHopper, Device::cuda(0))) {
    GTEST_SKIP() << "no Hopper kernel on this device";
  }
  const int64_t s = 3594, h = 3, d = 64;
  for (DType dt : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor q = to_gpu(randn({s, h, d}, dt, 61));
    const Tensor k = to_gpu(randn({s, h, d}, dt, 62));
    const Tensor v = to_gpu(randn({s, h, d}, dt, 63));
    for (bool tiles : {true, false}) {
      ops::AttentionParams p;
      p.kernel = ops::AttentionKernel::kHopper;
      if (tiles) p.cu_seqlens = {0, 1797, 3594};
      Tensor two, three;
      {
        ScopedEnv wg("H3_ATTN_HOPPER_D64_WARPGROUPS", "2");
        two = ops::attention(q, k, v, p);
      }
      {
        ScopedEnv wg("H3_ATTN_HOPPER_D64_WARPGROUPS", "3");
        three = ops::attention(q, k, v, p);
      }
      EXPECT_TRUE(same_bytes(two, three)) << (tiles ? "tiles" : "one segment");
    }
  }
}

// Which kernel runs is reported (attention_kernel_for) and can be chosen: on a Hopper GPU the
// automatic choice at head dim 64 (the video VAE decoder) is the wgmma kernel, H3_ATTN_HOPPER=0
// takes the mma.sync one, a kernel named for inputs it cannot take is refused with the reason, and
// the two tensor-core kernels agree with the float32 oracle and are each deterministic.
TEST(CudaAttention, KernelChoiceIsReportedAndNamedKernelsRefuseWhatTheyCannotTake) {
  H3_REQUIRE_CUDA();
  const int64_t s = 700, h = 4, d = 64;
  const Tensor q = to_gpu(randn({s, h, d}, DType::kF16, 51));
  const Tensor k = to_gpu(randn({s, h, d}, DType::kF16, 52));
  const Tensor v = to_gpu(randn({s, h, d}, DType::kF16, 53));
  ops::AttentionParams p;
  p.cu_seqlens = {0, 300, 700};
  const bool hopper = ops::attention_kernel_available(ops::AttentionKernel::kHopper, Device::cuda(0));
  EXPECT_EQ(ops::attention_kernel_for(q, k, v, p),
            hopper ? ops::AttentionKernel::kHopper : ops::AttentionKernel::kMma);
  {
    ScopedEnv off("H3_ATTN_HOPPER", "0");
    EXPECT_EQ(ops::attention_kernel_for(q, k, v, p), ops::AttentionKernel::kMma);
  }
  const Tensor ref = ops::attention(q.to(Device::cpu()).to(DType::kF32), k.to(Device::cpu()).to(DType::kF32),
                                    v.to(Device::cpu()).to(DType::kF32), p);
  for (ops::AttentionKernel kern : {ops::AttentionKernel::kHopper, ops::AttentionKernel::kMma, ops::AttentionKernel::kGeneric}) {
    if (kern == ops::AttentionKernel::kHopper && !hopper) continue;
    ops::AttentionParams pk = p;
    pk.kernel = kern;
    EXPECT_EQ(ops::attention_kernel_for(q, k, v, pk), kern);
    const Tensor a = ops::attention(q, k, v, pk), b = ops::attention(q, k, v, pk);
    EXPECT_TRUE(same_bytes(a, b)) << ops::attention_kernel_name(kern) << ": two runs differ";
    const Diff df = diff(a, ref);
    std::printf("attention %s f16 d64 varlen: rel_l2=%.3e vs f32 CPU (bound 2e-3)\n", ops::attention_kernel_name(kern),
                df.rel_l2);
    EXPECT_LE(df.rel_l2, 2e-3) << ops::attention_kernel_name(kern);
  }
  // Head dim 72 (the vision tower's): only the generic kernel takes it.
  const Tensor q72 = to_gpu(randn({40, 2, 72}, DType::kBF16, 54));
  ops::AttentionParams ph;
  ph.kernel = ops::AttentionKernel::kHopper;
  EXPECT_THROW(ops::attention(q72, q72, q72, ph), Error);
  ph.kernel = ops::AttentionKernel::kMma;
  try {
    (void)ops::attention(q72, q72, q72, ph);
    ADD_FAILURE() << "the mma kernel took head dim 72";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("mma kernel does not take"), std::string::npos) << e.what();
  }
  ph.kernel = ops::AttentionKernel::kGeneric;
  EXPECT_EQ(ops::attention(q72, q72, q72, ph).shape(), q72.shape());
}

TEST(CudaAttention, StridedQkvViewsMatchContiguous) {
  H3_REQUIRE_CUDA();
  // q, k, v as views of one fused projection [S, 3, H, D], the layout a fused QKV GEMM produces.
  const int64_t s = 190, h = 4, d = 64;
  const Tensor qkv = to_gpu(randn({s, 3, h, d}, DType::kBF16, 14));
  const Tensor q = qkv.select(1, 0), k = qkv.select(1, 1), v = qkv.select(1, 2);
  const Tensor a = ops::attention(q, k, v);
  const Tensor b = ops::attention(ops::copy(q), ops::copy(k), ops::copy(v));
  EXPECT_TRUE(same_bytes(a, b));
}

TEST(CudaErrors, OutOfRangeIndexIsAnError) {
  H3_REQUIRE_CUDA();
  const Tensor x = to_gpu(randn({4, 8}, DType::kF32, 15));
  const Tensor sc = to_gpu(randn({2, 8}, DType::kF32, 16));
  const Tensor idx = to_gpu(Tensor::from_i64({0, 1, 2, 0}, {4}));
  try {
    (void)ops::modulate(x, sc, sc, idx);
    FAIL() << "modulate accepted index 2 into a 2-row table";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  try {
    (void)ops::gather_rows(x, to_gpu(Tensor::from_i64({5}, {1})));
    FAIL() << "gather_rows accepted row 5 of 4";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
  // The device is still usable afterwards.
  const Tensor y = ops::scale(x, 2.0f);
  EXPECT_NEAR(y.to(Device::cpu()).item_as_double({0, 0}), 2.0 * x.to(Device::cpu()).item_as_double({0, 0}), 1e-6);
}

TEST(CudaLayout, StridedCopyConcatAndCast) {
  H3_REQUIRE_CUDA();
  const Tensor x = randn({5, 6, 7}, DType::kF32, 17);
  const Tensor g = to_gpu(x);
  const Tensor t = ops::copy(g.permute({2, 0, 1}));
  EXPECT_TRUE(same_bytes(t, x.permute({2, 0, 1}).contiguous()));
  const Tensor c = ops::concat({g.slice(1, 0, 2), g.slice(1, 2, 6)}, 1);
  EXPECT_TRUE(same_bytes(c, x));
  const Tensor h = ops::cast(g, DType::kBF16);
  EXPECT_TRUE(same_bytes(h, x.to(DType::kBF16))) << "cast must round to nearest even like the CPU";
}

}  // namespace
}  // namespace h3
