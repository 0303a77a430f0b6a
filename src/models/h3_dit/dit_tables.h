// Small host-side tables of the DiT forward: the timestep sinusoid (h3_dit_spec.md §2.6) and the
// 3-axis RoPE frequencies and cos/sin tables (§2.8). They are a few KB per forward, built on the
// host in float32 exactly as the reference builds them, then moved to the device of the weights.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace h3::dit {

// inv_freq[k] = 1 / theta^(2k / 2F) for k in [0, F), in float32 (§2.8): the exponent is the
// float32 quotient f32(2k) / f32(2F) and the power is a float32 pow.
std::vector<float> rope_inv_freq(int64_t rope_freq_dim, double theta);

// Sinusoidal timestep embedding of unscaled t (§2.6): e_i = exp(f32(-ln 1e4) * i / half),
// a = f32(t * e_i), out = [cos(a) | sin(a)] (cosine first). CPU float32 [N, freq_dim].
Tensor timestep_sinusoid(const std::vector<float>& timesteps, int64_t freq_dim);

struct RopeTables {
  Tensor cos;  // CPU float32 [S, 6F]: [phi | phi] with phi = [t*inv | h*inv | w*inv]
  Tensor sin;
};
// positions: S rows of (t, h, w), float64 as the pipeline computes them; each is rounded to
// float32 before the product with inv_freq (§2.8, §8 item 8).
RopeTables rope_tables(const std::vector<double>& positions, int64_t rope_freq_dim, double theta);

}  // namespace h3::dit
