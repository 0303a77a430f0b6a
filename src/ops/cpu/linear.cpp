// linear and matmul: float32 GEMMs on widened operands, one rounding to the output dtype.
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

namespace {

// y = x W^T (+ b) for the rows [r0, r1) of x [m, k] into out [m, n]: one sgemm whose arguments are
// those of linear() on these rows alone (row-major, lda = ldb = k, ldc = n), so the BLAS sees the
// same call and sums in the same order wherever the rows sit in a larger tensor.
void linear_rows(const float* x, const float* w, const Tensor* bias, int64_t r0, int64_t r1, int64_t n,
                 int64_t k, float* out) {
  const int64_t m = r1 - r0;
  if (m <= 0) return;
  float* o = out + r0 * n;
  if (bias) {
    // Bias first, then C = X W^T + C: the bias is added in float32 before the single rounding.
    const F32 bf(*bias);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) o[i * n + j] = bf[j];
  }
  if (k == 0) return;  // an empty sum: the bias, or the zeros `out` starts as
  sgemm(false, true, m, n, k, 1.0f, x + r0 * k, k, w, k, bias ? 1.0f : 0.0f, o, n);
}

Tensor linear_over(const Tensor& x, const Tensor& w, const Tensor* bias,
                   const std::vector<int64_t>& row_starts) {
  const int64_t k = x.size(-1);
  const int64_t n = w.size(0);
  int64_t m = 1;  // from the leading dimensions: with K = 0 the rows are still there
  for (int d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  const F32 xf(x);
  const F32 wf(w);
  std::vector<float> out(static_cast<size_t>(m * n));
  if (row_starts.empty()) {
    linear_rows(xf.data(), wf.data(), bias, 0, m, n, k, out.data());
  } else {
    for (size_t i = 0; i + 1 < row_starts.size(); ++i)
      linear_rows(xf.data(), wf.data(), bias, row_starts[i], row_starts[i + 1], n, k, out.data());
  }
  Shape shape = x.shape();
  shape.back() = n;
  return store_f32(out.data(), shape, x.dtype());
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias) { return linear_over(x, w, bias, {}); }

Tensor linear_segmented(const Tensor& x, const Tensor& w, const Tensor* bias,
                        const std::vector<int64_t>& row_starts) {
  return linear_over(x, w, bias, row_starts);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  const bool batched_a = a.dim() == 3;
  const int64_t batch = batched_a ? a.size(0) : 1;
  const int64_t m = a.size(-2);
  const int64_t k = a.size(-1);
  const int64_t n = b.size(-1);
  const bool shared_b = b.dim() == 2;
  const F32 af(a);
  const F32 bf(b);
  std::vector<float> out(static_cast<size_t>(batch * m * n));
  if (shared_b) {
    // One GEMM over all batches: [B*M, K] @ [K, N].
    sgemm(false, false, batch * m, n, k, 1.0f, af.data(), k, bf.data(), n, 0.0f, out.data(), n);
  } else {
    for (int64_t bi = 0; bi < batch; ++bi) {
      sgemm(false, false, m, n, k, 1.0f, af.data() + bi * m * k, k, bf.data() + bi * k * n, n, 0.0f,
            out.data() + bi * m * n, n);
    }
  }
  Shape shape = a.shape();
  shape.back() = n;
  return store_f32(out.data(), shape, a.dtype());
}

}  // namespace h3::ops::cpu
