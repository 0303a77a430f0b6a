// Rotate-half (NeoX-style) RoPE on the first rotary_dim channels of each head.
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int rotary_dim) {
  const int64_t s = x.size(0), h = x.size(1), d = x.size(2);
  const int64_t r = rotary_dim, half = r / 2;
  const DType dt = x.dtype();
  const F32 xf(x), cf(cos), sf(sin);
  std::vector<float> out(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < s; ++i) {
    const float* c = cf.data() + i * r;
    const float* sn = sf.data() + i * r;
    for (int64_t hh = 0; hh < h; ++hh) {
      const float* xr = xf.data() + (i * h + hh) * d;
      float* o = out.data() + (i * h + hh) * d;
      // h3_dit_spec.md §2.8: every product is rounded to the activation dtype, then the sum.
      for (int64_t j = 0; j < half; ++j) {
        const float x1 = xr[j], x2 = xr[j + half];
        o[j] = round_to(round_to(x1 * c[j], dt) - round_to(x2 * sn[j], dt), dt);
        o[j + half] = round_to(round_to(x2 * c[j + half], dt) + round_to(x1 * sn[j + half], dt), dt);
      }
      for (int64_t j = r; j < d; ++j) o[j] = xr[j];
    }
  }
  return store_f32(out.data(), x.shape(), dt);
}

}  // namespace h3::ops::cpu
