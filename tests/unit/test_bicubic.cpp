// Bicubic antialiased uint8 resize of the Qwen processors (media/bicubic_resize.h). The golden
// data does not cover the processors' own resizes (golden README "Not covered"), so these tests
// check the implementation against values computed by hand and against an independent float64
// evaluation of the same definition written here: a plain sum over every input sample of the
// Keys kernel (a = -0.5) stretched by the downscale factor, normalized, each pass rounded to
// uint8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "core/status.h"
#include "media/bicubic_resize.h"
#include "media/qwen_processor.h"

namespace h3::media {
namespace {

// Independent float64 reference of one pass over a line of `in` samples: every input sample k
// (centre k + 0.5) contributes kernel((k + 0.5 - centre) / stretch) where the output centre is
// (i + 0.5) * in / out and stretch = max(in / out, 1); the window is cut at the reference's
// support bounds (centre +- 2*stretch rounded to the nearest sample edge, clipped to the image).
double keys(double x) {
  x = std::fabs(x);
  if (x < 1) return 1.5 * x * x * x - 2.5 * x * x + 1;
  if (x < 2) return -0.5 * x * x * x + 2.5 * x * x - 4 * x + 2;
  return 0;
}

std::vector<uint8_t> reference_line(const std::vector<double>& in, int64_t out, double* max_dev) {
  const int64_t n = static_cast<int64_t>(in.size());
  const double scale = static_cast<double>(n) / static_cast<double>(out);
  const double stretch = std::max(scale, 1.0);
  std::vector<uint8_t> r(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    const double centre = (static_cast<double>(i) + 0.5) * scale;
    const double lo = std::max(0.0, std::trunc(centre - 2 * stretch + 0.5));
    const double hi = std::min(static_cast<double>(n), std::trunc(centre + 2 * stretch + 0.5));
    double acc = 0, total = 0;
    for (int64_t k = 0; k < n; ++k) {
      if (k < lo || k >= hi) continue;
      const double w = keys((static_cast<double>(k) + 0.5 - centre) / stretch);
      acc += w * in[static_cast<size_t>(k)];
      total += w;
    }
    const double v = std::clamp(acc / total, 0.0, 255.0);
    // Distance of the exact value from a rounding boundary: where it is tiny, fixed point may
    // legitimately land on the other side.
    if (max_dev) *max_dev = std::min(*max_dev, std::fabs(v - std::floor(v) - 0.5));
    r[static_cast<size_t>(i)] = static_cast<uint8_t>(std::floor(v + 0.5));
  }
  return r;
}

// Float64 separable reference of a whole [H, W, C] image: width pass, uint8, height pass, uint8.
std::vector<uint8_t> reference_image(const std::vector<uint8_t>& px, int64_t h, int64_t w,
                                     int64_t c, int64_t oh, int64_t ow) {
  std::vector<uint8_t> mid(static_cast<size_t>(h * ow * c));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t k = 0; k < c; ++k) {
      std::vector<double> line(static_cast<size_t>(w));
      for (int64_t x = 0; x < w; ++x) line[static_cast<size_t>(x)] = px[static_cast<size_t>((y * w + x) * c + k)];
      const auto r = ow == w ? std::vector<uint8_t>(line.begin(), line.end()) : reference_line(line, ow, nullptr);
      for (int64_t x = 0; x < ow; ++x) mid[static_cast<size_t>((y * ow + x) * c + k)] = r[static_cast<size_t>(x)];
    }
  std::vector<uint8_t> out(static_cast<size_t>(oh * ow * c));
  for (int64_t x = 0; x < ow; ++x)
    for (int64_t k = 0; k < c; ++k) {
      std::vector<double> line(static_cast<size_t>(h));
      for (int64_t y = 0; y < h; ++y) line[static_cast<size_t>(y)] = mid[static_cast<size_t>((y * ow + x) * c + k)];
      const auto r = oh == h ? std::vector<uint8_t>(line.begin(), line.end()) : reference_line(line, oh, nullptr);
      for (int64_t y = 0; y < oh; ++y) out[static_cast<size_t>((y * ow + x) * c + k)] = r[static_cast<size_t>(y)];
    }
  return out;
}

Tensor image(const std::vector<uint8_t>& px, int64_t h, int64_t w, int64_t c) {
  Tensor t = Tensor::empty({h, w, c}, DType::kU8);
  std::copy(px.begin(), px.end(), t.data<uint8_t>());
  return t;
}

std::vector<uint8_t> pixels(const Tensor& t) {
  const uint8_t* d = t.data<uint8_t>();
  return std::vector<uint8_t>(d, d + t.numel());
}

TEST(BicubicResize, KernelValues) {
  // Keys a = -0.5 at a few points, by hand: f(0) = 1, f(0.5) = 0.5625, f(1) = 0, f(1.5) = -0.0625.
  EXPECT_DOUBLE_EQ(bicubic_aa_filter(0.0), 1.0);
  EXPECT_DOUBLE_EQ(bicubic_aa_filter(0.5), 0.5625);
  EXPECT_DOUBLE_EQ(bicubic_aa_filter(-0.5), 0.5625);
  EXPECT_DOUBLE_EQ(bicubic_aa_filter(1.0), 0.0);
  EXPECT_DOUBLE_EQ(bicubic_aa_filter(1.5), -0.0625);
  EXPECT_DOUBLE_EQ(bicubic_aa_filter(2.0), 0.0);
  EXPECT_DOUBLE_EQ(bicubic_aa_filter(3.0), 0.0);
}

TEST(BicubicResize, UpscaleByHand) {
  // Width 2 -> 4 of one row [100, 200]. Output 0: centre 0.25, taps 0 and 1 at distances 0.25
  // and 1.25: f = 0.8671875 and -0.0703125, sum 0.796875, value (86.71875 - 14.0625) / 0.796875
  // = 91.18 -> 91. Output 1: centre 0.75, f(0.25) = 0.8671875, f(0.75) = 0.2265625, sum
  // 1.09375: (86.71875 + 45.3125) / 1.09375 = 120.71 -> 121. Outputs 2, 3 mirror: 179, 209.
  const Tensor out = resize_bicubic_aa_u8(image({100, 100, 200, 200}, 1, 2, 2), 1, 4);
  ASSERT_EQ(out.shape(), (Shape{1, 4, 2}));
  EXPECT_EQ(pixels(out), (std::vector<uint8_t>{91, 91, 121, 121, 179, 179, 209, 209}));
}

TEST(BicubicResize, DownscaleByHand) {
  // Height 4 -> 2 of one column [10, 20, 30, 40]: the kernel is stretched by 2. Output 0: centre
  // 1, taps 0..3 at (j - 0.5) / 2: f(-0.25), f(0.25), f(0.75), f(1.25) = 0.8671875, 0.8671875,
  // 0.2265625, -0.0703125, sum 1.890625: 30.0 / 1.890625 = 15.87 -> 16. Output 1: centre 3,
  // weights reversed: 64.53125 / 1.890625 = 34.13 -> 34.
  const Tensor out = resize_bicubic_aa_u8(image({10, 20, 30, 40}, 4, 1, 1), 2, 1);
  ASSERT_EQ(out.shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(pixels(out), (std::vector<uint8_t>{16, 34}));
  // Overshoot clamps: a step [0, 255] upscaled undershoots below 0 and overshoots above 255.
  const Tensor step = resize_bicubic_aa_u8(image({0, 255}, 1, 2, 1), 1, 4);
  EXPECT_EQ(pixels(step).front(), 0);
  EXPECT_EQ(pixels(step).back(), 255);
}

TEST(BicubicResize, IdentityWhenSizeUnchanged) {
  std::mt19937 rng(7);
  std::vector<uint8_t> px(5 * 7 * 3);
  for (auto& v : px) v = static_cast<uint8_t>(rng() & 255);
  const Tensor src = image(px, 5, 7, 3);
  EXPECT_EQ(pixels(resize_bicubic_aa_u8(src, 5, 7)), px);
  // A constant image stays constant whatever the size (weights sum to one in fixed point).
  const Tensor flat = image(std::vector<uint8_t>(9 * 11 * 3, 173), 9, 11, 3);
  for (auto [oh, ow] : {std::pair<int64_t, int64_t>{4, 5}, {20, 13}, {9, 30}, {1, 1}}) {
    const auto out = pixels(resize_bicubic_aa_u8(flat, oh, ow));
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t v) { return v == 173; }))
        << oh << "x" << ow;
  }
}

TEST(BicubicResize, MatchesFloat64Reference) {
  std::mt19937 rng(1234);
  struct Case { int64_t h, w, oh, ow; };
  for (const Case c : {Case{16, 24, 8, 12}, Case{10, 10, 23, 17}, Case{31, 7, 12, 29},
                       Case{50, 70, 64, 64}, Case{64, 48, 37, 48}, Case{9, 40, 9, 11}}) {
    std::vector<uint8_t> px(static_cast<size_t>(c.h * c.w * 3));
    // Smooth content plus noise, so that both flat regions and edges are exercised.
    for (int64_t y = 0; y < c.h; ++y)
      for (int64_t x = 0; x < c.w; ++x)
        for (int64_t k = 0; k < 3; ++k) {
          const double v = 128 + 90 * std::sin(0.3 * static_cast<double>(x + 2 * k)) *
                                     std::cos(0.2 * static_cast<double>(y)) +
                           static_cast<double>(rng() % 61) - 30;
          px[static_cast<size_t>((y * c.w + x) * 3 + k)] =
              static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
        }
    const auto got = pixels(resize_bicubic_aa_u8(image(px, c.h, c.w, 3), c.oh, c.ow));
    const auto ref = reference_image(px, c.h, c.w, 3, c.oh, c.ow);
    ASSERT_EQ(got.size(), ref.size());
    int64_t equal = 0, max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const int64_t d = std::abs(static_cast<int64_t>(got[i]) - static_cast<int64_t>(ref[i]));
      equal += d == 0;
      max_diff = std::max(max_diff, d);
    }
    const double frac = static_cast<double>(equal) / static_cast<double>(got.size());
    std::printf("  %lldx%lld -> %lldx%lld: equal %.4f of %zu, max |diff| %lld (bounds: >= 0.99, <= 1)\n",
                static_cast<long long>(c.w), static_cast<long long>(c.h),
                static_cast<long long>(c.ow), static_cast<long long>(c.oh), frac, got.size(),
                static_cast<long long>(max_diff));
    // Fixed-point weights (15 significant bits) may flip a value that sits within ~1e-3 of a
    // rounding boundary, and the second pass inherits such a flip.
    EXPECT_LE(max_diff, 1);
    EXPECT_GE(frac, 0.99);
  }
}

TEST(BicubicResize, TapsFollowTheDefinition) {
  // 4 -> 2: support 4, window of 2*ceil(4)+1 = 9 stored taps, 4 used; precision: the largest
  // weight 0.8671875/1.890625 = 0.4587 gives 16 fractional bits (0.4587 * 2^16 = 30063 < 2^15,
  // 0.4587 * 2^17 would not fit).
  const BicubicTaps t = bicubic_aa_taps(4, 2);
  EXPECT_EQ(t.ksize, 9);
  EXPECT_EQ(t.first, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(t.count, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(t.precision, 16);
  EXPECT_NEAR(t.weights_f64[0], 0.8671875 / 1.890625, 1e-15);
  EXPECT_EQ(t.weights[0], static_cast<int16_t>(std::lround(0.8671875 / 1.890625 * 65536)));
  // 2 -> 4 (upscale): the largest weight 1.0882 leaves 14 bits.
  EXPECT_EQ(bicubic_aa_taps(2, 4).precision, 14);
  double sum = 0;
  for (int64_t j = 0; j < 4; ++j) sum += t.weights_f64[static_cast<size_t>(j)];
  EXPECT_NEAR(sum, 1.0, 1e-15);
}

TEST(BicubicResize, RefusesBadInput) {
  const Tensor ok = Tensor::zeros({4, 4, 3}, DType::kU8);
  auto expect_invalid = [](auto&& fn, const char* what) {
    try {
      fn();
      ADD_FAILURE() << what << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what << ": " << e.what();
      std::printf("  %s -> %s\n", what, e.what());
    }
  };
  expect_invalid([&] { (void)resize_bicubic_aa_u8(ok, 0, 4); }, "zero height");
  expect_invalid([&] { (void)resize_bicubic_aa_u8(ok, 4, -2); }, "negative width");
  expect_invalid([&] { (void)resize_bicubic_aa_u8(Tensor::zeros({4, 4, 3}, DType::kF32), 2, 2); },
                 "float32 input");
  expect_invalid([&] { (void)resize_bicubic_aa_u8(Tensor::zeros({4, 12}, DType::kU8), 2, 2); },
                 "2-D input");
  expect_invalid([&] { (void)resize_bicubic_aa_u8(Tensor::zeros({0, 4, 3}, DType::kU8), 2, 2); },
                 "empty image");
  expect_invalid([&] { (void)bicubic_aa_taps(0, 3); }, "taps from 0 samples");
}

TEST(BicubicResize, FramesResizeIndependently) {
  // [T, H, W, C]: each frame equals the resize of that frame alone.
  std::mt19937 rng(99);
  std::vector<uint8_t> px(3 * 12 * 20 * 3);
  for (auto& v : px) v = static_cast<uint8_t>(rng() & 255);
  Tensor video = Tensor::empty({3, 12, 20, 3}, DType::kU8);
  std::copy(px.begin(), px.end(), video.data<uint8_t>());
  const auto all = pixels(resize_bicubic_aa_u8(video, 7, 9));
  ASSERT_EQ(all.size(), size_t{3 * 7 * 9 * 3});
  for (int64_t f = 0; f < 3; ++f) {
    const size_t n = 12 * 20 * 3;
    std::vector<uint8_t> one(px.begin() + static_cast<std::ptrdiff_t>(f * n),
                             px.begin() + static_cast<std::ptrdiff_t>((f + 1) * n));
    const auto alone = pixels(resize_bicubic_aa_u8(image(one, 12, 20, 3), 7, 9));
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(),
                           all.begin() + static_cast<std::ptrdiff_t>(f * alone.size())))
        << "frame " << f;
  }
}

TEST(QwenProcessorResize, ImagesAndVideosReachTheirSmartResizeGrid) {
  QwenProcessorConfig c;
  c.min_pixels = 1024;
  // 50x70 (H x W) -> smart_resize 64x64 -> grid (1, 4, 4), 16 patches of 3*2*16*16.
  const QwenPixels img = qwen_process_image(Tensor::zeros({50, 70, 3}, DType::kU8), c);
  EXPECT_TRUE(img.grid.t == 1 && img.grid.h == 4 && img.grid.w == 4);
  EXPECT_EQ(img.pixel_values.shape(), (Shape{16, 1536}));
  // Resizing then processing equals processing the resized image (no second resize).
  std::mt19937 rng(5);
  Tensor src = Tensor::empty({50, 70, 3}, DType::kU8);
  for (int64_t i = 0; i < src.numel(); ++i) src.data<uint8_t>()[i] = static_cast<uint8_t>(rng() & 255);
  const QwenPixels a = qwen_process_image(src, c);
  const QwenPixels b = qwen_process_image(resize_bicubic_aa_u8(src, 64, 64), c);
  EXPECT_EQ(a.pixel_values.to_f32_vector(), b.pixel_values.to_f32_vector());
  // Video: 3 frames of 40x100 with a budget counting 4 (padded) frames.
  QwenProcessorConfig v = c;
  v.min_pixels = 4096;
  v.max_pixels = 4 * 32 * 96;
  EXPECT_EQ(qwen_smart_resize_video(3, 40, 100, 2, 32, v.min_pixels, v.max_pixels),
            (std::array<int64_t, 2>{32, 96}));
  const QwenPixels vid = qwen_process_video(Tensor::zeros({3, 40, 100, 3}, DType::kU8), v);
  EXPECT_TRUE(vid.grid.t == 2 && vid.grid.h == 2 && vid.grid.w == 6);
  // Over budget: scaled down by sqrt(T*H*W / max) and floored to multiples of 32.
  EXPECT_EQ(qwen_smart_resize_video(8, 256, 256, 2, 32, 4096, 8 * 64 * 64),
            (std::array<int64_t, 2>{64, 64}));
  // Under budget: scaled up and ceiled.
  // (t rounds up to 2: 2*32*32 < 16384, beta = sqrt(16384 / 1024) = 4, ceil(32*4/32)*32 = 128.)
  EXPECT_EQ(qwen_smart_resize_video(1, 32, 32, 2, 32, 4 * 64 * 64, 1 << 30),
            (std::array<int64_t, 2>{128, 128}));
}

}  // namespace
}  // namespace h3::media
