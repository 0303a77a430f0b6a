// Ref2VA cases the golden runs do not cover (golden README "Not covered"), checked end to end on a
// tiny repository against the rules of h3_components_spec.md §4.3-4.5 rather than stored numbers:
// - a video reference without a soundtrack: no "<Audio 1>: " label, no reference audio rows;
// - a video longer than the request: cut to num_frames (identical to handing over the cut clip);
// - 29.97 fps: put on 24 fps by whole frames, slot_i = floor(i * 24/29.97 + 0.5) (identical to
//   handing over the resampled clip at 24 fps);
// - a 44.1 kHz audio reference longer than the request: cut at its own rate to
//   int(num_frames / 24 * 44100) samples before resampling (identical to the pre-cut clip).
// Also a second generation on the same Engine reproduces the first bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "models/tiny_model.h"
#include "pipeline/engine.h"
#include "pipeline/generate.h"
#include "support/golden.h"
#include "support/temp_dir.h"
#include "text/tokenizer.h"

namespace h3::pipeline {
namespace {

constexpr int64_t kFrames = 22;  // the request: 17 + 5 frames (0.92 s)

media::RgbImage pattern_image(int64_t w, int64_t h, int64_t seed) {
  media::RgbImage img(w, h);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c)
        img.at(x, y)[c] = static_cast<uint8_t>(
            (x * 37 + y * 11 + seed * 53 + c * 90 + ((x * y + seed) % 7) * 19) & 255);
  return img;
}

std::vector<media::RgbImage> pattern_frames(int64_t n, int64_t seed) {
  std::vector<media::RgbImage> f;
  for (int64_t i = 0; i < n; ++i) f.push_back(pattern_image(16, 16, seed + i));
  return f;
}

// A stereo (or mono) tone sweep at `rate`.
Tensor tone(int64_t channels, int64_t samples, int64_t rate) {
  std::vector<float> v(static_cast<size_t>(channels * samples));
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < samples; ++i) {
      const double t = static_cast<double>(i) / static_cast<double>(rate);
      v[static_cast<size_t>(c * samples + i)] =
          static_cast<float>(0.4 * std::sin(2 * M_PI * (220.0 + 40.0 * c) * t * (1.0 + t)));
    }
  return Tensor::from_f32(v, {channels, samples});
}

class GenerateReferences : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("h3_gen_refs");
    repo_ = (dir_->path() / "tiny").string();
    models::make_tiny(repo_, {});
    engine_ = std::make_unique<Engine>(repo_, EngineOptions{});
  }
  static void TearDownTestSuite() {
    engine_.reset();
    dir_.reset();
  }

  static GenerateRequest request(std::vector<Reference> refs) {
    GenerateRequest r;
    r.prompt = "A dancer repeats the move while the melody plays.";
    r.height = 32;
    r.width = 32;
    r.num_frames = kFrames;
    r.num_inference_steps = 2;  // one model call: the cases differ before the DiT
    r.seed = 11;
    r.allow_any_duration = true;
    r.references = std::move(refs);
    return r;
  }
  static GenerateResult run(const GenerateRequest& r) {
    return generate(*engine_, r, GenerateOptions{});
  }

  static std::unique_ptr<test::TempDir> dir_;
  static std::string repo_;
  static std::unique_ptr<Engine> engine_;
};
std::unique_ptr<test::TempDir> GenerateReferences::dir_;
std::string GenerateReferences::repo_;
std::unique_ptr<Engine> GenerateReferences::engine_;

void expect_same(const std::string& what, const Tensor& a, const Tensor& b) {
  ASSERT_TRUE(a.defined() && b.defined()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const int64_t bad = test::count_bit_mismatches(a, b);
  std::printf("%s: %s, %lld element(s) differ (expected 0)\n", what.c_str(), a.desc().c_str(),
              static_cast<long long>(bad));
  EXPECT_EQ(bad, 0) << what;
}

TEST_F(GenerateReferences, VideoWithoutSoundtrackHasNoAudioLabelOrRows) {
  VideoClip silent;
  silent.frames = pattern_frames(kFrames, 1);
  VideoClip sound = silent;
  sound.soundtrack = AudioClip{tone(2, 32000, 32000), 32000};
  const GenerateResult a = run(request({Reference::from_video(silent)}));
  const GenerateResult b = run(request({Reference::from_video(sound)}));
  EXPECT_FALSE(a.audio_condition_rows.defined()) << "a silent video got reference audio rows";
  ASSERT_TRUE(b.audio_condition_rows.defined());
  // 22 frames of audio: N = round(22/24*40) = 37 latents, 74 rows.
  EXPECT_EQ(b.audio_condition_rows.size(0), 74);
  // The soundtrack adds exactly the "<Audio 1>: " label in front (§1.3); the rest is equal.
  const text::Tokenizer tok =
      text::Tokenizer::from_file(engine_->repo().component("tokenizer").folder);
  std::vector<int64_t> expect;
  for (int32_t id : tok.encode("<Audio 1>: ")) expect.push_back(id);
  expect.insert(expect.end(), a.input_ids.begin(), a.input_ids.end());
  std::printf("ids: silent %zu, with soundtrack %zu (label %zu)\n", a.input_ids.size(),
              b.input_ids.size(), expect.size() - a.input_ids.size());
  EXPECT_EQ(b.input_ids, expect);
  // The video rows themselves do not depend on the soundtrack.
  expect_same("condition rows, silent vs with soundtrack", a.condition_rows, b.condition_rows);
  // 16x16 frames resolve to a 64x64 canvas (tiny short edge 64): 4x4 latents, 4 rows per frame,
  // 22 frames -> 7 latent frames.
  EXPECT_EQ(a.condition_rows.size(0), 7 * 4);
}

TEST_F(GenerateReferences, LongerVideoIsCutToTheRequest) {
  VideoClip longer;
  longer.frames = pattern_frames(40, 2);
  VideoClip cut;
  cut.frames.assign(longer.frames.begin(), longer.frames.begin() + kFrames);
  const GenerateResult a = run(request({Reference::from_video(longer)}));
  const GenerateResult b = run(request({Reference::from_video(cut)}));
  expect_same("condition rows, 40 frames vs the first 22", a.condition_rows, b.condition_rows);
  expect_same("prompt embeds, 40 frames vs the first 22", a.prompt_embeds, b.prompt_embeds);
  expect_same("latents, 40 frames vs the first 22", a.latents, b.latents);
}

TEST_F(GenerateReferences, NonIntegerFrameRateIsResampledByWholeFrames) {
  const double fps = 30000.0 / 1001.0;  // 29.97
  VideoClip ntsc;
  ntsc.frames = pattern_frames(30, 3);
  ntsc.fps = fps;
  // The rule, written out: frame i fills slots [floor(i*s + 0.5), floor((i+1)*s + 0.5)).
  const double s = 24.0 / fps;
  VideoClip at24;
  std::vector<int64_t> source;
  for (int64_t i = 0; i < 30; ++i) {
    const auto lo = static_cast<int64_t>(std::floor(static_cast<double>(i) * s + 0.5));
    const auto hi = static_cast<int64_t>(std::floor(static_cast<double>(i + 1) * s + 0.5));
    for (int64_t k = lo; k < hi; ++k) source.push_back(i);
  }
  source.resize(kFrames);
  std::vector<int64_t> dropped;
  for (int64_t i = 0, j = 0; i < 30 && j < kFrames; ++i) {
    if (source[static_cast<size_t>(j)] != i) dropped.push_back(i);
    while (j < kFrames && source[static_cast<size_t>(j)] == i) ++j;
  }
  std::printf("29.97 fps -> 24 fps: %zu input frame(s) dropped, the first at %lld\n",
              dropped.size(), dropped.empty() ? -1LL : static_cast<long long>(dropped[0]));
  EXPECT_FALSE(dropped.empty()) << "29.97 -> 24 fps must drop frames";
  for (int64_t i : source) at24.frames.push_back(ntsc.frames[static_cast<size_t>(i)]);
  const GenerateResult a = run(request({Reference::from_video(ntsc)}));
  const GenerateResult b = run(request({Reference::from_video(at24)}));
  expect_same("condition rows, 29.97 fps vs resampled by hand", a.condition_rows, b.condition_rows);
  expect_same("prompt embeds, 29.97 fps vs resampled by hand", a.prompt_embeds, b.prompt_embeds);
  // Not a no-op: feeding the 29.97 fps frames as if they were 24 fps changes the rows.
  VideoClip as24 = ntsc;
  as24.fps = 24.0;
  const GenerateResult c = run(request({Reference::from_video(as24)}));
  EXPECT_GT(test::count_bit_mismatches(a.condition_rows, c.condition_rows), 0);
}

TEST_F(GenerateReferences, AudioAtOtherRateIsCutAtItsOwnRate) {
  constexpr int64_t kRate = 44100;
  const Tensor two_seconds = tone(2, 2 * kRate, kRate);
  // int(22 / 24 * 44100) = 40425 samples.
  const int64_t keep = static_cast<int64_t>(static_cast<double>(kFrames) / 24.0 * kRate);
  EXPECT_EQ(keep, 40425);
  const Tensor cut = two_seconds.slice(1, 0, keep).contiguous();
  const Reference image = Reference::from_image(pattern_image(40, 24, 9));
  const GenerateResult a =
      run(request({image, Reference::from_audio(AudioClip{two_seconds, kRate})}));
  const GenerateResult b = run(request({image, Reference::from_audio(AudioClip{cut, kRate})}));
  ASSERT_TRUE(a.audio_condition_rows.defined());
  // ceil(40425 * 32000 / 44100) = 29333 samples -> 37 latents -> 74 rows.
  EXPECT_EQ(a.audio_condition_rows.size(0), 74);
  expect_same("reference audio rows, 2 s at 44.1 kHz vs pre-cut", a.audio_condition_rows,
              b.audio_condition_rows);
  // Cutting 100 samples fewer than the rule keeps 37 latents but changes the rows.
  const Tensor shorter = two_seconds.slice(1, 0, keep - 100).contiguous();
  const GenerateResult c = run(request({image, Reference::from_audio(AudioClip{shorter, kRate})}));
  ASSERT_TRUE(c.audio_condition_rows.defined());
  ASSERT_EQ(c.audio_condition_rows.shape(), a.audio_condition_rows.shape());
  EXPECT_GT(test::count_bit_mismatches(a.audio_condition_rows, c.audio_condition_rows), 0);
}

}  // namespace
}  // namespace h3::pipeline
