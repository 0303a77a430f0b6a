// Backend-ops cases: linear, linear_segmented and matmul against naive triple-loop float64 GEMMs;
// and linear_segmented's CPU guarantee (each segment bit for bit its own linear()).
#include <gtest/gtest.h>

#include <string>

#include "backend_ops.h"
#include "ops/ops.h"
#include "support/golden.h"

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

void add_linear_segmented(const Shape& xshape, int64_t n, const std::vector<int64_t>& starts, DType t) {
  OpCase c;
  c.op = "linear_segmented";
  std::string dims, segs;
  for (int64_t d : xshape) dims += std::to_string(d) + "x";
  for (size_t i = 1; i < starts.size(); ++i) {
    segs += '_';
    segs += std::to_string(starts[i] - starts[i - 1]);
  }
  c.name = "linear_segmented_" + dtype_tag(t) + "_x" + dims + "n" + std::to_string(n) + "_seg" + segs;
  c.dtype = t;
  const int64_t k = xshape.back();
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.uniform_tensor(xshape, t), r.uniform_tensor({n, k}, t, -0.5f, 0.5f),
                               r.uniform_tensor({n}, t)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return h3::ops::linear_segmented(in[0], in[1], &in[2], starts);
  };
  c.reference = [=](const std::vector<Tensor>& in) { return ref_linear(in, true); };
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

// residual + x w^T, the LoRA pair's second GEMM with its sum (a thin K, a wide N).
void add_linear_residual(const Shape& xshape, int64_t n, DType xt, DType wt) {
  OpCase c;
  c.op = "linear_residual";
  std::string dims;
  for (int64_t d : xshape) dims += std::to_string(d) + "x";
  c.name = "linear_residual_" + dtype_tag(xt) + "_w" + dtype_tag(wt) + "_x" + dims + "n" +
           std::to_string(n);
  c.dtype = xt;
  const int64_t k = xshape.back();
  Shape rshape = xshape;
  rshape.back() = n;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.uniform_tensor(xshape, xt),
                               r.uniform_tensor({n, k}, wt, -0.5f, 0.5f),
                               r.uniform_tensor(rshape, xt, -2.0f, 2.0f)};
  };
  c.run = [](const std::vector<Tensor>& in) {
    return h3::ops::linear_residual(in[0], in[1], in[2]);
  };
  c.reference = [](const std::vector<Tensor>& in) {
    std::vector<double> y = ref_linear(in, false);
    const std::vector<double> res = f64(in[2]);
    for (size_t i = 0; i < y.size(); ++i) y[i] += res[i];
    return y;
  };
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
  add_linear_segmented({70, 24}, 40, {0, 1, 8, 8, 70}, DType::kF32);
  add_linear_segmented({3, 20, 16}, 24, {0, 20, 60}, DType::kBF16);
  add_linear_segmented({33, 48}, 30, {0, 33}, DType::kF16);
  // Mixed storage: fp32 activations with bf16 weights (the DiT's fp32 islands read bf16 params),
  // bf16 activations with fp32 weights, and fp16 (the video VAE decoder under autocast).
  add_linear({9, 24}, 96, DType::kF32, DType::kBF16, true);
  add_linear({9, 32}, 20, DType::kBF16, DType::kF32, true);
  add_linear({10, 48}, 30, DType::kF16, DType::kF16, true);
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    add_linear_residual({37, 16}, 96, t, t);
    add_linear_residual({2, 9, 64}, 40, t, t);
  }
  add_linear_residual({11, 8}, 24, DType::kBF16, DType::kF32);  // mixed: the composition
}
H3_OPS_CASES(add_cases);

// What linear_segmented guarantees on the CPU, whatever the BLAS: every segment's rows come out bit
// for bit as linear() of those rows alone (the same GEMM call), while linear() over all rows may sum
// in another order (OpenBLAS picks kernels and blocking per shape: the rows of a segment inside a
// larger GEMM are not guaranteed their own bits, and on some kernels they differ in the last bit).
TEST(LinearSegmented, EachSegmentIsItsOwnLinearOnCpu) {
  Rng r(2024);
  const std::vector<int64_t> starts = {0, 1, 7, 7, 71, 300, 301, 1500};
  for (DType t : {DType::kF32, DType::kF16}) {
    const Tensor x = r.uniform_tensor({starts.back(), 96}, t);
    const Tensor w = r.uniform_tensor({80, 96}, t, -0.5f, 0.5f);
    const Tensor b = r.uniform_tensor({80}, t);
    const Tensor all = h3::ops::linear_segmented(x, w, &b, starts);
    int64_t bad = 0;
    for (size_t i = 0; i + 1 < starts.size(); ++i) {
      const Tensor rows = x.slice(0, starts[i], starts[i + 1]).contiguous();
      const Tensor alone = h3::ops::linear(rows, w, &b);
      bad += h3::test::count_bit_mismatches(all.slice(0, starts[i], starts[i + 1]).contiguous(), alone);
    }
    std::printf("linear_segmented %s: %zu segments, %lld values differ from their own linear()\n",
                dtype_tag(t).c_str(), starts.size() - 1, static_cast<long long>(bad));
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
}  // namespace h3::test::ops
