// Unit tests of the torch-compatible generator that need no golden data: the twister, the seed
// rules, the block/tail/cache structure of torch's samplers, and a few published torch values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/status.h"
#include "pipeline/torch_generator.h"

namespace h3 {
namespace {

std::vector<float> randn(TorchGenerator& g, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  g.randn_f32(v.data(), n);
  return v;
}

uint32_t bits(float f) { return f32_bits(f); }

TEST(TorchGenerator, TwisterMatchesStdMt19937AcrossTwists) {
  // torch's mt19937 is the reference Mersenne Twister; 2000 outputs cross three state refills.
  for (uint32_t seed : {0u, 1u, 42u, 2147483647u, 4294967295u}) {
    TorchGenerator g(seed);
    std::mt19937 ref(seed);
    for (int i = 0; i < 2000; ++i)
      ASSERT_EQ(g.random(), ref()) << "seed " << seed << " output " << i;
  }
}

TEST(TorchGenerator, SeedKeepsLow32Bits) {
  TorchGenerator a((uint64_t{1} << 40) + 5);
  TorchGenerator b(5);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.random(), b.random());
  EXPECT_EQ(a.initial_seed(), (uint64_t{1} << 40) + 5);
}

TEST(TorchGenerator, Random64IsHighWordFirst) {
  TorchGenerator a(7), b(7);
  const uint64_t hi = a.random(), lo = a.random();
  EXPECT_EQ(b.random64(), (hi << 32) | lo);
}

TEST(TorchGenerator, PublishedTorchValues) {
  // torch.manual_seed(0); torch.randn(4, 4) / torch.randn(4) / torch.rand(4), as printed by torch.
  TorchGenerator g(0);
  const std::vector<float> v = randn(g, 16);
  const float want16[16] = {-1.1258f, -1.1524f, -0.2506f, -0.4339f, 0.8487f, 0.6920f,
                            -0.3160f, -2.1152f, 0.3223f,  -1.2633f, 0.3500f, 0.3081f,
                            0.1198f,  1.2377f,  1.1168f,  -0.2473f};
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(v[i], want16[i], 5.1e-5) << "randn(16)[" << i << "]";
  TorchGenerator g4(0);
  const std::vector<float> s = randn(g4, 4);  // fewer than 16: the float64 scalar path
  const float want4[4] = {1.5410f, -0.2934f, -2.1788f, 0.5684f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(s[i], want4[i], 5.1e-5) << "randn(4)[" << i << "]";
  TorchGenerator gr(0);
  float r[2];
  gr.rand_f32(r, 2);
  EXPECT_NEAR(r[0], 0.4963f, 5.1e-5);
  EXPECT_NEAR(r[1], 0.7682f, 5.1e-5);
}

TEST(TorchGenerator, WholeBlocksContinueTheStream) {
  // Blocks of 16 are independent, so randn(16) then randn(16) equals randn(32).
  TorchGenerator a(3), b(3);
  std::vector<float> first = randn(a, 16), second = randn(a, 16);
  first.insert(first.end(), second.begin(), second.end());
  const std::vector<float> joint = randn(b, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(bits(first[i]), bits(joint[i])) << i;
}

TEST(TorchGenerator, TailRedrawsTheLastSixteen) {
  // n = 17: element 0 comes from the first block, elements 1..16 from a fresh block of 16.
  TorchGenerator a(11), b(11);
  const std::vector<float> v17 = randn(a, 17);
  const std::vector<float> v16 = randn(b, 16);
  EXPECT_EQ(bits(v17[0]), bits(v16[0]));
  int same = 0;
  for (int i = 1; i < 16; ++i) same += bits(v17[i]) == bits(v16[i]);
  EXPECT_LT(same, 3) << "the tail should be a new block, not the first one";
  // The fresh block used 16 more outputs: both generators are now 33 vs 16 outputs in.
  TorchGenerator c(11);
  for (int i = 0; i < 33; ++i) c.random();
  EXPECT_EQ(a.random(), c.random());
}

TEST(TorchGenerator, ScalarPathCachesTheSecondNormal) {
  // randn(1) twice uses both halves of one Box-Muller pair, like randn(2).
  TorchGenerator a(5), b(5);
  const float x0 = randn(a, 1)[0];
  const float x1 = randn(a, 1)[0];
  const std::vector<float> pair = randn(b, 2);
  EXPECT_EQ(bits(x0), bits(pair[0]));
  EXPECT_EQ(bits(x1), bits(pair[1]));
  // The cache survives a block draw in between (blocks do not touch it) ...
  TorchGenerator c(5), d(5);
  const float y0 = randn(c, 1)[0];
  randn(c, 16);
  const float y1 = randn(c, 1)[0];
  EXPECT_EQ(bits(y0), bits(pair[0]));
  EXPECT_EQ(bits(y1), bits(pair[1]));
  // ... and manual_seed drops it.
  randn(d, 1);
  d.manual_seed(5);
  EXPECT_EQ(bits(randn(d, 1)[0]), bits(pair[0]));
}

TEST(TorchGenerator, StateSaveAndRestore) {
  TorchGenerator g(99);
  randn(g, 5);  // leaves a cached normal
  randn(g, 700);
  const TorchGenerator::State s = g.state();
  const std::vector<float> a = randn(g, 3);
  const std::vector<float> b = randn(g, 40);
  TorchGenerator h(1);
  h.set_state(s);
  const std::vector<float> a2 = randn(h, 3), b2 = randn(h, 40);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(bits(a[i]), bits(a2[i]));
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(bits(b[i]), bits(b2[i]));

  TorchGenerator::State bad = s;
  bad.left = 3;
  bad.next = 3;
  EXPECT_THROW(h.set_state(bad), Error);
}

TEST(TorchGenerator, DistributionIsStandardNormal) {
  for (auto math : {TorchGenerator::NormalMath::kX86Avx2, TorchGenerator::NormalMath::kLibm}) {
    TorchGenerator g(2024);
    g.set_normal_math(math);
    const int64_t n = 200000;
    const std::vector<float> v = randn(g, n);
    double sum = 0, sum2 = 0;
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x));
      sum += x;
      sum2 += static_cast<double>(x) * x;
    }
    const double mean = sum / n, var = sum2 / n - mean * mean;
    std::printf("normal math %d: mean=%.4f var=%.4f (n=%lld)\n", static_cast<int>(math), mean, var,
                static_cast<long long>(n));
    EXPECT_NEAR(mean, 0.0, 0.01);
    EXPECT_NEAR(var, 1.0, 0.015);
  }
}

TEST(TorchGenerator, AvxAndLibmPathsAgreeWithinAFewUlp) {
  TorchGenerator a(8), b(8);
  b.set_normal_math(TorchGenerator::NormalMath::kLibm);
  const std::vector<float> x = randn(a, 4096), y = randn(b, 4096);
  double worst = 0;
  int differ = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(static_cast<double>(x[i]) - y[i]);
    worst = std::max(worst, d / std::max(1.0, std::abs(static_cast<double>(y[i]))));
    differ += bits(x[i]) != bits(y[i]);
  }
  std::printf("avx2 vs libm: %d of %zu differ, worst rel %.3e\n", differ, x.size(), worst);
  EXPECT_LT(worst, 1e-5);
}

TEST(TorchGenerator, TensorApiShapesAndDtypes) {
  TorchGenerator g(0);
  const Tensor t = g.randn({4, 4});
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.shape(), (Shape{4, 4}));
  EXPECT_NEAR(t.item_as_double({0, 0}), -1.1258, 5.1e-5);
  EXPECT_EQ(g.randn({33}, DType::kF16).dtype(), DType::kF16);
  EXPECT_EQ(g.randn({33}, DType::kBF16).dtype(), DType::kBF16);
  EXPECT_EQ(g.rand({3}, DType::kF64).dtype(), DType::kF64);
  EXPECT_EQ(g.randn({0}).numel(), 0);
  try {
    g.randn({4}, DType::kI32);
    FAIL() << "randn of int32 should throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(e.message().find("i32"), std::string::npos) << e.message();
  }
  EXPECT_THROW(g.rand({4}, DType::kBF16), Error);
}

TEST(TorchGenerator, RandIsInUnitInterval) {
  TorchGenerator g(1);
  std::vector<double> d(1000);
  g.rand_f64(d.data(), 1000);
  for (double x : d) {
    EXPECT_GE(x, 0.0);
    EXPECT_LT(x, 1.0);
  }
}

}  // namespace
}  // namespace h3
