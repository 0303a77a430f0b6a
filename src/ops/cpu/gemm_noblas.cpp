// Portable float32 GEMM for builds without OpenBLAS: op(A) and op(B) are packed into row-major
// panels, then a cache-blocked i-k-j loop runs over them (float32 accumulation, like sgemm).
#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

namespace {
constexpr int64_t kBlockM = 64;
constexpr int64_t kBlockK = 256;
}  // namespace

void sgemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
  }
  if (k == 0) return;
  std::vector<float> bp(static_cast<size_t>(std::min(k, kBlockK) * n));
  std::vector<float> acc(static_cast<size_t>(n));
  for (int64_t k0 = 0; k0 < k; k0 += kBlockK) {
    const int64_t kb = std::min(kBlockK, k - k0);
    // Pack op(B)[k0:k0+kb, :] row-major so the inner loop streams contiguous memory.
    for (int64_t kk = 0; kk < kb; ++kk)
      for (int64_t j = 0; j < n; ++j)
        bp[kk * n + j] = trans_b ? b[j * ldb + (k0 + kk)] : b[(k0 + kk) * ldb + j];
    for (int64_t i0 = 0; i0 < m; i0 += kBlockM) {
      const int64_t ib = std::min(kBlockM, m - i0);
      for (int64_t i = i0; i < i0 + ib; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t kk = 0; kk < kb; ++kk) {
          const float av = trans_a ? a[(k0 + kk) * lda + i] : a[i * lda + (k0 + kk)];
          const float* brow = bp.data() + kk * n;
          for (int64_t j = 0; j < n; ++j) acc[j] += av * brow[j];
        }
        float* row = c + i * ldc;
        for (int64_t j = 0; j < n; ++j) row[j] += alpha * acc[j];
      }
    }
  }
}

}  // namespace h3::ops::cpu
