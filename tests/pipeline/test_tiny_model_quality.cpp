// The trained tiny model, as the README's main command writes it (`h3 make-tiny models/h3-tiny
// --trained tools/train_tiny/parts`), judged by `h3 eval tiny` on the CPU on the 12 held-out
// prompt combinations: every attribute at the 90 % or more. Skips, saying so, in a
// checkout without the parts.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "support/cli.h"
#include "support/temp_dir.h"

namespace h3::test {
namespace {

constexpr double kMinAccuracy = 0.9;  // the bar, per attribute

TEST(TinyModelQuality, TrainedModelKnowsItsPromptsOnTheCpu) {
  H3_REQUIRE_BIN();
  const std::filesystem::path parts =
      std::filesystem::path(H3_SOURCE_DIR) / "tools" / "train_tiny" / "parts";
  if (!std::filesystem::is_regular_file(parts / "dit" / "model.safetensors"))
    GTEST_SKIP() << "no trained parts in this checkout (" << parts.string() << ")";
  TempDir tmp("h3_tiny_quality");
  const std::string model = (tmp.path() / "models" / "h3-tiny").string();
  const RunResult made =
      run_h3("make-tiny " + shell_quote(model) + " --trained " + shell_quote(parts.string()));
  ASSERT_EQ(made.status, 0) << made.output;
  const RunResult r = run_h3("eval tiny --device cpu --json --model " + shell_quote(model), false);
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  std::printf("[tiny model, cpu, dense] %s\n", j.dump().c_str());
  EXPECT_EQ(j.at("cases"), 12);
  for (const char* attribute : {"colour", "shape", "motion", "pitch"})
    EXPECT_GE(j.at("accuracy").at(attribute).get<double>(), kMinAccuracy) << attribute;
}

}  // namespace
}  // namespace h3::test
