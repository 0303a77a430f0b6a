#include "media/image_resize.h"

#include <cmath>
#include <numbers>

#include "core/status.h"

namespace h3::media {

namespace {

// Pillow's sinc with the x == 0 special case; the product with sinc(x/3) truncated to [-3, 3).
double sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * std::numbers::pi;
  return std::sin(x) / x;
}

double lanczos3(double x) {
  if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3);
  return 0.0;
}

constexpr double kLanczosSupport = 3.0;

// Arithmetic right shift then clip to [0, 255]: Pillow's clip8 lookup table.
inline uint8_t clip8(int32_t v) {
  const int32_t s = v >> kResamplePrecisionBits;
  return static_cast<uint8_t>(s < 0 ? 0 : (s > 255 ? 255 : s));
}

}  // namespace

ResampleCoefficients lanczos_coefficients(int64_t in_size, int64_t out_size) {
  H3_CHECK(in_size > 0 && out_size > 0 && in_size < (1 << 30) && out_size < (1 << 30),
           ErrorCode::kInvalidArgument, "LANCZOS resize: sizes must be positive, got ", in_size,
           " -> ", out_size);
  // The box is (0, in_size) as floats, so scale = (float)(in1 - in0) / out_size in float64.
  const float in0 = 0.0f;
  const float in1 = static_cast<float>(in_size);
  double scale = static_cast<double>(in1 - in0) / static_cast<double>(out_size);
  double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kLanczosSupport * filterscale;
  const int64_t ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;

  ResampleCoefficients c;
  c.in_size = in_size;
  c.out_size = out_size;
  c.ksize = ksize;
  c.first.resize(static_cast<size_t>(out_size));
  c.count.resize(static_cast<size_t>(out_size));
  c.weights.assign(static_cast<size_t>(out_size * ksize), 0);
  std::vector<double> k(static_cast<size_t>(ksize));
  const double ss = 1.0 / filterscale;
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (static_cast<double>(xx) + 0.5) * scale;
    // (int) truncation as in C; the clamps below make the sign irrelevant at the low end.
    int64_t xmin = static_cast<int64_t>(static_cast<int>(center - support + 0.5));
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(static_cast<int>(center + support + 0.5));
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = lanczos3((static_cast<double>(x + xmin) - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      ww += w;
    }
    for (int64_t x = 0; x < xmax; ++x) {
      double v = k[static_cast<size_t>(x)];
      if (ww != 0.0) v /= ww;
      // Rounded half away from zero by truncation of v*2^22 -/+ 0.5.
      const double scaled = v * static_cast<double>(1 << kResamplePrecisionBits);
      c.weights[static_cast<size_t>(xx * ksize + x)] =
          static_cast<int32_t>(v < 0 ? -0.5 + scaled : 0.5 + scaled);
    }
    c.first[static_cast<size_t>(xx)] = static_cast<int32_t>(xmin);
    c.count[static_cast<size_t>(xx)] = static_cast<int32_t>(xmax);
  }
  return c;
}

namespace {

// One pass along x (horizontal) over rows [row0, row0 + rows) of src.
RgbImage resample_horizontal(const RgbImage& src, const ResampleCoefficients& c, int64_t row0,
                             int64_t rows) {
  RgbImage out(c.out_size, rows);
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* in_row = src.at(0, y + row0);
    uint8_t* out_row = out.at(0, y);
    for (int64_t xx = 0; xx < c.out_size; ++xx) {
      const int32_t xmin = c.first[static_cast<size_t>(xx)];
      const int32_t n = c.count[static_cast<size_t>(xx)];
      const int32_t* k = &c.weights[static_cast<size_t>(xx * c.ksize)];
      int32_t s0 = 1 << (kResamplePrecisionBits - 1), s1 = s0, s2 = s0;
      for (int32_t x = 0; x < n; ++x) {
        const uint8_t* p = in_row + static_cast<size_t>(x + xmin) * 3;
        s0 += p[0] * k[x];
        s1 += p[1] * k[x];
        s2 += p[2] * k[x];
      }
      out_row[xx * 3 + 0] = clip8(s0);
      out_row[xx * 3 + 1] = clip8(s1);
      out_row[xx * 3 + 2] = clip8(s2);
    }
  }
  return out;
}

// One pass along y; `offset` is subtracted from the coefficient rows (src holds only the rows
// the vertical filter reads, starting at input row `offset`).
RgbImage resample_vertical(const RgbImage& src, const ResampleCoefficients& c, int64_t offset) {
  RgbImage out(src.width, c.out_size);
  for (int64_t yy = 0; yy < c.out_size; ++yy) {
    const int32_t ymin = c.first[static_cast<size_t>(yy)] - static_cast<int32_t>(offset);
    const int32_t n = c.count[static_cast<size_t>(yy)];
    const int32_t* k = &c.weights[static_cast<size_t>(yy * c.ksize)];
    uint8_t* out_row = out.at(0, yy);
    for (int64_t xx = 0; xx < src.width; ++xx) {
      int32_t s0 = 1 << (kResamplePrecisionBits - 1), s1 = s0, s2 = s0;
      for (int32_t y = 0; y < n; ++y) {
        const uint8_t* p = src.at(xx, y + ymin);
        s0 += p[0] * k[y];
        s1 += p[1] * k[y];
        s2 += p[2] * k[y];
      }
      out_row[xx * 3 + 0] = clip8(s0);
      out_row[xx * 3 + 1] = clip8(s1);
      out_row[xx * 3 + 2] = clip8(s2);
    }
  }
  return out;
}

}  // namespace

RgbImage resize_lanczos(const RgbImage& image, int64_t width, int64_t height) {
  H3_CHECK(image.width > 0 && image.height > 0 &&
               image.pixels.size() == static_cast<size_t>(image.width * image.height * 3),
           ErrorCode::kInvalidArgument, "LANCZOS resize: the input image is empty or malformed (",
           image.width, "x", image.height, ")");
  H3_CHECK(width > 0 && height > 0, ErrorCode::kInvalidArgument,
           "LANCZOS resize: target size must be positive, got ", width, "x", height);
  if (width == image.width && height == image.height) return image;  // Image.resize copies

  const bool need_horizontal = width != image.width;
  const bool need_vertical = height != image.height;
  const ResampleCoefficients vert = lanczos_coefficients(image.height, height);
  // Only the input rows the vertical pass reads go through the horizontal pass (same values).
  const int64_t row_first = vert.first.front();
  const int64_t row_last = vert.first.back() + vert.count.back();

  if (!need_vertical) {
    return resample_horizontal(image, lanczos_coefficients(image.width, width), 0, image.height);
  }
  if (!need_horizontal) return resample_vertical(image, vert, 0);
  const RgbImage temp = resample_horizontal(image, lanczos_coefficients(image.width, width),
                                            row_first, row_last - row_first);
  return resample_vertical(temp, vert, row_first);
}

}  // namespace h3::media
