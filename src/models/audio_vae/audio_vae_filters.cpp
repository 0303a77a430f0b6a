#include "models/audio_vae/audio_vae_filters.h"

#include <cmath>
#include <numbers>

#include "core/status.h"

namespace h3::audio_vae {
namespace {

// Modified Bessel function of the first kind, order 0, by its power series
// sum_k ((x/2)^k / k!)^2; converges for every finite x (about 20 terms for x ~ 5).
double bessel_i0(double x) {
  const double q = 0.25 * x * x;
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 500; ++k) {
    term *= q / (static_cast<double>(k) * static_cast<double>(k));
    sum += term;
    if (term < sum * 1e-17) break;
  }
  return sum;
}

}  // namespace

double kaiser_beta(double half_width, int64_t kernel_size) {
  const int64_t half_size = kernel_size / 2;
  const double attenuation =
      2.285 * static_cast<double>(half_size - 1) * std::numbers::pi * (4.0 * half_width) + 7.95;
  if (attenuation > 50.0) return 0.1102 * (attenuation - 8.7);
  if (attenuation >= 21.0)
    return 0.5842 * std::pow(attenuation - 21.0, 0.4) + 0.07886 * (attenuation - 21.0);
  return 0.0;
}

std::vector<double> kaiser_window(int64_t n, double beta) {
  H3_CHECK(n >= 1, ErrorCode::kInvalidArgument, "kaiser_window: need at least one point, got ", n);
  std::vector<double> w(static_cast<size_t>(n), 1.0);
  if (n == 1) return w;
  const double a = static_cast<double>(n - 1) / 2.0;
  const double norm = bessel_i0(beta);
  for (int64_t i = 0; i < n; ++i) {
    const double r = (static_cast<double>(i) - a) / a;
    w[static_cast<size_t>(i)] = bessel_i0(beta * std::sqrt(std::abs(1.0 - r * r))) / norm;
  }
  return w;
}

std::vector<float> kaiser_sinc_filter1d(double cutoff, double half_width, int64_t kernel_size) {
  H3_CHECK(kernel_size >= 1 && kernel_size <= 4096, ErrorCode::kInvalidArgument,
           "kaiser_sinc_filter1d: kernel_size must be in [1, 4096], got ", kernel_size);
  H3_CHECK(cutoff > 0.0 && cutoff <= 0.5, ErrorCode::kInvalidArgument,
           "kaiser_sinc_filter1d: cutoff must be in (0, 0.5], got ", cutoff);
  const std::vector<double> window = kaiser_window(kernel_size, kaiser_beta(half_width, kernel_size));
  const int64_t half_size = kernel_size / 2;
  const bool even = kernel_size % 2 == 0;
  std::vector<double> h(static_cast<size_t>(kernel_size));
  double sum = 0.0;
  for (int64_t i = 0; i < kernel_size; ++i) {
    const double t = static_cast<double>(i - half_size) + (even ? 0.5 : 0.0);
    const double x = 2.0 * cutoff * t;
    const double sinc = x == 0.0 ? 1.0 : std::sin(std::numbers::pi * x) / (std::numbers::pi * x);
    h[static_cast<size_t>(i)] = 2.0 * cutoff * window[static_cast<size_t>(i)] * sinc;
    sum += h[static_cast<size_t>(i)];
  }
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = static_cast<float>(h[i] / sum);
  return out;
}

std::vector<float> alias_free_filter() {
  return kaiser_sinc_filter1d(0.5 / static_cast<double>(kAliasRatio),
                              0.6 / static_cast<double>(kAliasRatio), kAliasFilterTaps);
}

}  // namespace h3::audio_vae
