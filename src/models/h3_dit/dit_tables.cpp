#include "models/h3_dit/dit_tables.h"

#include <cmath>

#include "core/status.h"

namespace h3::dit {

std::vector<float> rope_inv_freq(int64_t rope_freq_dim, double theta) {
  H3_CHECK(rope_freq_dim > 0, ErrorCode::kInvalidArgument, "rope_inv_freq: rope_freq_dim must be positive");
  const float dim = static_cast<float>(2 * rope_freq_dim);
  const float base = static_cast<float>(theta);
  std::vector<float> inv(static_cast<size_t>(rope_freq_dim));
  for (int64_t k = 0; k < rope_freq_dim; ++k) {
    const float expo = static_cast<float>(2 * k) / dim;
    inv[static_cast<size_t>(k)] = 1.0f / std::pow(base, expo);
  }
  return inv;
}

Tensor timestep_sinusoid(const std::vector<float>& timesteps, int64_t freq_dim) {
  H3_CHECK(freq_dim > 0 && freq_dim % 2 == 0, ErrorCode::kInvalidArgument,
           "timestep_sinusoid: freq_dim must be positive and even, got ", freq_dim);
  const int64_t half = freq_dim / 2;
  // The Python scalar -ln(10000) is rounded to float32 before the multiply (§2.6, verified).
  const float neg_log_period = static_cast<float>(-std::log(10000.0));
  std::vector<float> freqs(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float expo = (neg_log_period * static_cast<float>(i)) / static_cast<float>(half);
    freqs[static_cast<size_t>(i)] = std::exp(expo);
  }
  const int64_t n = static_cast<int64_t>(timesteps.size());
  std::vector<float> out(static_cast<size_t>(n * freq_dim));
  for (int64_t u = 0; u < n; ++u) {
    float* row = out.data() + u * freq_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = timesteps[static_cast<size_t>(u)] * freqs[static_cast<size_t>(i)];
      row[i] = std::cos(a);
      row[half + i] = std::sin(a);
    }
  }
  return Tensor::from_f32(out, {n, freq_dim});
}

RopeTables rope_tables(const std::vector<double>& positions, int64_t rope_freq_dim, double theta) {
  H3_CHECK(positions.size() % 3 == 0, ErrorCode::kInvalidArgument,
           "rope_tables: positions must hold (t, h, w) triples, got ", positions.size(), " values");
  const std::vector<float> inv = rope_inv_freq(rope_freq_dim, theta);
  const int64_t s = static_cast<int64_t>(positions.size() / 3);
  const int64_t f = rope_freq_dim;
  const int64_t width = 6 * f;
  std::vector<float> c(static_cast<size_t>(s * width)), sn(static_cast<size_t>(s * width));
  for (int64_t r = 0; r < s; ++r) {
    for (int64_t axis = 0; axis < 3; ++axis) {
      const float p = static_cast<float>(positions[static_cast<size_t>(r * 3 + axis)]);
      for (int64_t k = 0; k < f; ++k) {
        const float phi = p * inv[static_cast<size_t>(k)];
        const float cv = std::cos(phi);
        const float sv = std::sin(phi);
        // [phi | phi]: the same angle in both halves of the rotated channels.
        for (int64_t half = 0; half < 2; ++half) {
          const size_t at = static_cast<size_t>(r * width + half * 3 * f + axis * f + k);
          c[at] = cv;
          sn[at] = sv;
        }
      }
    }
  }
  return {Tensor::from_f32(c, {s, width}), Tensor::from_f32(sn, {s, width})};
}

}  // namespace h3::dit
