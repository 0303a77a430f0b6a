// Activations: silu, swiglu, gelu (erf and tanh), and the audio VAE's snake / snake_beta.
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

namespace {
// h3_dit_spec.md §2.11: silu in float32 as g / (1 + expf(-g)).
inline float silu_f32(float g) { return g / (1.0f + std::exp(-g)); }
}  // namespace

Tensor silu(const Tensor& x) {
  const F32 xf(x);
  std::vector<float> out(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < xf.size(); ++i) out[i] = silu_f32(xf[i]);
  return store_f32(out.data(), x.shape(), x.dtype());
}

Tensor swiglu(const Tensor& x) {
  const int64_t f2 = x.size(-1), f = f2 / 2;
  const int64_t rows = f2 ? x.numel() / f2 : 0;
  const DType dt = x.dtype();
  const F32 xf(x);
  std::vector<float> out(static_cast<size_t>(rows * f));
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = xf.data() + r * f2;
    const float* g = v + f;
    float* o = out.data() + r * f;
    // value * R(silu(gate)), rounded again: the reference's two bf16 ops.
    for (int64_t j = 0; j < f; ++j) o[j] = round_to(v[j] * round_to(silu_f32(g[j]), dt), dt);
  }
  Shape shape = x.shape();
  shape.back() = f;
  return store_f32(out.data(), shape, dt);
}

Tensor gelu(const Tensor& x, bool tanh_approx) {
  const F32 xf(x);
  std::vector<float> out(static_cast<size_t>(x.numel()));
  // Evaluated in float64 and rounded once: within half an ulp of the float32 result.
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  constexpr double kInvSqrt2 = 0.7071067811865476;
  for (int64_t i = 0; i < xf.size(); ++i) {
    const double v = xf[i];
    const double y = tanh_approx ? 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v)))
                                 : 0.5 * v * (1.0 + std::erf(v * kInvSqrt2));
    out[i] = static_cast<float>(y);
  }
  return store_f32(out.data(), x.shape(), x.dtype());
}

namespace {
// x + 1/(b + 1e-9) * sin(a*x)^2 per channel, in the reference's float32 operation order.
Tensor snake_impl(const Tensor& x, const std::vector<float>& a, const std::vector<float>& b) {
  const int64_t n = x.size(0), c = x.size(1), l = x.size(2);
  const F32 xf(x);
  std::vector<float> out(static_cast<size_t>(x.numel()));
  for (int64_t ni = 0; ni < n; ++ni) {
    for (int64_t ci = 0; ci < c; ++ci) {
      const float inv = 1.0f / (b[ci] + 1e-9f);
      const float* xr = xf.data() + (ni * c + ci) * l;
      float* o = out.data() + (ni * c + ci) * l;
      for (int64_t i = 0; i < l; ++i) {
        const float s = std::sin(xr[i] * a[ci]);
        o[i] = xr[i] + inv * (s * s);
      }
    }
  }
  return store_f32(out.data(), x.shape(), x.dtype());
}
}  // namespace

Tensor snake(const Tensor& x, const Tensor& alpha) {
  const std::vector<float> a = widen_optional(&alpha);
  return snake_impl(x, a, a);
}

Tensor snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta) {
  std::vector<float> a = widen_optional(&log_alpha);
  std::vector<float> b = widen_optional(&log_beta);
  for (float& v : a) v = std::exp(v);
  for (float& v : b) v = std::exp(v);
  return snake_impl(x, a, b);
}

}  // namespace h3::ops::cpu
