// A generation as named stages (pipeline/generate.h, class Generation): running the stages one by
// one gives the same bits as generate(); they refuse to run out of order; cancellation stops at a
// stage or step boundary with kCancelled and leaves the engine usable; previews arrive once per
// step with the latents' shape and equal x + (1 - t) v of that step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/tiny_model.h"
#include "pipeline/engine.h"
#include "pipeline/generate.h"
#include "pipeline/scheduler.h"
#include "support/golden.h"
#include "support/temp_dir.h"

namespace h3::pipeline {
namespace {

GenerateRequest small_t2va(uint64_t seed) {
  GenerateRequest r;
  r.prompt = "A kite rises over the dunes while the wind hums.";
  r.height = 32;
  r.width = 64;
  r.num_frames = 22;
  r.num_inference_steps = 4;
  r.seed = seed;
  r.allow_any_duration = true;
  return r;
}

class GenerationStages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("h3_gen_stages");
    repo_ = (dir_->path() / "tiny").string();
    models::make_tiny(repo_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static std::unique_ptr<test::TempDir> dir_;
  static std::string repo_;
};
std::unique_ptr<test::TempDir> GenerationStages::dir_;
std::string GenerationStages::repo_;

TEST_F(GenerationStages, StageByStageEqualsGenerate) {
  Engine engine(repo_, {});
  const GenerateRequest req = small_t2va(3);
  const GenerateResult whole = generate(engine, req, {});
  GenerateOptions opt;
  std::vector<std::string> seen;
  opt.on_progress = [&](const std::string& stage, int64_t, int64_t steps) {
    if (steps == 0 || seen.empty() || seen.back() != stage) seen.push_back(stage);
  };
  Receipt rc;
  Generation g(engine, req, opt, &rc);
  EXPECT_EQ(g.stages_done(), 0);
  g.prepare();
  EXPECT_EQ(g.stages_done(), 1);
  EXPECT_EQ(g.result().geometry.num_frames, 22);
  g.encode();
  EXPECT_TRUE(g.result().prompt_embeds.defined());
  g.denoise();
  EXPECT_TRUE(g.result().latents.defined());
  g.decode();
  EXPECT_EQ(g.stages_done(), 4);
  const GenerateResult staged = g.take_result();
  for (const auto& [name, a, b] : {std::tuple<const char*, const Tensor&, const Tensor&>{
                                       "latents", whole.latents, staged.latents},
                                   {"audio_latents", whole.audio_latents, staged.audio_latents},
                                   {"frames", whole.frames, staged.frames},
                                   {"audio", whole.audio, staged.audio}}) {
    ASSERT_EQ(a.shape(), b.shape()) << name;
    EXPECT_EQ(test::count_bit_mismatches(a, b), 0) << name;
  }
  // The receipt's top level is the four stages (with the loads the engine did before denoise and
  // decode: none here, the engine is warm).
  std::vector<std::string> top;
  for (const Receipt::Entry& e : rc.entries())
    if (e.parent < 0) top.push_back(e.name);
  EXPECT_EQ(top, (std::vector<std::string>{"prepare", "encode", "denoise", "decode"}));
  EXPECT_EQ(seen.front(), "prepare");
}

TEST_F(GenerationStages, StagesOutOfOrderAreRefused) {
  Engine engine(repo_, {});
  const GenerateRequest req = small_t2va(0);
  const GenerateOptions opt;
  Generation g(engine, req, opt);
  try {
    g.denoise();
    FAIL() << "denoise before prepare ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("denoise"), std::string::npos) << e.what();
  }
  g.prepare();
  EXPECT_THROW(g.prepare(), Error);
}

TEST_F(GenerationStages, CancelAtAStepBoundaryLeavesTheEngineUsable) {
  Engine engine(repo_, {});
  const GenerateRequest req = small_t2va(5);
  int steps_done = 0;
  GenerateOptions opt;
  opt.on_progress = [&](const std::string& stage, int64_t step, int64_t) {
    if (stage == "denoise") steps_done = static_cast<int>(step);
  };
  opt.cancelled = [&] { return steps_done >= 2; };
  try {
    generate(engine, req, opt);
    FAIL() << "the generation was not cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
    EXPECT_NE(std::string(e.what()).find("before step 3 of 3"), std::string::npos) << e.what();
  }
  EXPECT_EQ(steps_done, 2);
  // Loaded components stay, and the next generation gives what a fresh engine gives.
  EXPECT_TRUE(engine.is_loaded("transformer"));
  const GenerateResult after = generate(engine, req, {});
  Engine fresh(repo_, {});
  const GenerateResult ref = generate(fresh, req, {});
  EXPECT_EQ(test::count_bit_mismatches(after.frames, ref.frames), 0);
  EXPECT_EQ(test::count_bit_mismatches(after.audio, ref.audio), 0);

  // Cancelled before anything ran: nothing is loaded.
  Engine idle(repo_, {});
  GenerateOptions stop;
  stop.cancelled = [] { return true; };
  try {
    generate(idle, req, stop);
    FAIL() << "not cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
  }
  EXPECT_FALSE(idle.is_loaded("conditioner"));
  EXPECT_FALSE(idle.is_loaded("transformer"));
}

TEST_F(GenerationStages, PreviewIsTheStepsCleanPrediction) {
  Engine engine(repo_, {});
  const GenerateRequest req = small_t2va(9);
  std::vector<Tensor> previews;
  std::vector<Tensor> rows_before, velocities;
  Tensor last_rows;
  GenerateOptions opt;
  opt.on_preview = [&](int64_t step, int64_t steps, const Tensor& x0) {
    EXPECT_EQ(step, static_cast<int64_t>(previews.size()));
    EXPECT_EQ(steps, 3);
    previews.push_back(x0.clone());
  };
  opt.on_step = [&](int64_t, const Tensor& video_rows, const Tensor&, const Tensor& v) {
    velocities.push_back(v.clone());
    rows_before.push_back(last_rows);
    last_rows = video_rows.clone();
  };
  const GenerateResult r = generate(engine, req, opt);
  ASSERT_EQ(previews.size(), 3u);
  for (const Tensor& p : previews) EXPECT_EQ(p.shape(), r.latents.shape());
  // Step 1 starts from step 0's output rows: its preview is x + (1 - t1) v in float32.
  const DualSchedule sched = make_dual_schedule(req.num_inference_steps);
  const float t1 = sched.video.timesteps()[1];
  const Tensor x = rows_before[1];
  const Tensor v = velocities[1];
  const Tensor p = patchify_video(previews[1]);
  ASSERT_EQ(p.numel(), x.numel());
  const float* px = x.data<float>();
  const float* pv = v.data<float>();
  const float* pp = p.data<float>();
  // Within an ulp or so: a compiler may fuse the multiply-add in one place and not the other.
  int64_t bad = 0;
  for (int64_t i = 0; i < p.numel(); ++i) {
    const double want = static_cast<double>(px[i]) + (1.0 - t1) * static_cast<double>(pv[i]);
    bad += std::abs(pp[i] - want) > 1e-6 * (1.0 + std::abs(want));
  }
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace h3::pipeline
