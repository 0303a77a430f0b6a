// `h3 eval tiny` on the random-weight tiny model, on the CPU: the JSON has exactly the model, the
// four accuracies (fractions; whatever a random model scores) and the number of cases (and the
// split when it is the training one); the table names every case; flags the evaluation fixes
// itself are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "models/tiny_model.h"
#include "support/cli.h"
#include "support/temp_dir.h"

namespace h3::test {
namespace {

class TinyEvalCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("h3_eval_tiny");
    tiny_ = (dir_->path() / "tiny").string();
    models::make_tiny(tiny_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }
  // Three sigma-grid points (two forwards) keep the run at a few seconds.
  static std::string base() {
    return "eval tiny --model " + shell_quote(tiny_) + " --device cpu --cases 2 --steps 3";
  }
  static std::unique_ptr<TempDir> dir_;
  static std::string tiny_;
};
std::unique_ptr<TempDir> TinyEvalCli::dir_;
std::string TinyEvalCli::tiny_;

TEST_F(TinyEvalCli, JsonHasTheModelTheFourAccuraciesAndTheCases) {
  H3_REQUIRE_BIN();
  const RunResult r = run_h3(base() + " --json", /*merge_stderr=*/false);
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 3u) << j.dump();
  EXPECT_EQ(j.at("model").get<std::string>(), tiny_);
  EXPECT_EQ(j.at("cases").get<int64_t>(), 2);
  const nlohmann::json& acc = j.at("accuracy");
  EXPECT_EQ(acc.size(), 4u) << acc.dump();
  for (const char* k : {"colour", "shape", "motion", "pitch"}) {
    ASSERT_TRUE(acc.contains(k)) << k << " in " << acc.dump();
    const double v = acc.at(k).get<double>();
    EXPECT_GE(v, 0.0);
    EXPECT_LE(v, 1.0);
  }
  std::printf("  random tiny model: %s\n", j.dump().c_str());
}

TEST_F(TinyEvalCli, TableNamesEveryCase) {
  H3_REQUIRE_BIN();
  const RunResult r = run_h3(base());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* s : {"a red circle moves to the left", "a green square moves down", "fill",
                        "taper", "accuracy over 2 cases"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << " in\n" << r.output;
}

TEST_F(TinyEvalCli, TrainingSplitAsksForTrainingPrompts) {
  H3_REQUIRE_BIN();
  const RunResult r = run_h3(base() + " --split training");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* s : {"2 training cases", "a red circle moves to the right",
                        "a green square moves to the left", "accuracy over 2 cases"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << " in\n" << r.output;
  EXPECT_EQ(r.output.find("a red circle moves to the left"), std::string::npos) << r.output;
  const RunResult js = run_h3(base() + " --split training --json", /*merge_stderr=*/false);
  ASSERT_EQ(js.status, 0) << js.output;
  const nlohmann::json j = nlohmann::json::parse(js.output);
  EXPECT_EQ(j.size(), 4u) << j.dump();
  EXPECT_EQ(j.at("split").get<std::string>(), "training");
}

TEST_F(TinyEvalCli, RefusesWhatTheEvaluationFixesAndBadCounts) {
  H3_REQUIRE_BIN();
  for (const char* flag :
       {"--prompt 'a fox'", "--num-frames 22", "--height 32 --width 64", "--out x.mp4"}) {
    const RunResult r = run_h3(base() + " " + flag);
    EXPECT_EQ(r.status, 1) << flag << "\n" << r.output;
    EXPECT_NE(r.output.find("the evaluation sets the prompts"), std::string::npos) << r.output;
  }
  for (const char* bad : {"--cases 0", "--cases x"}) {
    const RunResult r = run_h3("eval tiny --model " + shell_quote(tiny_) + " " + bad);
    EXPECT_EQ(r.status, 1) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find("--cases expects a positive integer"), std::string::npos) << r.output;
  }
  const RunResult r = run_h3("eval tiny --model " + shell_quote(tiny_) + " --split train");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--split expects held-out or training, got 'train'"), std::string::npos)
      << r.output;
}

// Without --model the evaluation judges models/h3-tiny under the working folder (where the README's
// main command finds it), and says so when there is none.
TEST_F(TinyEvalCli, DefaultModelIsTheShippedOneUnderTheWorkingFolder) {
  H3_REQUIRE_BIN();
  TempDir cwd("h3_eval_cwd");
  const RunResult none = run_h3("eval tiny --cases 1", true, cwd.path().string());
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.output.find("models/h3-tiny"), std::string::npos) << none.output;
  EXPECT_NE(none.output.find("--model"), std::string::npos) << none.output;
  std::filesystem::create_directories(cwd.path() / "models");
  std::filesystem::create_directory_symlink(tiny_, cwd.path() / "models" / "h3-tiny");
  const RunResult r = run_h3("eval tiny --cases 1 --steps 2 --json", false, cwd.path().string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output).at("model"), "models/h3-tiny") << r.output;
}

}  // namespace
}  // namespace h3::test
