// Backend-ops cases: rope (partial rotary width), modulate and gated_residual (row-indexed tables)
// against float64 formulas (h3_dit_spec.md §2.8, §2.9).
#include <cmath>
#include <string>

#include "backend_ops.h"
#include "ops/ops.h"

namespace h3::test::ops {
namespace {

void add_rope(int64_t s, int64_t h, int64_t d, int r, DType t, bool large = false) {
  OpCase c;
  c.op = "rope";
  c.name = "rope_" + dtype_tag(t) + "_s" + std::to_string(s) + "_h" + std::to_string(h) + "_d" +
           std::to_string(d) + "_r" + std::to_string(r);
  c.dtype = t;
  c.large = large;
  c.make_inputs = [=](Rng& rng) {
    // Angles as the models build them: position * inverse frequency, halves duplicated.
    std::vector<float> cs(static_cast<size_t>(s * r)), sn(cs.size());
    const std::vector<float> pos = rng.uniform(s, 0.0f, 40.0f);
    for (int64_t i = 0; i < s; ++i)
      for (int j = 0; j < r / 2; ++j) {
        const float a = pos[i] * std::pow(10000.0f, -2.0f * j / r);
        cs[i * r + j] = cs[i * r + j + r / 2] = std::cos(a);
        sn[i * r + j] = sn[i * r + j + r / 2] = std::sin(a);
      }
    return std::vector<Tensor>{rng.normal_tensor({s, h, d}, t), Tensor::from_f32(cs, {s, r}, t),
                               Tensor::from_f32(sn, {s, r}, t)};
  };
  c.run = [=](const std::vector<Tensor>& in) { return h3::ops::rope(in[0], in[1], in[2], r); };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), cs = f64(in[1]), sn = f64(in[2]);
    std::vector<double> y(x);
    const int half = r / 2;
    for (int64_t i = 0; i < s; ++i)
      for (int64_t hh = 0; hh < h; ++hh) {
        const double* xr = x.data() + (i * h + hh) * d;
        double* o = y.data() + (i * h + hh) * d;
        for (int j = 0; j < half; ++j) {
          o[j] = xr[j] * cs[i * r + j] - xr[j + half] * sn[i * r + j];
          o[j + half] = xr[j + half] * cs[i * r + j + half] + xr[j] * sn[i * r + j + half];
        }
      }
    return y;
  };
  register_case(std::move(c));
}

// kind 0: modulate(x, scale, shift, idx); kind 1: gated_residual(residual, branch, gate, idx).
void add_rowwise(int kind, int64_t s, int64_t ch, int64_t tables, DType t, DType table_t, bool i32,
                 bool large = false) {
  OpCase c;
  c.op = kind == 0 ? "modulate" : "gated_residual";
  c.name = c.op + "_" + dtype_tag(t) + "_t" + dtype_tag(table_t) + "_s" + std::to_string(s) + "_c" +
           std::to_string(ch) + "_rows" + std::to_string(tables) + (i32 ? "_i32" : "_i64");
  c.dtype = t;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    if (kind == 0)
      return std::vector<Tensor>{r.normal_tensor({s, ch}, t), r.normal_tensor({tables, ch}, table_t, 0, 0.5f),
                                 r.normal_tensor({tables, ch}, table_t, 0, 0.5f),
                                 r.indices(s, tables, false, i32)};
    return std::vector<Tensor>{r.normal_tensor({s, ch}, t), r.normal_tensor({s, ch}, t),
                               r.normal_tensor({tables, ch}, table_t, 0, 0.5f),
                               r.indices(s, tables, false, i32)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return kind == 0 ? h3::ops::modulate(in[0], in[1], in[2], in[3])
                     : h3::ops::gated_residual(in[0], in[1], in[2], in[3]);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> a = f64(in[0]), b = f64(in[1]), g = f64(in[2]);
    const std::vector<int64_t> idx = in[3].to_i64_vector();
    std::vector<double> y(a.size());
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j < ch; ++j) {
        const int64_t row = idx[i];
        y[i * ch + j] = kind == 0 ? a[i * ch + j] * (1.0 + b[row * ch + j]) + g[row * ch + j]
                                  : a[i * ch + j] + g[row * ch + j] * b[i * ch + j];
      }
    return y;
  };
  register_case(std::move(c));
}

void add_cases() {
  for (DType t : {DType::kF32, DType::kBF16}) {
    add_rope(10, 4, 32, 24, t);   // tiny DiT: 24 of 32 channels rotated
    add_rope(7, 4, 16, 16, t);    // Qwen: full width
    add_rope(9, 2, 64, 48, t);    // video VAE decoder: 48 of 64
    add_rope(1, 1, 2, 2, t);
    add_rope(4096, 8, 128, 96, t, /*large=*/true);
    for (int kind : {0, 1}) {
      add_rowwise(kind, 23, 96, 6, t, t, false);   // tiny DiT: 2 timesteps x 3 tags
      add_rowwise(kind, 5, 7, 1, t, t, true);
      add_rowwise(kind, 4096, 1024, 12, t, t, false, /*large=*/true);
    }
  }
  add_rope(9, 2, 64, 48, DType::kF16);
  add_rowwise(0, 8, 40, 3, DType::kF32, DType::kBF16, false);  // fp32 activations, bf16 tables
  add_rowwise(1, 8, 40, 3, DType::kBF16, DType::kF32, false);  // bf16 activations, fp32 gates
}
H3_OPS_CASES(add_cases);

}  // namespace
}  // namespace h3::test::ops
