// Backend-ops cases: add and mul (broadcast over leading dims), scale, cast, fill_random and
// fill_random_many.
#include <cmath>
#include <cstdint>
#include <string>

#include "backend_ops.h"
#include "ops/ops.h"

namespace h3::test::ops {
namespace {

std::string shape_tag(const Shape& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += "x";
    out += std::to_string(s[i]);
  }
  return out;
}

void add_binary(bool is_mul, const Shape& a, const Shape& b, DType ta, DType tb, bool large = false) {
  OpCase c;
  c.op = is_mul ? "mul" : "add";
  c.name = c.op + "_" + dtype_tag(ta) + "_" + dtype_tag(tb) + "_" + shape_tag(a) + "_by_" + shape_tag(b);
  c.dtype = ta;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.normal_tensor(a, ta), r.normal_tensor(b, tb)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return is_mul ? h3::ops::mul(in[0], in[1]) : h3::ops::add(in[0], in[1]);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), y = f64(in[1]);
    std::vector<double> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = y[i % y.size()];
      out[i] = is_mul ? x[i] * v : x[i] + v;
    }
    return out;
  };
  register_case(std::move(c));
}

void add_scale(const Shape& shape, DType t, float s) {
  OpCase c;
  c.op = "scale";
  c.name = "scale_" + dtype_tag(t) + "_" + shape_tag(shape);
  c.dtype = t;
  c.make_inputs = [=](Rng& r) { return std::vector<Tensor>{r.normal_tensor(shape, t)}; };
  c.run = [=](const std::vector<Tensor>& in) { return h3::ops::scale(in[0], s); };
  c.reference = [=](const std::vector<Tensor>& in) {
    std::vector<double> x = f64(in[0]);
    for (double& v : x) v *= double(s);
    return x;
  };
  register_case(std::move(c));
}

// Independent round-to-nearest-even to `bits` significant bits (normal range only), through
// frexp/nearbyint rather than the bit tricks of core/dtype.
double round_significand(double v, int bits) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  const double m = std::frexp(v, &e);  // v = m * 2^e, 0.5 <= |m| < 1
  return std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits);
}

void add_cast(DType from, DType to, const Shape& shape) {
  OpCase c;
  c.op = "cast";
  c.name = "cast_" + dtype_tag(from) + "_to_" + dtype_tag(to) + "_" + shape_tag(shape);
  c.dtype = to;
  c.cpu_bounds = Bounds{0, 0};     // rounding is exact arithmetic: bit equality
  c.device_bounds = Bounds{0, 0};
  c.make_inputs = [=](Rng& r) { return std::vector<Tensor>{r.normal_tensor(shape, from, 0.0f, 10.0f)}; };
  c.run = [=](const std::vector<Tensor>& in) { return h3::ops::cast(in[0], to); };
  c.reference = [=](const std::vector<Tensor>& in) {
    std::vector<double> x = f64(in[0]);
    const int bits = to == DType::kBF16 ? 8 : to == DType::kF16 ? 11 : to == DType::kF32 ? 24 : 53;
    for (double& v : x) v = round_significand(v, bits);
    return x;
  };
  register_case(std::move(c));
}

// fill_random ignores its input's values and must give the same bits on every backend. The
// reference recomputes the documented construction independently: the splitmix64 finalizer of
// (seed, index), its top 24 bits as u, center + half_width * (2u - 1), rounded to the dtype.
uint64_t splitmix_finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void add_fill_random(DType t, const Shape& shape, uint64_t seed, float center, float half) {
  OpCase c;
  c.op = "fill_random";
  c.name = "fill_random_" + dtype_tag(t) + "_" + shape_tag(shape) + "_s" + std::to_string(seed);
  c.dtype = t;
  c.cpu_bounds = Bounds{0, 0};
  c.device_bounds = Bounds{0, 0};
  c.make_inputs = [=](Rng& r) { return std::vector<Tensor>{r.normal_tensor(shape, t)}; };
  c.run = [=](const std::vector<Tensor>& in) {
    Tensor out = h3::ops::copy(in[0]);
    h3::ops::fill_random(out, seed, center, half);
    return out;
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    std::vector<double> out(static_cast<size_t>(in[0].numel()));
    const int bits = t == DType::kBF16 ? 8 : t == DType::kF16 ? 11 : 24;
    for (size_t i = 0; i < out.size(); ++i) {
      const uint64_t h = splitmix_finalize(seed ^ splitmix_finalize(i + 0x9e3779b97f4a7c15ull));
      const double u = std::ldexp(static_cast<double>(h >> 40), -24);
      const double v = static_cast<float>(double(center) + double(half) * (2.0 * u - 1.0));
      out[i] = round_significand(v, bits);
    }
    return out;
  };
  register_case(std::move(c));
}

double fill_reference(uint64_t seed, uint64_t i, float center, float half, int bits) {
  const uint64_t h = splitmix_finalize(seed ^ splitmix_finalize(i + 0x9e3779b97f4a7c15ull));
  const double u = std::ldexp(static_cast<double>(h >> 40), -24);
  const double v = static_cast<float>(double(center) + double(half) * (2.0 * u - 1.0));
  return round_significand(v, bits);
}

// fill_random_many: tensors of sizes around the kernel's per-block chunk (2,048 values), one
// empty, each with its own seed and range; the output is their values one after another.
void add_fill_random_many(DType t) {
  const std::vector<int64_t> sizes = {3000, 0, 1, 2049, 2048, 700};
  OpCase c;
  c.op = "fill_random_many";
  c.name = "fill_random_many_" + dtype_tag(t) + "_x6";
  c.dtype = t;
  c.cpu_bounds = Bounds{0, 0};
  c.device_bounds = Bounds{0, 0};
  c.make_inputs = [=](Rng& r) {
    std::vector<Tensor> in;
    for (int64_t n : sizes) in.push_back(r.normal_tensor({n}, t));
    return in;
  };
  auto fill_of = [](size_t i) {
    return h3::ops::RandomFill{0x51ull * (i + 1), 0.25f * static_cast<float>(i), 0.01f * static_cast<float>(i + 1)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    std::vector<Tensor> xs;
    std::vector<h3::ops::RandomFill> fills;
    for (size_t i = 0; i < in.size(); ++i) {
      xs.push_back(h3::ops::copy(in[i]));
      fills.push_back(fill_of(i));
    }
    h3::ops::fill_random_many(xs, fills);
    std::vector<Tensor> filled;
    for (const Tensor& x : xs)
      if (x.numel() > 0) filled.push_back(x);
    return h3::ops::concat(filled, 0);
  };
  c.reference = [=](const std::vector<Tensor>&) {
    const int bits = t == DType::kBF16 ? 8 : t == DType::kF16 ? 11 : 24;
    std::vector<double> out;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const h3::ops::RandomFill f = fill_of(i);
      for (int64_t j = 0; j < sizes[i]; ++j)
        out.push_back(fill_reference(f.seed, static_cast<uint64_t>(j), f.center, f.half_width, bits));
    }
    return out;
  };
  register_case(std::move(c));
}

void add_cases() {
  add_fill_random_many(DType::kF32);
  add_fill_random_many(DType::kBF16);
  add_fill_random(DType::kF32, {17, 33}, 7, 0.0f, 0.03125f);
  add_fill_random(DType::kBF16, {5, 129}, 0x1234abcdull, 1.0f, 0.1f);
  add_fill_random(DType::kF16, {1000}, 3, -0.5f, 0.02f);
  // Past the CPU op's split over threads (2^20 values a part), with a ragged last part: the
  // split must not change a value.
  add_fill_random(DType::kBF16, {3, 1048577}, 11, 0.0f, 0.01f);
  add_fill_random(DType::kF32, {2097153}, 12, 1.0f, 0.05f);
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (bool m : {false, true}) {
      add_binary(m, {5, 7}, {5, 7}, t, t);
      add_binary(m, {4, 3, 33}, {33}, t, t);     // per-channel vector
      add_binary(m, {6, 2, 8}, {2, 8}, t, t);
      add_binary(m, {1024, 2048}, {2048}, t, t, /*large=*/true);
    }
    add_scale({9, 31}, t, 0.125f);
    add_scale({3}, t, -3.7f);
  }
  add_binary(false, {4, 16}, {16}, DType::kF32, DType::kBF16);
  add_binary(true, {4, 16}, {4, 16}, DType::kF16, DType::kF16);
  add_cast(DType::kF32, DType::kBF16, {7, 129});
  add_cast(DType::kF32, DType::kF16, {7, 129});
  add_cast(DType::kBF16, DType::kF32, {33});
  add_cast(DType::kF16, DType::kF32, {33});
  add_cast(DType::kBF16, DType::kF16, {65});
}
H3_OPS_CASES(add_cases);

}  // namespace
}  // namespace h3::test::ops
