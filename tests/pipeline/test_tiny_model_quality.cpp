// The trained tiny model, as the README's main command writes it (`h3 make-tiny models/h3-tiny
// --trained tools/train_tiny/parts`), judged by `h3 eval tiny` on the CPU on the 12 held-out
// prompt combinations: every attribute at the 90 % or more, and the FP8 DiT and VSA within
// one case of that. Skips, saying so, in a checkout without the parts.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support/cli.h"
#include "support/temp_dir.h"

namespace h3::test {
namespace {

constexpr double kMinAccuracy = 0.9;  // the bar, per attribute

const std::filesystem::path& parts_dir() {
  static const std::filesystem::path p =
      std::filesystem::path(H3_SOURCE_DIR) / "tools" / "train_tiny" / "parts";
  return p;
}

bool have_parts() {
  return std::filesystem::is_regular_file(parts_dir() / "dit" / "model.safetensors");
}

// `h3 eval tiny --json` with `flags` on `cases` held-out cases of a model written from the parts;
// null after a failure.
nlohmann::json evaluate_trained(const std::string& flags, int cases = 12) {
  TempDir tmp("h3_tiny_quality");
  const std::string model = (tmp.path() / "models" / "h3-tiny").string();
  const RunResult made =
      run_h3("make-tiny " + shell_quote(model) + " --trained " + shell_quote(parts_dir().string()));
  EXPECT_EQ(made.status, 0) << made.output;
  if (made.status != 0) return nullptr;
  const RunResult r = run_h3("eval tiny --device cpu --json --cases " + std::to_string(cases) +
                                 " --model " + shell_quote(model) + " " + flags,
                             false);
  EXPECT_EQ(r.status, 0) << r.output;
  if (r.status != 0) return nullptr;
  nlohmann::json j = nlohmann::json::parse(r.output);
  std::printf("[tiny model, cpu, %s] %s\n", flags.c_str(), j.dump().c_str());
  EXPECT_EQ(j.at("cases"), cases);
  return j;
}

void expect_each_attribute_at_least(const nlohmann::json& j, double bound) {
  for (const char* attribute : {"colour", "shape", "motion", "pitch"})
    EXPECT_GE(j.at("accuracy").at(attribute).get<double>(), bound) << attribute;
}

TEST(TinyModelQuality, TrainedModelKnowsItsPromptsOnTheCpu) {
  H3_REQUIRE_BIN();
  if (!have_parts()) GTEST_SKIP() << "no trained parts in this checkout (" << parts_dir() << ")";
  const nlohmann::json j = evaluate_trained("--dit-dtype bf16");
  ASSERT_FALSE(j.is_null());
  expect_each_attribute_at_least(j, kMinAccuracy);
}

// The opt-in FP8 DiT (E4M3 projections, block scales; the CPU emulates the GPU's rounding) on the
// same cases. Bound: one case of the 12 below the bar, per attribute. Measured with the DiT of
// 48,077 steps: bf16 1.00 / 1.00 / 0.92 / 1.00, FP8 1.00 / 0.83 / 0.92 / 1.00 (34,220 steps: the
// same FP8 figures, bf16 shape 0.92).
TEST(TinyModelQuality, Fp8DitStaysWithinOneCaseOfTheBarOnTheCpu) {
  H3_REQUIRE_BIN();
  if (!have_parts()) GTEST_SKIP() << "no trained parts in this checkout (" << parts_dir() << ")";
  const nlohmann::json j = evaluate_trained("--dit-dtype fp8");
  ASSERT_FALSE(j.is_null());
  expect_each_attribute_at_least(j, kMinAccuracy - 1.0 / 12 - 1e-9);
}

// VSA-H3 at sparsity 0.7 with 64-token tiles on the first 3 held-out cases. The model was trained
// dense and has no FastH3 gates, so only the fine branch runs, and 0.7 is about the highest
// sparsity it tolerates (GPU, 48 cases, bench/RESULTS.md 2026-12-07: the shipped DiT keeps colour,
// motion and pitch there and loses 6 of 46 shapes; at 0.9 shape and motion fall to about 0.5-0.75).
// The CPU oracle is float64, about 70 s a case on two cores, so 3 cases and not 12 (CI's time).
// Bound: one case of the 3 below the bar, per attribute. Measured with the DiT of 48,077 steps:
// every attribute right in each of the 3 (34,220 steps: in each of the first 4).
TEST(TinyModelQuality, VsaStaysWithinOneCaseOfTheBarOnTheCpu) {
  H3_REQUIRE_BIN();
  if (!have_parts()) GTEST_SKIP() << "no trained parts in this checkout (" << parts_dir() << ")";
  constexpr int kCases = 3;
  const nlohmann::json j =
      evaluate_trained("--attention vsa --vsa-sparsity 0.7 --vsa-tile-size 64", kCases);
  ASSERT_FALSE(j.is_null());
  expect_each_attribute_at_least(j, kMinAccuracy - 1.0 / kCases - 1e-9);
}

}  // namespace
}  // namespace h3::test
