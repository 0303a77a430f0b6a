// add, mul (b broadcast over the leading dims of a), scale and cast.
#include <algorithm>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/random_fill.h"

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

void fill_random(Tensor& x, uint64_t seed, float center, float half_width) {
  const int64_t n = x.numel();
  auto value = [&](int64_t i) {
    return random_fill_value(seed, static_cast<uint64_t>(i), center, half_width);
  };
  H3_CHECK(x.dtype() == DType::kF32 || x.dtype() == DType::kBF16 || x.dtype() == DType::kF16,
           ErrorCode::kUnsupported, "ops::fill_random: dtype ", dtype_name(x.dtype()),
           " is not filled on the CPU");
  // Each value depends on its index only, so the split changes no byte. A streamed model's host
  // layers at released size are billions of values (random-weight benchmarks fill them here).
  constexpr int64_t kPerPart = int64_t{1} << 20;
  const int64_t parts = std::clamp<int64_t>(n / kPerPart, 1, cpu_threads());
  const int64_t chunk = (n + parts - 1) / parts;
  parallel_for(parts, [&](int64_t part) {
    const int64_t lo = part * chunk, hi = std::min(n, lo + chunk);
    switch (x.dtype()) {
      case DType::kF32: {
        float* p = x.data<float>();
        for (int64_t i = lo; i < hi; ++i) p[i] = value(i);
        break;
      }
      case DType::kBF16: {
        uint16_t* p = static_cast<uint16_t*>(x.raw());
        for (int64_t i = lo; i < hi; ++i) p[i] = f32_to_bf16(value(i));
        break;
      }
      default: {
        uint16_t* p = static_cast<uint16_t*>(x.raw());
        for (int64_t i = lo; i < hi; ++i) p[i] = f16_from_f32(value(i));
        break;
      }
    }
  });
}

Tensor cast(const Tensor& x, DType dtype) {
  // copy_from converts with round-to-nearest-even (float) or by value (integers), any layout.
  Tensor out = Tensor::empty(x.shape(), dtype);
  out.copy_from(x);
  return out;
}

}  // namespace h3::ops::cpu
