// The trained tiny model the project ships (models/h3-tiny, tools/train_tiny/README.md) judged by
// `h3 eval tiny` on the CPU, as the README's main command runs it: every attribute of the held-out
// prompt combinations at 90 % or more. Skips, saying so, in a checkout without the model.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support/cli.h"

namespace h3::test {
namespace {

constexpr double kMinAccuracy = 0.9;  // the bar, per attribute

TEST(TinyModelQuality, ShippedModelKnowsItsPromptsOnTheCpu) {
  H3_REQUIRE_BIN();
  const std::filesystem::path model = std::filesystem::path(H3_SOURCE_DIR) / "models" / "h3-tiny";
  if (!std::filesystem::is_regular_file(model / "modular_model_index.json"))
    GTEST_SKIP() << "no trained tiny model in this checkout (" << model.string() << ")";
  const RunResult r =
      run_h3("eval tiny --device cpu --json --model " + shell_quote(model.string()), false);
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  std::printf("[tiny model, cpu, dense] %s\n", j.dump().c_str());
  EXPECT_EQ(j.at("cases"), 12);
  for (const char* attribute : {"colour", "shape", "motion", "pitch"})
    EXPECT_GE(j.at("accuracy").at(attribute).get<double>(), kMinAccuracy) << attribute;
}

}  // namespace
}  // namespace h3::test
