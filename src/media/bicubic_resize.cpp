// Bicubic antialiased uint8 resize (see bicubic_resize.h for the definition it follows).
#include "media/bicubic_resize.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace h3::media {

double bicubic_aa_filter(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
  return 0.0;
}

BicubicTaps bicubic_aa_taps(int64_t in_size, int64_t out_size) {
  H3_CHECK(in_size >= 1 && out_size >= 1, ErrorCode::kInvalidArgument,
           "bicubic resize: sizes must be >= 1, got ", in_size, " -> ", out_size);
  BicubicTaps t;
  t.in_size = in_size;
  t.out_size = out_size;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  t.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out_size));
  t.count.resize(static_cast<size_t>(out_size));
  t.weights_f64.assign(static_cast<size_t>(out_size * t.ksize), 0.0);
  double wt_max = 0.0;
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    // Truncation toward zero, as the reference's integer casts.
    const int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    int64_t n = std::min(static_cast<int64_t>(center + support + 0.5), in_size) - xmin;
    n = std::clamp(n, int64_t{0}, t.ksize);
    double* w = &t.weights_f64[static_cast<size_t>(i * t.ksize)];
    double total = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      w[j] = bicubic_aa_filter((static_cast<double>(j + xmin) - center + 0.5) * invscale);
      total += w[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < n; ++j) {
        w[j] /= total;
        wt_max = std::max(wt_max, w[j]);
      }
    }
    t.first[static_cast<size_t>(i)] = xmin;
    t.count[static_cast<size_t>(i)] = n;
  }
  // The most fractional bits that keep 2x the largest weight inside int16.
  int p = 0;
  for (; p < 22; ++p) {
    const int next = static_cast<int>(0.5 + wt_max * static_cast<double>(int64_t{1} << (p + 1)));
    if (next >= (1 << 15)) break;
  }
  t.precision = p;
  t.weights.resize(t.weights_f64.size());
  const double one = static_cast<double>(int64_t{1} << p);
  for (size_t k = 0; k < t.weights.size(); ++k) {
    const double v = t.weights_f64[k] * one;
    t.weights[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v)
                                              : static_cast<int>(0.5 + v));
  }
  return t;
}

namespace {

inline uint8_t fixed_to_u8(int32_t acc, int precision) {
  // Arithmetic shift (floor), then saturate.
  const int32_t v = acc >> precision;
  return static_cast<uint8_t>(std::clamp(v, 0, 255));
}

// One pass over `lines` independent lines: each line has `in` samples `stride_in` apart in the
// source and `out` samples `stride_out` apart in the destination; `inner` contiguous values
// (channels, or a whole row for the vertical pass) share one tap set.
void resample_pass(const uint8_t* src, uint8_t* dst, int64_t lines, int64_t line_stride_in,
                   int64_t line_stride_out, int64_t inner, const BicubicTaps& t) {
  const int32_t half = int32_t{1} << (t.precision - 1);
  for (int64_t l = 0; l < lines; ++l) {
    const uint8_t* s = src + l * line_stride_in;
    uint8_t* d = dst + l * line_stride_out;
    for (int64_t o = 0; o < t.out_size; ++o) {
      const int64_t x0 = t.first[static_cast<size_t>(o)];
      const int64_t n = t.count[static_cast<size_t>(o)];
      const int16_t* w = &t.weights[static_cast<size_t>(o * t.ksize)];
      for (int64_t c = 0; c < inner; ++c) {
        int32_t acc = half;
        for (int64_t j = 0; j < n; ++j) acc += static_cast<int32_t>(s[(x0 + j) * inner + c]) * w[j];
        d[o * inner + c] = fixed_to_u8(acc, t.precision);
      }
    }
  }
}

}  // namespace

Tensor resize_bicubic_aa_u8(const Tensor& hwc, int64_t out_h, int64_t out_w) {
  H3_CHECK(hwc.dtype() == DType::kU8 && hwc.dim() >= 3, ErrorCode::kInvalidArgument,
           "bicubic resize: expected uint8 [..., H, W, C], got ", hwc.desc());
  const int64_t h = hwc.size(-3), w = hwc.size(-2), ch = hwc.size(-1);
  H3_CHECK(h >= 1 && w >= 1 && ch >= 1, ErrorCode::kInvalidArgument,
           "bicubic resize: empty image ", hwc.desc());
  H3_CHECK(out_h >= 1 && out_w >= 1, ErrorCode::kInvalidArgument,
           "bicubic resize: target size ", out_w, "x", out_h, " must be at least 1x1");
  const Tensor src = hwc.to(Device::cpu()).contiguous();
  if (out_h == h && out_w == w) return src;
  const int64_t frames = src.numel() / (h * w * ch);
  Shape shape = src.shape();
  shape[shape.size() - 3] = out_h;
  shape[shape.size() - 2] = out_w;
  Tensor out = Tensor::empty(shape, DType::kU8);
  const uint8_t* s = src.data<uint8_t>();
  uint8_t* d = out.data<uint8_t>();
  // Width pass first (into a uint8 buffer), then the height pass.
  std::vector<uint8_t> mid;
  const uint8_t* rows = s;
  if (out_w != w) {
    const BicubicTaps tw = bicubic_aa_taps(w, out_w);
    uint8_t* dst = out_h == h ? d : nullptr;
    if (!dst) {
      mid.resize(static_cast<size_t>(frames * h * out_w * ch));
      dst = mid.data();
    }
    resample_pass(s, dst, frames * h, w * ch, out_w * ch, ch, tw);
    if (out_h == h) return out;
    rows = dst;
  }
  const BicubicTaps th = bicubic_aa_taps(h, out_h);
  resample_pass(rows, d, frames, h * out_w * ch, out_h * out_w * ch, out_w * ch, th);
  return out;
}

}  // namespace h3::media
