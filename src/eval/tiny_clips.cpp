#include "eval/tiny_clips.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/status.h"

namespace h3::eval {

namespace {

// splitmix64 (Steele, Lea, Flood 2014): the stream tools/train_tiny/clips.py draws from too.
class SplitMix {
 public:
  // Stream 0 draws the attributes, stream 1 the nuisance (so fixing the attributes leaves the
  // nuisance of an index unchanged).
  SplitMix(uint64_t seed, uint64_t index, uint64_t stream)
      : state_(seed * 0x9E3779B97F4A7C15ull + index * 0xC2B2AE3D27D4EB4Full +
               stream * 0x165667B19E3779F9ull) {}
  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int below(int n) { return static_cast<int>(uniform() * n); }

 private:
  uint64_t state_;
};

constexpr double kLastFrame = static_cast<double>(kTinyFrames - 1);

ClipAttributes draw_attributes(SplitMix& rng) {
  ClipAttributes a;
  a.colour = static_cast<Colour>(rng.below(kNumColours));
  a.shape = static_cast<ShapeKind>(rng.below(kNumShapes));
  a.motion = static_cast<Motion>(rng.below(kNumMotions));
  return a;
}

double bounce_lift(double phase) { return 4.0 * phase * (1.0 - phase); }

ClipParams draw_nuisance(uint64_t seed, uint64_t index, const ClipAttributes& attributes) {
  SplitMix rng(seed, index, 1);
  ClipParams p;
  p.attributes = attributes;
  p.background = rng.below(static_cast<int>(kBackgroundRgb.size()));
  p.size = rng.uniform(kMinSize, kMaxSize);
  const double half = p.size / 2.0;
  const double lo_x = kMargin + half, hi_x = static_cast<double>(kTinyWidth) - kMargin - half;
  const double lo_y = kMargin + half, hi_y = static_cast<double>(kTinyHeight) - kMargin - half;
  switch (attributes.motion) {
    case Motion::kLeft:
    case Motion::kRight: {
      const double d = rng.uniform(kMinMoveX, kMaxMoveX);
      const double xa = rng.uniform(lo_x, hi_x - d);
      const double y = rng.uniform(lo_y, hi_y);
      const bool right = attributes.motion == Motion::kRight;
      p.x0 = right ? xa : xa + d;
      p.x1 = right ? xa + d : xa;
      p.y0 = p.y1 = y;
      break;
    }
    case Motion::kUp:
    case Motion::kDown: {
      const double d = rng.uniform(kMinMoveY, kMaxMoveY);
      const double ya = rng.uniform(lo_y, hi_y - d);
      const double x = rng.uniform(lo_x, hi_x);
      const bool down = attributes.motion == Motion::kDown;  // y grows downwards
      p.y0 = down ? ya : ya + d;
      p.y1 = down ? ya + d : ya;
      p.x0 = p.x1 = x;
      break;
    }
    case Motion::kBounce: {
      p.x0 = p.x1 = rng.uniform(lo_x, hi_x);
      p.floor_y = hi_y;
      p.bounce_height = rng.uniform(kMinBounceHeight, std::min(kMaxBounceHeight, hi_y - lo_y));
      p.bounce_period = kLastFrame * rng.uniform(kMinBouncePeriod, kMaxBouncePeriod);
      // The clip starts and ends high on an arc (phase in [0.2, 0.8], lift >= 0.64), so the
      // turn at the floor is always at least 0.64 of the bounce height.
      for (int tries = 0;; ++tries) {
        H3_ASSERT(tries < 1000);
        const double phase0 = rng.uniform(kMinEndPhase, 1.0 - kMinEndPhase);
        const double end = phase0 + kLastFrame / p.bounce_period;
        const double phase1 = end - std::floor(end);
        if (phase1 < kMinEndPhase || phase1 > 1.0 - kMinEndPhase) continue;
        p.first_contact = -phase0 * p.bounce_period;
        break;
      }
      clip_centre(p, 0.0, &p.x0, &p.y0);
      clip_centre(p, kLastFrame, &p.x1, &p.y1);
      break;
    }
  }
  return p;
}

}  // namespace

std::string_view colour_name(Colour c) {
  static constexpr std::array<std::string_view, kNumColours> kNames = {"red", "green", "blue",
                                                                       "yellow"};
  return kNames.at(static_cast<size_t>(c));
}

std::string_view shape_name(ShapeKind s) {
  static constexpr std::array<std::string_view, kNumShapes> kNames = {"circle", "square",
                                                                      "triangle"};
  return kNames.at(static_cast<size_t>(s));
}

std::string_view motion_name(Motion m) {
  static constexpr std::array<std::string_view, kNumMotions> kNames = {"left", "right", "up",
                                                                       "down", "bounce"};
  return kNames.at(static_cast<size_t>(m));
}

std::string tiny_prompt(Colour c, ShapeKind s, Motion m) {
  std::string p = "a " + std::string(colour_name(c)) + " " + std::string(shape_name(s));
  switch (m) {
    case Motion::kLeft:
    case Motion::kRight:
      return p + " moves to the " + std::string(motion_name(m));
    case Motion::kUp:
    case Motion::kDown:
      return p + " moves " + std::string(motion_name(m));
    case Motion::kBounce:
      break;
  }
  return p + " bounces";
}

bool is_held_out(const ClipAttributes& a) {
  return static_cast<int>(a.motion) ==
         (static_cast<int>(a.colour) + 2 * static_cast<int>(a.shape)) % kNumMotions;
}

std::vector<ClipAttributes> held_out_attributes() {
  std::vector<ClipAttributes> out;
  for (int k = 0; k < kNumColours * kNumShapes; ++k) {
    ClipAttributes a;
    a.colour = static_cast<Colour>(k % kNumColours);
    a.shape = static_cast<ShapeKind>(k % kNumShapes);
    a.motion = static_cast<Motion>((k % kNumColours + 2 * (k % kNumShapes)) % kNumMotions);
    out.push_back(a);
  }
  return out;
}

std::vector<ClipAttributes> training_attributes() {
  std::vector<ClipAttributes> out;
  for (int run = 0; run + 1 < kNumMotions; ++run)
    for (const ClipAttributes& held : held_out_attributes()) {
      ClipAttributes a = held;
      // The run-th motion other than the held-out one.
      const int m = run < static_cast<int>(held.motion) ? run : run + 1;
      a.motion = static_cast<Motion>(m);
      out.push_back(a);
    }
  return out;
}

ClipParams sample_clip_params(uint64_t seed, uint64_t index) {
  SplitMix rng(seed, index, 0);
  ClipAttributes a = draw_attributes(rng);
  while (is_held_out(a)) a = draw_attributes(rng);
  return draw_nuisance(seed, index, a);
}

ClipParams sample_clip_params(uint64_t seed, uint64_t index, const ClipAttributes& attributes) {
  return draw_nuisance(seed, index, attributes);
}

void clip_centre(const ClipParams& p, double t, double* x, double* y) {
  if (p.attributes.motion == Motion::kBounce) {
    const double u = (t - p.first_contact) / p.bounce_period;
    *x = p.x0;
    *y = p.floor_y - p.bounce_height * bounce_lift(u - std::floor(u));
    return;
  }
  const double f = t / kLastFrame;
  *x = p.x0 + (p.x1 - p.x0) * f;
  *y = p.y0 + (p.y1 - p.y0) * f;
}

std::vector<double> contact_times(const ClipParams& p) {
  std::vector<double> out;
  if (p.attributes.motion != Motion::kBounce) return out;
  for (double k = std::ceil(-p.first_contact / p.bounce_period);; k += 1.0) {
    const double t = p.first_contact + k * p.bounce_period;
    if (t > kLastFrame) break;
    if (t >= 0.0) out.push_back(t);
  }
  return out;
}

TinyClip render_clip(const ClipParams& p) {
  H3_CHECK(p.background >= 0 && p.background < static_cast<int>(kBackgroundRgb.size()),
           ErrorCode::kInvalidArgument, "tiny clip: background index ", p.background,
           " is out of range");
  H3_CHECK(p.size > 0 && (p.attributes.motion != Motion::kBounce || p.bounce_period > 0),
           ErrorCode::kInvalidArgument, "tiny clip: size and bounce period must be positive");
  TinyClip clip;
  clip.params = p;
  clip.prompt = tiny_prompt(p.attributes.colour, p.attributes.shape, p.attributes.motion);

  // Frames: coverage of kSupersample^2 points per pixel, blended in integers and rounded half up.
  const Rgb bg = kBackgroundRgb[static_cast<size_t>(p.background)];
  const Rgb fg = kColourRgb[static_cast<size_t>(p.attributes.colour)];
  const int n_sub = kSupersample * kSupersample;
  const double half = p.size / 2.0;
  clip.frames = Tensor::empty({kTinyFrames, kTinyHeight, kTinyWidth, 3}, DType::kU8);
  uint8_t* out = clip.frames.data<uint8_t>();
  auto blend = [&](uint8_t b, uint8_t f, int n) {
    return static_cast<uint8_t>((b * (n_sub - n) + f * n + n_sub / 2) / n_sub);
  };
  for (int64_t i = 0; i < kTinyFrames; ++i) {
    double cx = 0, cy = 0;
    clip_centre(p, static_cast<double>(i), &cx, &cy);
    for (int64_t y = 0; y < kTinyHeight; ++y) {
      for (int64_t x = 0; x < kTinyWidth; ++x) {
        int n = 0;
        for (int sy = 0; sy < kSupersample; ++sy) {
          const double py = (static_cast<double>(kSupersample * y + sy) + 0.5) / kSupersample;
          for (int sx = 0; sx < kSupersample; ++sx) {
            const double px = (static_cast<double>(kSupersample * x + sx) + 0.5) / kSupersample;
            const double dx = px - cx, dy = py - cy;
            bool inside = false;
            switch (p.attributes.shape) {
              case ShapeKind::kCircle:
                inside = dx * dx + dy * dy <= half * half;
                break;
              case ShapeKind::kSquare:
                inside = std::abs(dx) <= half && std::abs(dy) <= half;
                break;
              case ShapeKind::kTriangle:  // apex (cx, cy - s/2), base y = cy + s/2 from cx - s/2 to
                                          // cx + s/2
                inside = dy <= half && std::abs(dx) <= (dy + half) / 2.0;
                break;
            }
            n += inside ? 1 : 0;
          }
        }
        uint8_t* px = out + ((i * kTinyHeight + y) * kTinyWidth + x) * 3;
        px[0] = blend(bg.r, fg.r, n);
        px[1] = blend(bg.g, fg.g, n);
        px[2] = blend(bg.b, fg.b, n);
      }
    }
  }

  // Sound: the colour's tone with faded ends, plus a damped-sine click at each floor contact.
  const double tone_hz = kColourToneHz[static_cast<size_t>(p.attributes.colour)];
  const double rate = static_cast<double>(kTinySampleRate);
  const double length = static_cast<double>(kTinyAudioSamples) / rate;
  std::vector<double> clicks;
  for (double t : contact_times(p)) clicks.push_back(t / static_cast<double>(kTinyFps));
  clip.audio = Tensor::empty({kTinyAudioChannels, kTinyAudioSamples}, DType::kF32);
  float* left = clip.audio.data<float>();
  float* right = left + kTinyAudioSamples;
  const double two_pi = 2.0 * std::numbers::pi;
  auto fade = [](double x) {
    return x < kToneFadeSeconds ? 0.5 - 0.5 * std::cos(std::numbers::pi * x / kToneFadeSeconds)
                                : 1.0;
  };
  for (int64_t n = 0; n < kTinyAudioSamples; ++n) {
    const double t = static_cast<double>(n) / rate;
    double v =
        kToneAmplitude * std::sin(two_pi * tone_hz * t) * std::min(fade(t), fade(length - t));
    for (double c : clicks) {
      const double d = t - c;
      if (d >= 0.0 && d < kClickSeconds)
        v += kClickAmplitude * std::exp(-d / kClickDecaySeconds) * std::sin(two_pi * kClickHz * d);
    }
    left[n] = right[n] = static_cast<float>(v);
  }
  return clip;
}

}  // namespace h3::eval
