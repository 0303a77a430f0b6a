// The Hopper attention kernel's shape-only choices (ops/cuda/attention_hopper_plan.h), checked
// without a GPU: the number of consumer warpgroups at head dim 64 for the shapes measured in
// bench/RESULTS.md (2026-12-05 evening, an H100 of 132 SMs), and the override.
#include <gtest/gtest.h>

#include <vector>

#include "ops/cuda/attention_hopper_plan.h"

namespace h3 {
namespace {

using ops::cuda::hopper::d64_consumers;

TEST(AttentionPlan, HeadDim64WarpgroupsFollowTheGridSize) {
  constexpr int kH100 = 132;
  // 2 heads of one 16,384-row sequence: 86 tiles of 192 rows x 2 = 172 CTAs, under 4 per SM.
  EXPECT_EQ(d64_consumers(16384, {}, 2, kH100, 0), 2);
  // The VAE's batched tiles: 4 segments of 1,797 rows (10 tiles each) x 32 heads = 1,280 CTAs.
  const std::vector<int64_t> tiles = {0, 1797, 3594, 5391, 7188};
  EXPECT_EQ(d64_consumers(7188, tiles, 32, kH100, 0), 3);
  // 16 heads of 16,384 rows: 1,376 CTAs.
  EXPECT_EQ(d64_consumers(16384, {}, 16, kH100, 0), 3);
  // The boundary: exactly four CTAs per SM takes three.
  EXPECT_EQ(d64_consumers(192 * 66, {}, 8, kH100, 0), 3);
  EXPECT_EQ(d64_consumers(192 * 66 - 192, {}, 8, kH100, 0), 2);
  // Segments are tiled each on their own: 132 one-row segments are 132 tiles, not one.
  std::vector<int64_t> ones;
  for (int64_t i = 0; i <= 4 * kH100; ++i) ones.push_back(i);
  EXPECT_EQ(d64_consumers(4 * kH100, ones, 1, kH100, 0), 3);
  EXPECT_EQ(d64_consumers(4 * kH100, {}, 1, kH100, 0), 2);
}

TEST(AttentionPlan, HeadDim64WarpgroupsOverride) {
  EXPECT_EQ(d64_consumers(16384, {}, 2, 132, 3), 3);
  EXPECT_EQ(d64_consumers(16384, {}, 16, 132, 2), 2);
  // Other values are ignored (automatic), as is a device that reports no SMs.
  EXPECT_EQ(d64_consumers(16384, {}, 16, 132, 4), 3);
  EXPECT_EQ(d64_consumers(192, {}, 4, 0, 0), 3);
}

}  // namespace
}  // namespace h3
