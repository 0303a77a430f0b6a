// `h3 info --vsa`: the tiling report of a request geometry.
#include <gtest/gtest.h>

#include "support/cli.h"

namespace h3 {
namespace {

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

TEST(CliInfoVsa, ProductionGeometryReport) {
  H3_REQUIRE_BIN();
  // 1344x768x124 with 300 text rows: 12 prefix + 660 video tiles at 64, 4 + 180 at 256.
  const test::RunResult r = test::run_h3("info --vsa");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "packed rows: 38010")) << r.output;
  EXPECT_TRUE(contains(r.output, "12 prefix + 660 video tiles = 672, padded length 43008")) << r.output;
  EXPECT_TRUE(contains(r.output, "4 prefix + 180 video tiles = 184, padded length 47104")) << r.output;
  EXPECT_TRUE(contains(r.output, "0.90 -> 66")) << r.output;
}

TEST(CliInfoVsa, TextTokensAndTileSizeFlags) {
  H3_REQUIRE_BIN();
  const test::RunResult r = test::run_h3("info --vsa --text-tokens 256 --vsa-tile-size 64");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "packed rows: 37966")) << r.output;
  EXPECT_FALSE(contains(r.output, "tile 256")) << r.output;
}

TEST(CliInfoVsa, BadFlagsAreRefused) {
  H3_REQUIRE_BIN();
  test::RunResult r = test::run_h3("info --vsa --vsa-tile-size 128");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "--vsa-tile-size must be 64 or 256")) << r.output;
  r = test::run_h3("info --vsa --height 770");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "multiples of 32")) << r.output;
  r = test::run_h3("info --vsa --width");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(contains(r.output, "needs a value")) << r.output;
}

}  // namespace
}  // namespace h3
