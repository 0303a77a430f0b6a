// AdaLN modulation and the gated residual, both indexed by row into small per-timestep tables.
// Intermediate results are rounded to the activation dtype where the reference rounds
// (h3_dit_spec.md §2.9): a = R(R(x * R(1 + scale)) + shift), X = R(X + R(gate * branch)).
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

Tensor modulate(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& idx) {
  const int64_t s = x.size(0), c = x.size(1);
  const DType dt = x.dtype();
  const F32 xf(x), sc(scale), sh(shift);
  const std::vector<int64_t> rows = index_values(idx);
  std::vector<float> out(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < s; ++i) {
    const float* xr = xf.data() + i * c;
    const float* scr = sc.data() + rows[i] * c;
    const float* shr = sh.data() + rows[i] * c;
    float* o = out.data() + i * c;
    for (int64_t j = 0; j < c; ++j) {
      o[j] = round_to(round_to(xr[j] * round_to(1.0f + scr[j], dt), dt) + shr[j], dt);
    }
  }
  return store_f32(out.data(), x.shape(), dt);
}

Tensor gated_residual(const Tensor& residual, const Tensor& branch, const Tensor& gate,
                      const Tensor& idx) {
  const int64_t s = residual.size(0), c = residual.size(1);
  const DType dt = residual.dtype();
  const F32 rf(residual), bf(branch), gf(gate);
  const std::vector<int64_t> rows = index_values(idx);
  std::vector<float> out(static_cast<size_t>(residual.numel()));
  for (int64_t i = 0; i < s; ++i) {
    const float* rr = rf.data() + i * c;
    const float* br = bf.data() + i * c;
    const float* gr = gf.data() + rows[i] * c;
    float* o = out.data() + i * c;
    for (int64_t j = 0; j < c; ++j) o[j] = round_to(rr[j] + round_to(gr[j] * br[j], dt), dt);
  }
  return store_f32(out.data(), residual.shape(), dt);
}

}  // namespace h3::ops::cpu
