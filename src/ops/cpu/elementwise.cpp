// add, mul (b broadcast over the leading dims of a), scale and cast.
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

namespace {
template <typename Fn>
Tensor broadcast_binary(const Tensor& a, const Tensor& b, Fn fn) {
  const F32 af(a), bf(b);
  const int64_t n = af.size(), nb = bf.size();
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i0 = 0; i0 < n; i0 += nb)
    for (int64_t j = 0; j < nb; ++j) out[i0 + j] = fn(af[i0 + j], bf[j]);
  return store_f32(out.data(), a.shape(), a.dtype());
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return broadcast_binary(a, b, [](float x, float y) { return x + y; });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return broadcast_binary(a, b, [](float x, float y) { return x * y; });
}

Tensor scale(const Tensor& x, float s) {
  const F32 xf(x);
  std::vector<float> out(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < xf.size(); ++i) out[i] = xf[i] * s;
  return store_f32(out.data(), x.shape(), x.dtype());
}

Tensor cast(const Tensor& x, DType dtype) {
  // copy_from converts with round-to-nearest-even (float) or by value (integers), any layout.
  Tensor out = Tensor::empty(x.shape(), dtype);
  out.copy_from(x);
  return out;
}

}  // namespace h3::ops::cpu
