// The tiny synthetic clips and their attribute estimators (src/eval/, tools/train_tiny/SPEC.md):
// the C++ renderer gives the Python generator's bytes; the estimators are right on every
// attribute combination, clean and under the blur and noise the spec states; malformed input is
// refused with a message that says what was expected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/status.h"
#include "eval/tiny_clips.h"
#include "eval/tiny_eval.h"
#include "eval/tiny_eval_suite.h"

namespace h3::eval {
namespace {

uint64_t fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

ClipAttributes attrs(int c, int s, int m) {
  return {static_cast<Colour>(c), static_cast<ShapeKind>(s), static_cast<Motion>(m)};
}

template <typename Fn>
void expect_error(Fn&& fn, const std::string& must_mention) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning " << must_mention;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(must_mention), std::string::npos) << e.what();
  }
}

// Spec, section "Robustness": what a trained model's output may look like and still be judged.
constexpr double kBlurSigmaPixels = 1.2;
constexpr double kPixelNoiseSigma = 12.0;  // uint8 levels
constexpr double kAudioNoiseSigma = 0.1;   // white noise, -20 dBFS rms (the tone is -17 dBFS rms)

Tensor blur_and_noise(const Tensor& frames, std::mt19937_64& gen) {
  const int64_t f = frames.size(0), h = frames.size(1), w = frames.size(2);
  const int radius = 4;
  std::vector<double> k(2 * radius + 1);
  double ksum = 0;
  for (int i = -radius; i <= radius; ++i)
    ksum += k[i + radius] = std::exp(-0.5 * i * i / (kBlurSigmaPixels * kBlurSigmaPixels));
  for (double& v : k) v /= ksum;
  const uint8_t* in = frames.data<uint8_t>();
  Tensor out = Tensor::empty(frames.shape(), DType::kU8);
  uint8_t* o = out.data<uint8_t>();
  std::normal_distribution<double> noise(0.0, kPixelNoiseSigma);
  std::vector<double> tmp(static_cast<size_t>(h * w * 3));
  for (int64_t t = 0; t < f; ++t) {
    const uint8_t* src = in + t * h * w * 3;
    for (int64_t y = 0; y < h; ++y)  // horizontal pass, edges clamped
      for (int64_t x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c) {
          double s = 0;
          for (int i = -radius; i <= radius; ++i) {
            const int64_t xx = std::clamp<int64_t>(x + i, 0, w - 1);
            s += k[i + radius] * src[(y * w + xx) * 3 + c];
          }
          tmp[static_cast<size_t>((y * w + x) * 3 + c)] = s;
        }
    for (int64_t y = 0; y < h; ++y)  // vertical pass, then noise
      for (int64_t x = 0; x < w; ++x)
        for (int c = 0; c < 3; ++c) {
          double s = 0;
          for (int i = -radius; i <= radius; ++i) {
            const int64_t yy = std::clamp<int64_t>(y + i, 0, h - 1);
            s += k[i + radius] * tmp[static_cast<size_t>((yy * w + x) * 3 + c)];
          }
          o[((t * h + y) * w + x) * 3 + c] =
              static_cast<uint8_t>(std::clamp(std::lround(s + noise(gen)), 0l, 255l));
        }
  }
  return out;
}

Tensor add_audio_noise(const Tensor& audio, std::mt19937_64& gen) {
  Tensor out = audio.clone();
  std::normal_distribution<double> noise(0.0, kAudioNoiseSigma);
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i)
    p[i] = static_cast<float>(std::clamp(p[i] + noise(gen), -1.0, 1.0));
  return out;
}

// Margins seen over a run, printed so a change of the estimators shows how close they come.
struct Margins {
  double fill_min[kNumShapes] = {9, 9, 9}, fill_max[kNumShapes] = {0, 0, 0};
  double taper_min[kNumShapes] = {9, 9, 9}, taper_max[kNumShapes] = {0, 0, 0};
  double bounce_reversal_min = 1e9, move_reversal_max = 0, pitch_ratio_max = 1, colour_dist_max = 0;
  void add(const ClipAttributes& a, const AttributeEstimate& e) {
    const int s = static_cast<int>(a.shape);
    if (e.shape) {
      fill_min[s] = std::min(fill_min[s], e.shape->fill);
      fill_max[s] = std::max(fill_max[s], e.shape->fill);
      taper_min[s] = std::min(taper_min[s], e.shape->taper);
      taper_max[s] = std::max(taper_max[s], e.shape->taper);
    }
    if (e.motion) {
      if (a.motion == Motion::kBounce)
        bounce_reversal_min = std::min(bounce_reversal_min, e.motion->reversal);
      else
        move_reversal_max = std::max(move_reversal_max, e.motion->reversal);
    }
    const double tone = kColourToneHz[static_cast<size_t>(a.colour)];
    pitch_ratio_max =
        std::max(pitch_ratio_max, std::max(e.pitch.peak_hz / tone, tone / e.pitch.peak_hz));
    if (e.colour) colour_dist_max = std::max(colour_dist_max, e.colour->distance);
  }
  void print(const char* what) const {
    std::printf(
        "  %s: taper circle [%.3f, %.3f] square [%.3f, %.3f] triangle [%.3f, %.3f] (split "
        "0.54); fill circle [%.3f, %.3f] square [%.3f, %.3f] (split 0.86); turn-back: bounces "
        ">= %.1f px, moves <= %.1f px (split 6.4 px); pitch within a factor %.4f (split 1.22); "
        "colour within %.1f\n",
        what, taper_min[0], taper_max[0], taper_min[1], taper_max[1], taper_min[2], taper_max[2],
        fill_min[0], fill_max[0], fill_min[1], fill_max[1], bounce_reversal_min, move_reversal_max,
        pitch_ratio_max, colour_dist_max);
  }
};

// Every colour x shape x motion, on both backgrounds (degraded: one background each, in turn,
// to keep the test short): all four attributes right.
void check_every_combination(bool degrade, const char* what) {
  std::mt19937_64 gen(1234);
  Margins margins;
  int n = 0;
  for (int c = 0; c < kNumColours; ++c)
    for (int s = 0; s < kNumShapes; ++s)
      for (int m = 0; m < kNumMotions; ++m)
        for (int bg = 0; bg < 2; ++bg) {
          if (degrade && bg != (c + s + m) % 2) continue;
          const ClipAttributes a = attrs(c, s, m);
          ClipParams p = sample_clip_params(11, static_cast<uint64_t>(n++), a);
          p.background = bg;
          const TinyClip clip = render_clip(p);
          const Tensor frames = degrade ? blur_and_noise(clip.frames, gen) : clip.frames;
          const Tensor audio = degrade ? add_audio_noise(clip.audio, gen) : clip.audio;
          const AttributeEstimate e = estimate_attributes(frames, audio, kTinySampleRate);
          SCOPED_TRACE(clip.prompt + " on background " + std::to_string(bg));
          ASSERT_TRUE(e.colour && e.shape && e.motion);
          EXPECT_EQ(e.object_frames, kTinyFrames);
          EXPECT_EQ(e.colour->colour, a.colour);
          EXPECT_EQ(e.shape->shape, a.shape)
              << "fill " << e.shape->fill << " taper " << e.shape->taper;
          EXPECT_EQ(e.motion->motion, a.motion) << "dx " << e.motion->dx << " dy " << e.motion->dy
                                                << " turn-back " << e.motion->reversal;
          EXPECT_EQ(e.pitch.colour, a.colour) << "peak " << e.pitch.peak_hz << " Hz";
          margins.add(a, e);
        }
  margins.print(what);
}

TEST(TinyEvalClips, PromptsAndTheHeldOutSet) {
  EXPECT_EQ(tiny_prompt(Colour::kRed, ShapeKind::kCircle, Motion::kLeft),
            "a red circle moves to the left");
  EXPECT_EQ(tiny_prompt(Colour::kGreen, ShapeKind::kSquare, Motion::kUp),
            "a green square moves up");
  EXPECT_EQ(tiny_prompt(Colour::kYellow, ShapeKind::kTriangle, Motion::kDown),
            "a yellow triangle moves down");
  EXPECT_EQ(tiny_prompt(Colour::kBlue, ShapeKind::kTriangle, Motion::kBounce),
            "a blue triangle bounces");
  const std::vector<ClipAttributes> held = held_out_attributes();
  ASSERT_EQ(held.size(), 12u);
  std::set<std::tuple<int, int, int>> distinct;
  for (const ClipAttributes& a : held) {
    EXPECT_TRUE(is_held_out(a));
    distinct.insert(
        {static_cast<int>(a.colour), static_cast<int>(a.shape), static_cast<int>(a.motion)});
  }
  EXPECT_EQ(distinct.size(), 12u);
  // Every pair of attribute values still occurs in training.
  for (int c = 0; c < kNumColours; ++c)
    for (int s = 0; s < kNumShapes; ++s)
      for (int m = 0; m < kNumMotions; ++m) {
        bool cs = false, cm = false, sm = false;
        for (int x = 0; x < kNumMotions; ++x) cs |= !is_held_out(attrs(c, s, x));
        for (int x = 0; x < kNumShapes; ++x) cm |= !is_held_out(attrs(c, x, m));
        for (int x = 0; x < kNumColours; ++x) sm |= !is_held_out(attrs(x, s, m));
        EXPECT_TRUE(cs && cm && sm) << c << " " << s << " " << m;
      }
  // Training draws skip the held-out triples.
  for (uint64_t i = 0; i < 200; ++i) EXPECT_FALSE(is_held_out(sample_clip_params(5, i).attributes));
  // The evaluation's cases: held-out triples in order, seeds from the first.
  const std::vector<TinyEvalCase> cases = tiny_eval_cases(14, 100);
  ASSERT_EQ(cases.size(), 14u);
  EXPECT_EQ(cases[0].prompt, "a red circle moves to the left");
  EXPECT_EQ(cases[1].prompt, "a green square moves down");
  EXPECT_EQ(cases[12].attributes, cases[0].attributes);
  EXPECT_EQ(cases[13].seed, 113u);
  EXPECT_THROW(tiny_eval_cases(0), Error);
}

TEST(TinyEvalClips, TrainingSplitIsTheOther48Balanced) {
  const std::vector<ClipAttributes> train = training_attributes();
  ASSERT_EQ(train.size(), 48u);
  std::set<std::tuple<int, int, int>> distinct;
  for (const ClipAttributes& a : train) {
    EXPECT_FALSE(is_held_out(a));
    distinct.insert(
        {static_cast<int>(a.colour), static_cast<int>(a.shape), static_cast<int>(a.motion)});
  }
  EXPECT_EQ(distinct.size(), 48u);
  // Every run of twelve has each colour three times and each shape four times.
  for (size_t start = 0; start + 12 <= train.size(); start += 12) {
    int colours[kNumColours] = {}, shapes[kNumShapes] = {};
    for (size_t i = start; i < start + 12; ++i) {
      ++colours[static_cast<int>(train[i].colour)];
      ++shapes[static_cast<int>(train[i].shape)];
    }
    for (int c : colours) EXPECT_EQ(c, 3) << "cases " << start << "-" << start + 11;
    for (int s : shapes) EXPECT_EQ(s, 4) << "cases " << start << "-" << start + 11;
  }
  const std::vector<TinyEvalCase> cases = tiny_eval_cases(50, 7, TinySplit::kTraining);
  ASSERT_EQ(cases.size(), 50u);
  EXPECT_EQ(cases[0].prompt, "a red circle moves to the right");
  EXPECT_EQ(cases[1].prompt, "a green square moves to the left");
  EXPECT_EQ(cases[48].attributes, cases[0].attributes);
  EXPECT_EQ(cases[49].seed, 56u);
  EXPECT_EQ(split_name(TinySplit::kTraining), "training");
  EXPECT_EQ(split_name(TinySplit::kHeldOut), "held-out");
}

TEST(TinyEvalClips, SameBytesAsThePythonGenerator) {
  // tools/train_tiny/clips.py REFERENCE_CLIPS / EXPECTED_DIGESTS: FNV-1a 64 of the frames, the
  // waveform's sum and sum of squares.
  struct Ref {
    uint64_t index;
    bool fixed;
    ClipAttributes a;
    uint64_t frames_fnv;
    double sum, sum_sq;
    const char* prompt;
  };
  const Ref refs[] = {
      {0, false, {}, 0x94421cde3fa68697ull, 3.270065, 2087.742998, "a yellow circle bounces"},
      {1, true, attrs(2, 2, 4), 0xbcb22637179cd3fcull, 1.627906, 2080.371345,
       "a blue triangle bounces"},
      {2, true, attrs(3, 1, 2), 0x7e27add974f57611ull, 0.0, 2071.984221,
       "a yellow square moves up"},
  };
  for (const Ref& r : refs) {
    const ClipParams p =
        r.fixed ? sample_clip_params(7, r.index, r.a) : sample_clip_params(7, r.index);
    const TinyClip clip = render_clip(p);
    ASSERT_EQ(clip.frames.shape(), h3::Shape({kTinyFrames, kTinyHeight, kTinyWidth, 3}));
    ASSERT_EQ(clip.audio.shape(), h3::Shape({kTinyAudioChannels, kTinyAudioSamples}));
    EXPECT_EQ(clip.prompt, r.prompt);
    EXPECT_EQ(fnv1a64(clip.frames.data<uint8_t>(), clip.frames.nbytes()), r.frames_fnv)
        << clip.prompt;
    double sum = 0, sum_sq = 0;
    for (float v : clip.audio.to_f32_vector()) {
      sum += v;
      sum_sq += static_cast<double>(v) * v;
    }
    EXPECT_NEAR(sum, r.sum, 1e-4) << clip.prompt;
    EXPECT_NEAR(sum_sq, r.sum_sq, 1e-4) << clip.prompt;
  }
}

TEST(TinyEvalClips, ShapesStayInsideAndBouncesClick) {
  for (uint64_t i = 0; i < 300; ++i) {
    const ClipParams p = sample_clip_params(9, i);
    const double half = p.size / 2;
    for (int64_t t = 0; t < kTinyFrames; ++t) {
      double x = 0, y = 0;
      clip_centre(p, static_cast<double>(t), &x, &y);
      ASSERT_GE(x - half, kMargin - 1e-9);
      ASSERT_LE(x + half, kTinyWidth - kMargin + 1e-9);
      ASSERT_GE(y - half, kMargin - 1e-9);
      ASSERT_LE(y + half, kTinyHeight - kMargin + 1e-9);
    }
    const std::vector<double> contacts = contact_times(p);
    if (p.attributes.motion == Motion::kBounce) {
      ASSERT_GE(contacts.size(), 1u);
      ASSERT_LE(contacts.size(), 2u);
    } else {
      ASSERT_TRUE(contacts.empty());
    }
  }
  // Loudness: well below full scale; the click adds energy right after a contact.
  const TinyClip clip = render_clip(sample_clip_params(9, 0, attrs(0, 0, 4)));
  const std::vector<float> a = clip.audio.to_f32_vector();
  float peak = 0;
  for (float v : a) peak = std::max(peak, std::abs(v));
  EXPECT_LE(peak, 0.6f);
  EXPECT_GT(peak, 0.3f);  // a click is there
  const int64_t at =
      static_cast<int64_t>(contact_times(clip.params).front() / kTinyFps * kTinySampleRate);
  float near = 0;
  for (int64_t n = at; n < at + 200; ++n)
    near = std::max(near, std::abs(a[static_cast<size_t>(n)]));
  EXPECT_GT(near, 0.3f);
}

TEST(TinyEval, EveryCombinationOnCleanClips) { check_every_combination(false, "clean"); }

TEST(TinyEval, EveryCombinationUnderBlurAndNoise) {
  check_every_combination(true, "blur sigma 1.2 px, pixel noise sigma 12, audio noise sigma 0.1");
}

TEST(TinyEval, NoObjectGivesEmptyEstimates) {
  Tensor frames = Tensor::zeros({4, 16, 16, 3}, DType::kU8);
  frames.fill(90);
  const Tensor audio = Tensor::zeros({2, 8000}, DType::kF32);
  const AttributeEstimate e = estimate_attributes(frames, audio, 32000);
  EXPECT_FALSE(e.colour);
  EXPECT_FALSE(e.shape);
  EXPECT_FALSE(e.motion);
  EXPECT_EQ(e.object_frames, 0);
  // Judged as wrong, not as an error.
  const TinyEvalCase c = tiny_eval_cases(1).front();
  const TinyClip clip = render_clip(sample_clip_params(0, 0, c.attributes));
  Tensor blank = clip.frames.clone();
  blank.fill(24);
  const TinyEvalResult r = judge_tiny_clip(c, blank, clip.audio, kTinySampleRate);
  EXPECT_FALSE(r.colour || r.shape || r.motion);
  EXPECT_TRUE(r.pitch);
  const TinyEvalReport rep =
      summarize({r, judge_tiny_clip(c, clip.frames, clip.audio, kTinySampleRate)});
  EXPECT_DOUBLE_EQ(rep.colour, 0.5);
  EXPECT_DOUBLE_EQ(rep.pitch, 1.0);
}

TEST(TinyEval, RefusesMalformedInput) {
  const Tensor audio = Tensor::zeros({2, 8000}, DType::kF32);
  const Tensor frames = Tensor::zeros({4, 16, 16, 3}, DType::kU8);
  expect_error(
      [] {
        estimate_colour(Tensor::zeros({4, 16, 16, 3}, DType::kF32));
      },
      "uint8 [F, H, W, 3]");
  expect_error(
      [] {
        estimate_shape(Tensor::zeros({16, 16, 3}, DType::kU8));
      },
      "uint8 [F, H, W, 3]");
  expect_error(
      [] {
        estimate_motion(Tensor::zeros({4, 16, 16, 4}, DType::kU8));
      },
      "uint8 [F, H, W, 3]");
  expect_error(
      [] {
        estimate_motion(Tensor::zeros({1, 16, 16, 3}, DType::kU8));
      },
      "at least 2 frames");
  expect_error([] { estimate_colour(Tensor::zeros({4, 4, 16, 3}, DType::kU8)); }, "8 x 8");
  expect_error([] { estimate_colour(Tensor()); }, "undefined");
  expect_error(
      [] {
        estimate_pitch(Tensor::zeros({2, 8000}, DType::kF64), 32000);
      },
      "float32 [C, S]");
  expect_error(
      [] {
        estimate_pitch(Tensor::zeros({3, 8000}, DType::kF32), 32000);
      },
      "float32 [C, S]");
  expect_error([] { estimate_pitch(Tensor::zeros({8000}, DType::kF32), 32000); }, "float32 [C, S]");
  expect_error(
      [] {
        estimate_pitch(Tensor::zeros({2, 100}, DType::kF32), 32000);
      },
      "at least 0.1 s");
  expect_error([&] { estimate_pitch(audio, 0); }, "sample rate");
  Tensor bad = audio.clone();
  bad.data<float>()[17] = std::nanf("");
  expect_error([&] { estimate_pitch(bad, 32000); }, "sample 17 is not finite");
  expect_error([&] { estimate_attributes(frames.to(DType::kF32), audio, 32000); }, "uint8");
  // The suite wants the spec's geometry.
  const TinyEvalCase c = tiny_eval_cases(1).front();
  expect_error([&] { judge_tiny_clip(c, frames, audio, kTinySampleRate); },
               "39 frames of 64 x 128");
  const TinyClip clip = render_clip(sample_clip_params(0, 0, c.attributes));
  expect_error([&] { judge_tiny_clip(c, clip.frames, clip.audio, 44100); }, "32000 Hz");
}

}  // namespace
}  // namespace h3::eval
