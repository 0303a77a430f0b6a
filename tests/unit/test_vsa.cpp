#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "core/status.h"
#include "ops/vsa.h"
#include "support/vsa_masks.h"

namespace h3::ops {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(Vsa, RejectsTileSizesOtherThan64And256) {
  const int64_t grid[3] = {4, 4, 4};
  for (int tile : {0, 32, 128, 512}) {
    const std::string msg = error_of([&] { build_vsa_geometry(tile, {}, grid, 64); });
    EXPECT_NE(msg.find("must be 64 or 256"), std::string::npos) << msg;
  }
}

TEST(Vsa, RejectsSequenceLengthMismatch) {
  const int64_t grid[3] = {4, 4, 4};
  const std::string msg = error_of([&] { build_vsa_geometry(64, {10, 0, 5}, grid, 80); });
  EXPECT_NE(msg.find("79 rows"), std::string::npos) << msg;
  EXPECT_NE(msg.find("80"), std::string::npos) << msg;
}

TEST(Vsa, ProductionGeometryAt64And256) {
  // 1344x768x124 T2VA: video grid (37, 24, 42), 300 text rows, 414 audio rows (spec §5.2 table).
  const int64_t grid[3] = {37, 24, 42};
  const int64_t S = 300 + 414 + 37 * 24 * 42;
  const VsaGeometry g64 = build_vsa_geometry(64, {300, 0, 414}, grid, S);
  EXPECT_EQ(g64.num_prefix_tiles, 12);
  EXPECT_EQ(g64.num_video_tiles, 660);
  EXPECT_EQ(g64.padded_length(), 43008);
  const VsaGeometry g256 = build_vsa_geometry(256, {300, 0, 414}, grid, S);
  EXPECT_EQ(g256.num_prefix_tiles, 4);
  EXPECT_EQ(g256.num_video_tiles, 180);
  EXPECT_EQ(vsa_topk(0.9, 660), 66);
  EXPECT_EQ(vsa_topk(0.95, 660), 34);  // (1-0.95)*660 = 33.00000000000003 in double
}

TEST(Vsa, ValidationCatchesBrokenIndex) {
  const int64_t grid[3] = {2, 4, 4};
  VsaGeometry g = build_vsa_geometry(64, {5}, grid, 37);
  VsaGeometry dup = g;
  dup.untile_index[1] = dup.untile_index[0];
  EXPECT_NE(error_of([&] { validate_vsa_geometry(dup); }).find("injective"), std::string::npos);
  VsaGeometry pad = g;
  pad.untile_index[0] = 63;  // slot 63 of the 5-row prefix tile is a pad
  EXPECT_NE(error_of([&] { validate_vsa_geometry(pad); }).find("pad slot"), std::string::npos);
  VsaGeometry out = g;
  out.untile_index[0] = g.padded_length();
  EXPECT_NE(error_of([&] { validate_vsa_geometry(out); }).find("outside"), std::string::npos);
}

TEST(Vsa, SparsityZeroWithoutGateIsDenseAttention) {
  // With every tile visible and no gate, the fine branch is plain softmax attention.
  const int64_t grid[3] = {2, 2, 4};
  const int64_t S = 7 + 16;
  const VsaGeometry g = build_vsa_geometry(64, {7}, grid, S);
  const int64_t H = 2, D = 8;
  std::vector<float> qv(S * H * D), kv(S * H * D), vv(S * H * D);
  for (size_t i = 0; i < qv.size(); ++i) {
    qv[i] = std::sin(0.37f * i);
    kv[i] = std::cos(0.11f * i);
    vv[i] = std::sin(0.05f * i + 1.0f);
  }
  const Tensor q = Tensor::from_f32(qv, {S, H, D}), k = Tensor::from_f32(kv, {S, H, D}),
               v = Tensor::from_f32(vv, {S, H, D});
  const Tensor out = vsa_attention(q, k, v, nullptr, g, VsaOptions{});
  const std::vector<float> o = out.to_f32_vector();
  double worst = 0;
  for (int64_t r = 0; r < S; ++r)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> w(S);
      double mx = -1e30, den = 0;
      for (int64_t c = 0; c < S; ++c) {
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += qv[(r * H + h) * D + d] * kv[(c * H + h) * D + d];
        w[c] = dot / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, w[c]);
      }
      for (double& x : w) den += (x = std::exp(x - mx));
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0;
        for (int64_t c = 0; c < S; ++c) acc += w[c] * vv[(c * H + h) * D + d];
        worst = std::max(worst, std::fabs(acc / den - o[(r * H + h) * D + d]));
      }
    }
  std::printf("vsa sparsity 0 vs dense: max abs %.2e (bound 1e-6)\n", worst);
  EXPECT_LE(worst, 1e-6);
}

TEST(Vsa, MaskKeepsPrefixAndTopK) {
  const int64_t grid[3] = {4, 4, 8};  // 2 video tiles at tile 64
  const VsaGeometry g = build_vsa_geometry(64, {10}, grid, 10 + 128);
  ASSERT_EQ(g.num_tiles(), 3);
  // One head; query tile 1 prefers key tile 2 over key tile 1.
  Tensor scores = Tensor::from_f32({0, 0, 0, 0.1f, 0.2f, 0.9f, 0.3f, 0.8f, 0.1f}, {1, 3, 3});
  const Tensor m = vsa_block_mask(scores, g, 0.5, VsaMode::kExempt);  // k_vid = 1
  const std::vector<int64_t> got = m.to_i64_vector();
  const std::vector<int64_t> want = {1, 1, 1, 1, 0, 1, 1, 1, 0};
  EXPECT_EQ(got, want);
  const Tensor c = vsa_block_mask(scores, g, 0.5, VsaMode::kCompete);  // top 2 over all keys
  EXPECT_EQ(c.to_i64_vector(), (std::vector<int64_t>{1, 1, 1, 0, 1, 1, 1, 1, 0}));
  EXPECT_THROW(vsa_block_mask(scores, g, 1.0, VsaMode::kExempt), Error);
}

// The golden tests' mask comparison (support/vsa_masks.h): a flip is accepted only where the
// reference's scores of the swapped tiles are within twice the measured score noise.
TEST(Vsa, MaskFlipsAreAcceptedOnlyWithinTheNoise) {
  // One head, 4 tiles, 1 prefix tile; query tile 2 keeps 2 of the 3 video tiles.
  const float lo = 0.3f, hi = std::nextafter(0.3f, 1.0f);  // one float32 step apart
  const std::vector<float> scores = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0.5f, hi, lo, 0, 0, 0, 0};
  auto mask = [](std::vector<uint8_t> row2) {
    Tensor m = Tensor::zeros({1, 4, 4}, DType::kU8);
    m.fill(1);
    for (int j = 0; j < 4; ++j) m.data<uint8_t>()[8 + j] = row2[static_cast<size_t>(j)];
    return m;
  };
  const Tensor s = Tensor::from_f32(scores, {1, 4, 4});
  const Tensor ref = mask({1, 1, 1, 0});   // tile 2 (hi) over tile 3 (lo)
  const Tensor flip = mask({1, 1, 0, 1});  // the other way round
  const double gap = static_cast<double>(hi) - static_cast<double>(lo);
  EXPECT_EQ(test::classify_mask_flips(ref, ref, s, 0.0).differing, 0);
  const test::MaskFlips within = test::classify_mask_flips(flip, ref, s, gap);
  std::printf("  within the noise: %s\n", test::describe(within, gap).c_str());
  EXPECT_TRUE(within.ok());
  EXPECT_EQ(within.near_ties, 2);
  const test::MaskFlips beyond = test::classify_mask_flips(flip, ref, s, gap / 4);
  std::printf("  beyond the noise: %s\n", test::describe(beyond, gap / 4).c_str());
  EXPECT_FALSE(beyond.ok());
  EXPECT_EQ(beyond.unexplained, 2);
  // Dropping the 0.5 tile is never a near tie; neither is a different number of kept tiles.
  EXPECT_FALSE(test::classify_mask_flips(mask({1, 0, 1, 1}), ref, s, gap).ok());
  EXPECT_FALSE(test::classify_mask_flips(mask({1, 1, 1, 1}), ref, s, 1.0).ok());
  // A mask computed from the reference's scores may flip only on an exact tie.
  const std::vector<float> tied = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0.5f, lo, lo, 0, 0, 0, 0};
  EXPECT_TRUE(test::classify_mask_flips(flip, ref, Tensor::from_f32(tied, {1, 4, 4}), 0.0).ok());
}

}  // namespace
}  // namespace h3::ops
