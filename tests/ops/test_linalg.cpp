// Backend-ops cases: linear and matmul against naive triple-loop float64 GEMMs.
#include <string>

#include "backend_ops.h"
#include "ops/ops.h"

namespace h3::test::ops {
namespace {

std::vector<double> ref_linear(const std::vector<Tensor>& in, bool has_bias) {
  const std::vector<double> x = f64(in[0]), w = f64(in[1]);
  const std::vector<double> b = has_bias ? f64(in[2]) : std::vector<double>();
  const int64_t k = in[0].size(-1), n = in[1].size(0), m = in[0].numel() / k;
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = has_bias ? b[j] : 0.0;
      for (int64_t kk = 0; kk < k; ++kk) acc += x[i * k + kk] * w[j * k + kk];
      y[i * n + j] = acc;
    }
  return y;
}

void add_linear(const Shape& xshape, int64_t n, DType xt, DType wt, bool bias, bool large = false) {
  OpCase c;
  c.op = "linear";
  std::string dims;
  for (int64_t d : xshape) dims += std::to_string(d) + "x";
  c.name = "linear_" + dtype_tag(xt) + "_w" + dtype_tag(wt) + "_x" + dims + "n" + std::to_string(n) +
           (bias ? "_bias" : "");
  c.dtype = xt;
  c.large = large;
  const int64_t k = xshape.back();
  c.make_inputs = [=](Rng& r) {
    std::vector<Tensor> in = {r.uniform_tensor(xshape, xt), r.uniform_tensor({n, k}, wt, -0.5f, 0.5f)};
    if (bias) in.push_back(r.uniform_tensor({n}, wt));
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return h3::ops::linear(in[0], in[1], bias ? &in[2] : nullptr);
  };
  c.reference = [=](const std::vector<Tensor>& in) { return ref_linear(in, bias); };
  register_case(std::move(c));
}

std::vector<double> ref_matmul(const std::vector<Tensor>& in) {
  const std::vector<double> a = f64(in[0]), b = f64(in[1]);
  const int64_t batch = in[0].dim() == 3 ? in[0].size(0) : 1;
  const int64_t m = in[0].size(-2), k = in[0].size(-1), n = in[1].size(-1);
  const bool shared = in[1].dim() == 2;
  std::vector<double> y(static_cast<size_t>(batch * m * n));
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t kk = 0; kk < k; ++kk)
          acc += a[(bi * m + i) * k + kk] * b[(shared ? 0 : bi * k * n) + kk * n + j];
        y[(bi * m + i) * n + j] = acc;
      }
  return y;
}

void add_matmul(const Shape& ashape, const Shape& bshape, DType t, bool large = false) {
  OpCase c;
  c.op = "matmul";
  std::string dims;
  for (int64_t d : ashape) dims += std::to_string(d) + "x";
  dims += "_";
  for (int64_t d : bshape) dims += std::to_string(d) + "x";
  c.name = "matmul_" + dtype_tag(t) + "_" + dims;
  c.dtype = t;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.uniform_tensor(ashape, t), r.uniform_tensor(bshape, t)};
  };
  c.run = [](const std::vector<Tensor>& in) { return h3::ops::matmul(in[0], in[1]); };
  c.reference = ref_matmul;
  register_case(std::move(c));
}

void add_cases() {
  for (DType t : {DType::kF32, DType::kBF16}) {
    add_linear({1, 1}, 1, t, t, false);
    add_linear({7, 33}, 13, t, t, true);
    add_linear({64, 96}, 96, t, t, true);
    add_linear({2, 5, 40}, 256, t, t, false);
    add_linear({3, 1000}, 17, t, t, true);  // long K: accumulation error
    add_matmul({3, 7, 9}, {3, 9, 5}, t);
    add_matmul({2, 16, 33}, {33, 24}, t);
    add_matmul({5, 11}, {11, 6}, t);
    add_linear({512, 1024}, 1536, t, t, true, /*large=*/true);
    add_matmul({8, 256, 128}, {8, 128, 256}, t, /*large=*/true);
  }
  // Mixed storage: fp32 activations with bf16 weights (the DiT's fp32 islands read bf16 params),
  // bf16 activations with fp32 weights, and fp16 (the video VAE decoder under autocast).
  add_linear({9, 24}, 96, DType::kF32, DType::kBF16, true);
  add_linear({9, 32}, 20, DType::kBF16, DType::kF32, true);
  add_linear({10, 48}, 30, DType::kF16, DType::kF16, true);
}
H3_OPS_CASES(add_cases);

}  // namespace
}  // namespace h3::test::ops
