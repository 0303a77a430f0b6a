// --dit-dtype fp8 in the DiT (issue #15) where it needs no GPU: which tensors become E4M3, that
// they stand for the loaded weights within E4M3's rounding, and that streaming FP8 blocks is
// refused by name rather than run wrong. Parity against the golden is tests/golden/test_dit.cpp
// (DitGolden.Fp8EmulationAgainstBf16); the kernels are tests/ops/test_fp8.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/h3_dit/dit_model.h"
#include "models/tiny_model.h"
#include "ops/fp8.h"
#include "support/temp_dir.h"

namespace h3 {
namespace {

class DitFp8Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("h3_dit_fp8");
    repo_ = (dir_->path() / "tiny").string();
    models::make_tiny(repo_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static dit::DitModel load(bool fp8) {
    dit::DitOptions o;
    o.precision = dit::DitPrecision::kBF16;
    o.fp8 = fp8;
    return dit::DitModel::load(repo_ + "/transformer", o);
  }
  static std::unique_ptr<test::TempDir> dir_;
  static std::string repo_;
};
std::unique_ptr<test::TempDir> DitFp8Test::dir_;
std::string DitFp8Test::repo_;

// Each E4M3 value times its channel's scale is the loaded bf16 weight to within half a step of
// E4M3 (2^-4 relative for normal values, 2^-10 of the scale below them).
void expect_quantized(const Tensor& q, const Tensor& scale, const Tensor& w,
                      const std::string& what) {
  ASSERT_EQ(q.dtype(), DType::kF8E4M3) << what;
  ASSERT_EQ(q.shape(), w.shape()) << what;
  ASSERT_EQ(scale.shape(), Shape{w.size(0)}) << what;
  const std::vector<float> d =
      ops::dequantize_weight_fp8({q, scale, ops::Fp8WeightScaling::kPerChannel}, DType::kF32)
          .to_f32_vector();
  const std::vector<float> v = w.to_f32_vector(), s = scale.to_f32_vector();
  const int64_t k = w.size(1);
  for (size_t i = 0; i < v.size(); ++i) {
    const float sc = s[i / static_cast<size_t>(k)];
    ASSERT_LE(std::fabs(d[i] - v[i]), 0.0625f * std::fabs(v[i]) + sc * 0x1p-10f)
        << what << " [" << i << "]";
  }
}

TEST_F(DitFp8Test, BlockProjectionsAndAdalnBecomeE4M3AndNothingElse) {
  const dit::DitModel base = load(false);
  const dit::DitModel m = load(true);
  const dit::DitWeights &a = base.weights(), &b = m.weights();
  ASSERT_EQ(a.blocks.size(), b.blocks.size());
  ASSERT_FALSE(b.blocks.empty());
  auto check = [&](const dit::DitAttentionWeights& wa, const dit::DitAttentionWeights& wb,
                   const dit::DitFeedForwardWeights& fa, const dit::DitFeedForwardWeights& fb,
                   const std::string& where) {
    expect_quantized(wb.to_q, wb.to_q_scale, wa.to_q, where + " to_q");
    expect_quantized(wb.to_k, wb.to_k_scale, wa.to_k, where + " to_k");
    expect_quantized(wb.to_v, wb.to_v_scale, wa.to_v, where + " to_v");
    expect_quantized(wb.to_out, wb.to_out_scale, wa.to_out, where + " to_out");
    expect_quantized(fb.fc_in, fb.fc_in_scale, fa.fc_in, where + " fc_in");
    expect_quantized(fb.fc_out, fb.fc_out_scale, fa.fc_out, where + " fc_out");
    EXPECT_EQ(wb.norm_q.dtype(), wa.norm_q.dtype()) << where;
  };
  for (size_t i = 0; i < b.blocks.size(); ++i) {
    check(a.blocks[i].attn, b.blocks[i].attn, a.blocks[i].ff, b.blocks[i].ff,
          "block " + std::to_string(i));
    expect_quantized(b.blocks[i].adaln_w, b.blocks[i].adaln_scale, a.blocks[i].adaln_w,
                     "block " + std::to_string(i) + " adaln");
    EXPECT_EQ(b.blocks[i].adaln_b.dtype(), a.blocks[i].adaln_b.dtype());
    EXPECT_EQ(b.blocks[i].norm1.dtype(), a.blocks[i].norm1.dtype());
  }
  for (size_t i = 0; i < b.refiner.size(); ++i)
    check(a.refiner[i].attn, b.refiner[i].attn, a.refiner[i].ff, b.refiner[i].ff,
          "refiner " + std::to_string(i));
  EXPECT_EQ(b.proj_in_w.dtype(), DType::kF32);  // float32 islands untouched
  EXPECT_EQ(b.context_w.dtype(), DType::kBF16);
}

TEST_F(DitFp8Test, StreamingFp8BlocksIsRefusedByName) {
  dit::DitOptions o;
  o.fp8 = true;
  o.resident_blocks = 1;
  try {
    (void)dit::resolve_resident_blocks(o, 2);
    FAIL() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("--dit-dtype fp8"), std::string::npos) << e.what();
  }
  o.resident_blocks = 2;
  EXPECT_EQ(dit::resolve_resident_blocks(o, 2), 2);
}

}  // namespace
}  // namespace h3
