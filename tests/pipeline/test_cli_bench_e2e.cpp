// `h3 bench e2e` on the tiny model, on the CPU, as a user runs it: the JSON has one object per
// generation with the stages, the bytes loaded (none on a warm generation, nothing is reloaded),
// ms per block and the plan; --random-weights changes the generation; bad flags are refused.
// Also `h3 bench vae`'s output dtype and `h3 bench fp8`'s refusals.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "models/tiny_model.h"
#include "support/cli.h"
#include "support/temp_dir.h"

namespace h3::test {
namespace {

class BenchE2eCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>("h3_bench_e2e");
    tiny_ = (dir_->path() / "tiny").string();
    models::make_tiny(tiny_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static std::string base() {
    return "bench e2e --model " + shell_quote(tiny_) +
           " --device cpu --height 32 --width 64 --num-frames 22 --steps 3 --allow-any-duration";
  }
  static nlohmann::json run_json(const std::string& extra) {
    const RunResult r = run_h3(base() + " --json " + extra, /*merge_stderr=*/false);
    EXPECT_EQ(r.status, 0) << r.output;
    return nlohmann::json::parse(r.output);
  }
  static std::unique_ptr<TempDir> dir_;
  static std::string tiny_;
};
std::unique_ptr<TempDir> BenchE2eCli::dir_;
std::string BenchE2eCli::tiny_;

TEST_F(BenchE2eCli, JsonHasEveryStageAndTheWarmGenerationLoadsNothing) {
  H3_REQUIRE_BIN();
  const nlohmann::json runs = run_json("--repeat 2");
  ASSERT_TRUE(runs.is_array());
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& g : runs) {
    const auto& st = g.at("stages");
    for (const char* s : {"prepare", "encode", "denoise", "decode", "mux", "total"})
      EXPECT_TRUE(st.contains(s)) << s << " missing in " << st.dump();
    EXPECT_GT(st.at("denoise").get<double>(), 0.0);
    EXPECT_GT(g.at("ms_per_block").get<double>(), 0.0);
    EXPECT_EQ(g.at("dit_forwards").get<int64_t>(), 2);
    EXPECT_TRUE(g.at("plan").contains("decision"));
    EXPECT_EQ(g.at("random_weights").get<bool>(), false);  // the tiny files are not sparse
  }
  EXPECT_GT(runs[0].at("loaded_bytes").get<uint64_t>(), 0u);
  EXPECT_TRUE(runs[0].at("stages").contains("load transformer"));
  EXPECT_EQ(runs[1].at("loaded_bytes").get<uint64_t>(), 0u) << runs[1].dump();
  EXPECT_FALSE(runs[1].at("stages").contains("load transformer"));
}

// FP8 weights are named in the JSON, so two runs side by side say which is which.
TEST_F(BenchE2eCli, JsonNamesFp8Weights) {
  H3_REQUIRE_BIN();
  const nlohmann::json fp8 = run_json("--repeat 1 --dit-dtype fp8 --text-encoder-dtype fp8");
  EXPECT_EQ(fp8.at(0).value("dit_dtype", std::string()), "fp8") << fp8.dump();
  EXPECT_EQ(fp8.at(0).value("text_encoder_dtype", std::string()), "fp8") << fp8.dump();
  const nlohmann::json plain = run_json("--repeat 1");
  EXPECT_FALSE(plain.at(0).contains("dit_dtype")) << plain.dump();
}

TEST_F(BenchE2eCli, TableNamesTheStagesAndThePlan) {
  H3_REQUIRE_BIN();
  const RunResult r = run_h3(base() + " --repeat 1");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* s : {"generation 0 (first)", "denoise", "decode", "ms per block", "plan:"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << " in\n" << r.output;
}

TEST_F(BenchE2eCli, RandomWeightsChangeTheGenerationAndAreSeeded) {
  H3_REQUIRE_BIN();
  // The MP4's bytes stand for the generation: equal seeds give equal files.
  auto run_to = [&](const std::string& flags, const std::string& file) {
    const RunResult r = run_h3(base() + " --repeat 1 --json --out " + shell_quote(file) + " " + flags,
                               false);
    EXPECT_EQ(r.status, 0) << r.output;
    return nlohmann::json::parse(r.output)[0];
  };
  const std::string p1 = (dir_->path() / "r1.mp4").string();
  const std::string p2 = (dir_->path() / "r2.mp4").string();
  const std::string p3 = (dir_->path() / "plain.mp4").string();
  const auto g1 = run_to("--random-weights --weights-seed 1", p1);
  run_to("--random-weights --weights-seed 1", p2);
  run_to("--no-random-weights", p3);
  EXPECT_TRUE(g1.at("random_weights").get<bool>());
  auto read = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  if (read(p1).empty()) GTEST_SKIP() << "this build writes no MP4 (no FFmpeg)";
  EXPECT_EQ(read(p1), read(p2));
  EXPECT_NE(read(p1), read(p3));
}

TEST_F(BenchE2eCli, BadFlagsAreRefusedByName) {
  H3_REQUIRE_BIN();
  RunResult r = run_h3(base() + " --weights-seed nope");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--weights-seed"), std::string::npos) << r.output;
  r = run_h3(base() + " --preset turbo");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--preset"), std::string::npos) << r.output;
  r = run_h3("bench e2e --device cpu");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--model"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace h3::test

namespace h3::test {
namespace {

// `h3 bench vae` leaves the video on the device in the decoder's dtype, as the reference returns
// its model's bf16; --f32-output widens it (the small decode, on the CPU under the f16 policy).
TEST(BenchVaeCli, OutputIsTheDecoderDtypeUnlessF32Asked) {
  const std::string base =
      "bench vae --small --device cpu --precision f16-autocast --latents 2,8,8";
  RunResult r = run_h3(base);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("f16 (cpu) |"), std::string::npos) << r.output;
  r = run_h3(base + " --f32-output");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("f32 (cpu) |"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace h3::test

namespace h3::test {
namespace {

// `h3 bench fp8` refuses scalings the FP8 tensor cores do not pair (it would time the float32
// fallback) before it looks for a GPU, naming the flags; `h3 bench dit` refuses --fp8-scaling
// without FP8 weights.
TEST(BenchFp8Cli, UnpairedScalingsAreRefusedByName) {
  H3_REQUIRE_BIN();
  RunResult r = run_h3("bench fp8 --scaling block --act token");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--scaling block with --act token"), std::string::npos) << r.output;
  r = run_h3("bench fp8 --act group");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--scaling channel with --act group"), std::string::npos) << r.output;
  r = run_h3("bench fp8 --scaling block --search 4");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--search"), std::string::npos) << r.output;
  r = run_h3("bench fp8 --scaling rows");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("'rows'"), std::string::npos) << r.output;
  // Block scaling of the DiT's weights without FP8 weights would be silently ignored.
  r = run_h3("bench dit --device cpu --fp8-scaling block");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--dit-dtype fp8"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace h3::test
