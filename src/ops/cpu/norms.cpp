// rms_norm, layer_norm, group_norm, weight_norm: statistics accumulated in float64 (torch's float32
// reductions are pairwise and land within an ulp of the exact value), normalization in float32, one
// rounding.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

Tensor rms_norm(const Tensor& x, const Tensor* weight, float eps) {
  const int64_t d = x.size(-1);
  const int64_t rows = d ? x.numel() / d : 0;
  const F32 xf(x);
  const std::vector<float> w = widen_optional(weight);
  std::vector<float> out(static_cast<size_t>(x.numel()));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xf.data() + r * d;
    double ss = 0.0;
    for (int64_t j = 0; j < d; ++j) ss += double(xr[j]) * double(xr[j]);
    // h3_dit_spec.md §2.9: x * rsqrt(mean(x^2) + eps) * w in float32, rounded once after w.
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / double(d)) + eps);
    float* o = out.data() + r * d;
    for (int64_t j = 0; j < d; ++j) o[j] = weight ? (xr[j] * inv) * w[j] : xr[j] * inv;
  }
  return store_f32(out.data(), x.shape(), x.dtype());
}

Tensor layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps) {
  const int64_t d = x.size(-1);
  const int64_t rows = d ? x.numel() / d : 0;
  const F32 xf(x);
  const std::vector<float> w = widen_optional(weight);
  const std::vector<float> b = widen_optional(bias);
  std::vector<float> out(static_cast<size_t>(x.numel()));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xf.data() + r * d;
    double sum = 0.0;
    for (int64_t j = 0; j < d; ++j) sum += xr[j];
    const double mean = sum / double(d);
    double var = 0.0;
    for (int64_t j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= double(d);  // biased, as torch
    const float rstd = static_cast<float>(1.0 / std::sqrt(var + double(eps)));
    const float meanf = static_cast<float>(mean);
    float* o = out.data() + r * d;
    for (int64_t j = 0; j < d; ++j) {
      float y = (xr[j] - meanf) * rstd;
      if (weight) y *= w[j];
      if (bias) y += b[j];
      o[j] = y;
    }
  }
  return store_f32(out.data(), x.shape(), x.dtype());
}

Tensor group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps) {
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t spatial = (n && c) ? x.numel() / (n * c) : 0;
  const int64_t cg = c / groups;
  const F32 xf(x);
  const std::vector<float> w = widen_optional(weight);
  const std::vector<float> b = widen_optional(bias);
  std::vector<float> out(static_cast<size_t>(x.numel()));
  const int64_t count = cg * spatial;
  for (int64_t ni = 0; ni < n; ++ni) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t base = (ni * c + g * cg) * spatial;  // the group's channels are contiguous
      const float* xg = xf.data() + base;
      double sum = 0.0;
      for (int64_t i = 0; i < count; ++i) sum += xg[i];
      const double mean = count ? sum / double(count) : 0.0;
      double var = 0.0;
      for (int64_t i = 0; i < count; ++i) var += (xg[i] - mean) * (xg[i] - mean);
      var = count ? var / double(count) : 0.0;
      const float rstd = static_cast<float>(1.0 / std::sqrt(var + double(eps)));
      const float meanf = static_cast<float>(mean);
      for (int64_t ci = 0; ci < cg; ++ci) {
        const int64_t ch = g * cg + ci;
        const float* xs = xg + ci * spatial;
        float* o = out.data() + base + ci * spatial;
        for (int64_t s = 0; s < spatial; ++s) {
          float y = (xs[s] - meanf) * rstd;
          if (weight) y *= w[ch];
          if (bias) y += b[ch];
          o[s] = y;
        }
      }
    }
  }
  return store_f32(out.data(), x.shape(), x.dtype());
}

namespace {

// The fold in float32, v's shape; it reads all of v before the caller writes anything.
std::vector<float> fold_f32(const Tensor& g, const Tensor& v) {
  const F32 gf(g), vf(v);
  const int64_t rows = v.size(0);
  const int64_t inner = v.numel() / rows;
  std::vector<float> out(static_cast<size_t>(v.numel()));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = vf.data() + r * inner;
    // Each term is exact in float64 (a float32 square); the sum is taken in index order.
    double ss = 0.0;
    for (int64_t i = 0; i < inner; ++i) ss += static_cast<double>(src[i]) * src[i];
    const float norm = static_cast<float>(std::sqrt(ss));
    // torch: v * (g / norm_except_dim(v, 2, 0)), each step in float32.
    const float s = gf[r] / norm;
    float* dst = out.data() + r * inner;
    for (int64_t i = 0; i < inner; ++i) dst[i] = src[i] * s;
  }
  return out;
}

}  // namespace

Tensor weight_norm(const Tensor& g, const Tensor& v) {
  const std::vector<float> out = fold_f32(g, v);
  return store_f32(out.data(), v.shape(), v.dtype());
}

void weight_norm_into(Tensor& dst, const Tensor& g, const Tensor& v) {
  const std::vector<float> out = fold_f32(g, v);  // dst may be v: written only now
  std::copy(out.begin(), out.end(), dst.data<float>());
}

}  // namespace h3::ops::cpu
