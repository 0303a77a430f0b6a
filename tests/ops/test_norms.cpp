// Backend-ops cases: rms_norm (incl. the per-head QK-norm), layer_norm, group_norm and weight_norm
// against float64 two-pass references.
#include <cmath>
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

// kind 0: rms, 1: layer. Weight/bias optional.
std::vector<double> ref_row_norm(const std::vector<Tensor>& in, int kind, bool w, bool b, double eps) {
  const std::vector<double> x = f64(in[0]);
  const std::vector<double> wv = w ? f64(in[1]) : std::vector<double>();
  const std::vector<double> bv = b ? f64(in[w ? 2 : 1]) : std::vector<double>();
  const int64_t d = in[0].size(-1), rows = in[0].numel() / d;
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * d;
    double mean = 0, m2 = 0;
    for (int64_t j = 0; j < d; ++j) mean += xr[j];
    mean /= d;
    for (int64_t j = 0; j < d; ++j) m2 += kind == 0 ? xr[j] * xr[j] : (xr[j] - mean) * (xr[j] - mean);
    m2 /= d;
    const double inv = 1.0 / std::sqrt(m2 + eps);
    for (int64_t j = 0; j < d; ++j) {
      double v = (kind == 0 ? xr[j] : xr[j] - mean) * inv;
      if (w) v *= wv[j];
      if (b) v += bv[j];
      y[r * d + j] = v;
    }
  }
  return y;
}

void add_rms(const Shape& shape, DType t, bool weight, float eps, bool large = false) {
  OpCase c;
  c.op = "rms_norm";
  c.name = "rms_norm_" + dtype_tag(t) + "_" + shape_tag(shape) + (weight ? "_w" : "_noaffine");
  c.dtype = t;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    std::vector<Tensor> in = {r.normal_tensor(shape, t, 0.3f, 2.0f)};
    if (weight) in.push_back(r.normal_tensor({shape.back()}, t, 1.0f, 0.1f));
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return h3::ops::rms_norm(in[0], weight ? &in[1] : nullptr, eps);
  };
  c.reference = [=](const std::vector<Tensor>& in) { return ref_row_norm(in, 0, weight, false, eps); };
  register_case(std::move(c));
}

void add_layer(const Shape& shape, DType t, bool affine, float eps, bool large = false) {
  OpCase c;
  c.op = "layer_norm";
  c.name = "layer_norm_" + dtype_tag(t) + "_" + shape_tag(shape) + (affine ? "_affine" : "_plain");
  c.dtype = t;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    // A large mean relative to the spread checks that the variance is not computed as E[x^2]-E[x]^2.
    std::vector<Tensor> in = {r.normal_tensor(shape, t, 3.0f, 0.5f)};
    if (affine) {
      in.push_back(r.normal_tensor({shape.back()}, t, 1.0f, 0.1f));
      in.push_back(r.normal_tensor({shape.back()}, t, 0.0f, 0.1f));
    }
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return h3::ops::layer_norm(in[0], affine ? &in[1] : nullptr, affine ? &in[2] : nullptr, eps);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    return ref_row_norm(in, 1, affine, affine, eps);
  };
  register_case(std::move(c));
}

std::vector<double> ref_group_norm(const std::vector<Tensor>& in, int groups, bool affine, double eps) {
  const std::vector<double> x = f64(in[0]);
  const std::vector<double> w = affine ? f64(in[1]) : std::vector<double>();
  const std::vector<double> b = affine ? f64(in[2]) : std::vector<double>();
  const int64_t n = in[0].size(0), c = in[0].size(1), sp = in[0].numel() / (n * c), cg = c / groups;
  std::vector<double> y(x.size());
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t g = 0; g < groups; ++g) {
      double mean = 0, var = 0;
      for (int64_t ch = g * cg; ch < (g + 1) * cg; ++ch)
        for (int64_t s = 0; s < sp; ++s) mean += x[(ni * c + ch) * sp + s];
      mean /= double(cg * sp);
      for (int64_t ch = g * cg; ch < (g + 1) * cg; ++ch)
        for (int64_t s = 0; s < sp; ++s) {
          const double dlt = x[(ni * c + ch) * sp + s] - mean;
          var += dlt * dlt;
        }
      var /= double(cg * sp);
      for (int64_t ch = g * cg; ch < (g + 1) * cg; ++ch)
        for (int64_t s = 0; s < sp; ++s) {
          double v = (x[(ni * c + ch) * sp + s] - mean) / std::sqrt(var + eps);
          if (affine) v = v * w[ch] + b[ch];
          y[(ni * c + ch) * sp + s] = v;
        }
    }
  return y;
}

void add_group(const Shape& shape, int groups, DType t, bool affine, bool large = false) {
  OpCase c;
  c.op = "group_norm";
  c.name = "group_norm_" + dtype_tag(t) + "_" + shape_tag(shape) + "_g" + std::to_string(groups) +
           (affine ? "_affine" : "_plain");
  c.dtype = t;
  c.large = large;
  const float eps = 1e-6f;
  c.make_inputs = [=](Rng& r) {
    std::vector<Tensor> in = {r.normal_tensor(shape, t, 1.0f, 1.5f)};
    if (affine) {
      in.push_back(r.normal_tensor({shape[1]}, t, 1.0f, 0.1f));
      in.push_back(r.normal_tensor({shape[1]}, t, 0.0f, 0.1f));
    }
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return h3::ops::group_norm(in[0], groups, affine ? &in[1] : nullptr, affine ? &in[2] : nullptr, eps);
  };
  c.reference = [=](const std::vector<Tensor>& in) { return ref_group_norm(in, groups, affine, eps); };
  register_case(std::move(c));
}

// The audio VAE's weight-norm fold: g [d0, 1, 1], v [d0, d1, k]. The device must agree with the
// CPU to the last float32 bit but for a norm lying on a rounding boundary (the two float64 sums
// may differ in their last bits): at most an ulp or two of the largest element.
// weight_norm_into: the fold written into float32 `dst`, which is a copy of v itself where v is
// float32 (the loader's in-place fold) and a separate buffer otherwise.
void add_weight_norm(const Shape& v_shape, DType t, bool into = false) {
  OpCase c;
  c.op = into ? "weight_norm_into" : "weight_norm";
  c.name = c.op + "_" + dtype_tag(t) + "_" + shape_tag(v_shape);
  c.dtype = into ? DType::kF32 : t;  // weight_norm_into writes float32 whatever v's dtype
  if (c.dtype == DType::kF32) c.device_bounds = Bounds{2.5e-7, 2.5e-7};
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.uniform_tensor({v_shape[0], 1, 1}, DType::kF32, 0.1f, 2.0f),
                               r.normal_tensor(v_shape, t, 0.0f, 0.05f)};
  };
  if (into) {
    c.run = [](const std::vector<Tensor>& in) {
      if (in[1].dtype() == DType::kF32) {
        Tensor v = h3::ops::copy(in[1]);
        h3::ops::weight_norm_into(v, in[0], v);
        return v;
      }
      Tensor dst = Tensor::empty(in[1].shape(), DType::kF32, in[1].device());
      h3::ops::weight_norm_into(dst, in[0], in[1]);
      return dst;
    };
  } else {
    c.run = [](const std::vector<Tensor>& in) { return h3::ops::weight_norm(in[0], in[1]); };
  }
  c.reference = [](const std::vector<Tensor>& in) {
    const std::vector<double> g = f64(in[0]), v = f64(in[1]);
    const int64_t rows = in[1].size(0), inner = in[1].numel() / rows;
    std::vector<double> y(v.size());
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < inner; ++i) ss += v[r * inner + i] * v[r * inner + i];
      for (int64_t i = 0; i < inner; ++i)
        y[r * inner + i] = v[r * inner + i] * g[r] / std::sqrt(ss);
    }
    return y;
  };
  register_case(std::move(c));
}

void add_cases() {
  add_weight_norm({24, 16, 7}, DType::kF32);  // Conv1d [out, in, k]
  add_weight_norm({16, 8, 9}, DType::kF32);  // ConvTranspose1d [in, out, k]: norm per input channel
  add_weight_norm({1, 64, 7}, DType::kF32);  // conv_post: one output channel
  add_weight_norm({5, 3, 1}, DType::kF32);
  add_weight_norm({3, 1024, 11}, DType::kF32);  // long slices: every thread of a block accumulates
  add_weight_norm({12, 10, 3}, DType::kBF16);
  add_weight_norm({24, 16, 7}, DType::kF32, true);
  add_weight_norm({3, 1024, 11}, DType::kF32, true);
  add_weight_norm({12, 10, 3}, DType::kBF16, true);
  for (DType t : {DType::kF32, DType::kBF16}) {
    add_rms({13, 96}, t, true, 1e-5f);      // DiT block norm (hidden 96)
    add_rms({11, 4, 32}, t, true, 1e-5f);   // per-head QK-norm
    add_rms({7, 2, 64}, t, false, 1e-5f);   // video VAE q/k norm, no affine
    add_rms({5, 33}, t, true, 1e-6f);       // odd width, Qwen eps
    add_rms({1, 1}, t, true, 1e-5f);
    add_layer({9, 32}, t, true, 1e-6f);
    add_layer({6, 4608 / 16}, t, false, 1e-5f);
    add_layer({3, 5, 31}, t, true, 1e-5f);
    add_group({2, 16, 3, 5, 7}, 8, t, true);  // video VAE: GroupNorm(8) over (C/8, T, H, W)
    add_group({1, 12, 10}, 3, t, false);
    add_group({3, 6, 1, 4, 4}, 6, t, true);   // one channel per group
    add_rms({4096, 1024}, t, true, 1e-5f, /*large=*/true);
    add_group({1, 128, 5, 32, 32}, 32, t, true, /*large=*/true);
  }
  add_rms({9, 2, 64}, DType::kF16, true, 1e-5f);
  add_layer({9, 48}, DType::kF16, true, 1e-5f);
}
H3_OPS_CASES(add_cases);

}  // namespace
}  // namespace h3::test::ops
