// Backend-ops cases: silu, gelu (erf and tanh), swiglu, snake and snake_beta against float64.
#include <cmath>
#include <numbers>
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

double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }

void add_unary(const std::string& op, const Shape& shape, DType t, bool large = false) {
  OpCase c;
  c.op = op == "gelu_tanh" ? "gelu" : op;
  c.name = op + "_" + dtype_tag(t) + "_" + shape_tag(shape);
  c.dtype = t;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    // A lone element stays away from the far negative tail, where gelu underflows in fp16.
    if (shape_numel(shape) == 1) return std::vector<Tensor>{r.uniform_tensor(shape, t, 0.5f, 2.0f)};
    return std::vector<Tensor>{r.normal_tensor(shape, t, 0.0f, 3.0f)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    if (op == "silu") return h3::ops::silu(in[0]);
    if (op == "swiglu") return h3::ops::swiglu(in[0]);
    return h3::ops::gelu(in[0], op == "gelu_tanh");
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]);
    std::vector<double> y;
    if (op == "swiglu") {
      const int64_t f2 = shape.back(), f = f2 / 2, rows = in[0].numel() / f2;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < f; ++j) y.push_back(x[r * f2 + j] * silu_ref(x[r * f2 + f + j]));
      return y;
    }
    for (double v : x) {
      if (op == "silu") {
        y.push_back(silu_ref(v));
      } else if (op == "gelu") {
        y.push_back(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
      } else {
        const double k = std::sqrt(2.0 / std::numbers::pi);
        y.push_back(0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v))));
      }
    }
    return y;
  };
  register_case(std::move(c));
}

void add_snake(bool beta, const Shape& shape, DType t) {
  OpCase c;
  c.op = beta ? "snake_beta" : "snake";
  c.name = c.op + "_" + dtype_tag(t) + "_" + shape_tag(shape);
  c.dtype = t;
  const int64_t ch = shape[1];
  c.make_inputs = [=](Rng& r) {
    std::vector<Tensor> in = {r.normal_tensor(shape, t, 0.0f, 2.0f)};
    if (beta) {
      in.push_back(r.normal_tensor({ch}, DType::kF32, 0.0f, 0.5f));  // log alpha
      in.push_back(r.normal_tensor({ch}, DType::kF32, 0.0f, 0.5f));  // log beta
    } else {
      in.push_back(r.uniform_tensor({ch}, DType::kF32, 0.2f, 2.0f));  // raw alpha
    }
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return beta ? h3::ops::snake_beta(in[0], in[1], in[2]) : h3::ops::snake(in[0], in[1]);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), a = f64(in[1]);
    const std::vector<double> b = beta ? f64(in[2]) : a;
    const int64_t l = shape[2];
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t cc = (static_cast<int64_t>(i) / l) % ch;
      const double al = beta ? std::exp(a[cc]) : a[cc];
      const double be = beta ? std::exp(b[cc]) : a[cc];
      const double s = std::sin(al * x[i]);
      y[i] = x[i] + s * s / (be + 1e-9);
    }
    return y;
  };
  register_case(std::move(c));
}

void add_cases() {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const char* op : {"silu", "gelu", "gelu_tanh"}) {
      add_unary(op, {7, 33}, t);
      add_unary(op, {1}, t);
    }
    add_unary("swiglu", {13, 2 * 128}, t);  // tiny DiT ffn 256 -> 128
    add_unary("swiglu", {3, 5, 2 * 17}, t);
    add_snake(false, {2, 6, 50}, t);
    add_snake(true, {2, 8, 41}, t);
  }
  add_unary("swiglu", {4096, 2 * 2048}, DType::kBF16, /*large=*/true);
  add_unary("gelu_tanh", {4096, 1024}, DType::kBF16, /*large=*/true);
}
H3_OPS_CASES(add_cases);

}  // namespace
}  // namespace h3::test::ops
