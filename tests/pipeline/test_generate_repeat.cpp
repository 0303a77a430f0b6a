// Several generations on one Engine (h3_components_spec.md §5.4: unlike the reference, a second
// generation in the same process must work): with sequential loading on and off, a t2va, then an
// fl2va, then the first t2va again on one engine give the same bits as each request on a fresh
// engine, and the components released by the sequential plan are reloaded.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "models/tiny_model.h"
#include "pipeline/engine.h"
#include "pipeline/generate.h"
#include "support/golden.h"
#include "support/temp_dir.h"

namespace h3::pipeline {
namespace {

media::RgbImage keyframe(int64_t w, int64_t h) {
  media::RgbImage img(w, h);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c)
        img.at(x, y)[c] = static_cast<uint8_t>((x * 29 + y * 17 + c * 71 + x * y) & 255);
  return img;
}

GenerateRequest t2va(uint64_t seed) {
  GenerateRequest r;
  r.prompt = "Rain on a tin roof, a kettle starts to whistle.";
  r.height = 32;
  r.width = 64;
  r.num_frames = 22;
  r.num_inference_steps = 3;
  r.seed = seed;
  r.allow_any_duration = true;
  return r;
}

GenerateRequest fl2va(uint64_t seed) {
  GenerateRequest r = t2va(seed);
  r.prompt = "The door opens and a dog runs out barking.";
  r.height = 32;
  r.width = 32;
  r.first_image = keyframe(40, 40);
  r.last_image = keyframe(48, 32);
  return r;
}

void expect_identical(const std::string& what, const GenerateResult& a, const GenerateResult& b) {
  struct Part {
    const char* name;
    const Tensor& x;
    const Tensor& y;
  };
  const Part parts[] = {{"prompt_embeds", a.prompt_embeds, b.prompt_embeds},
                        {"latents", a.latents, b.latents},
                        {"audio_latents", a.audio_latents, b.audio_latents},
                        {"frames", a.frames, b.frames},
                        {"audio", a.audio, b.audio}};
  for (const Part& p : parts) {
    ASSERT_EQ(p.x.shape(), p.y.shape()) << what << ": " << p.name;
    const int64_t bad = test::count_bit_mismatches(p.x, p.y);
    std::printf("%s %s: %lld element(s) differ (expected 0)\n", what.c_str(), p.name,
                static_cast<long long>(bad));
    EXPECT_EQ(bad, 0) << what << ": " << p.name;
  }
}

class GenerateRepeat : public ::testing::TestWithParam<SequentialLoad> {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("h3_gen_repeat");
    repo_ = (dir_->path() / "tiny").string();
    models::make_tiny(repo_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static std::unique_ptr<test::TempDir> dir_;
  static std::string repo_;
};
std::unique_ptr<test::TempDir> GenerateRepeat::dir_;
std::string GenerateRepeat::repo_;

TEST_P(GenerateRepeat, SecondGenerationMatchesAFreshEngine) {
  EngineOptions eo;
  eo.sequential = GetParam();
  const std::string mode = sequential_load_name(GetParam());
  Engine engine(repo_, eo);
  Receipt rc;
  const GenerateResult first = generate(engine, t2va(5), GenerateOptions{}, &rc);
  const GenerateResult second = generate(engine, fl2va(6), GenerateOptions{}, &rc);
  const GenerateResult third = generate(engine, t2va(5), GenerateOptions{}, &rc);
  int conditioner_loads = 0;
  for (const Receipt::Entry& e : rc.entries()) conditioner_loads += e.name == "load conditioner";
  std::printf("[%s] conditioner loaded %d time(s) over 3 generations\n", mode.c_str(),
              conditioner_loads);
  if (engine.plan().sequential) {
    EXPECT_EQ(conditioner_loads, 3) << "a sequential plan releases and reloads the conditioner";
  } else {
    EXPECT_EQ(conditioner_loads, 1) << "a non-sequential plan keeps the conditioner";
  }
  expect_identical("[" + mode + "] t2va seed 5, 1st vs 3rd on one engine", first, third);
  Engine fresh(repo_, eo);
  const GenerateResult alone = generate(fresh, fl2va(6), GenerateOptions{});
  expect_identical("[" + mode + "] fl2va seed 6, reused vs fresh engine", second, alone);
}

INSTANTIATE_TEST_SUITE_P(Sequential, GenerateRepeat,
                         ::testing::Values(SequentialLoad::kOn, SequentialLoad::kOff),
                         [](const ::testing::TestParamInfo<SequentialLoad>& p) {
                           return std::string(sequential_load_name(p.param));
                         });

}  // namespace
}  // namespace h3::pipeline
