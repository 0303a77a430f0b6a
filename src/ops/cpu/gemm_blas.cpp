// Float32 GEMM through OpenBLAS (the CPU oracle's heavy lifting), one thread per call: the ops
// split work over their own threads (parallel_for).
#include <cblas.h>

#include <climits>

#include "core/status.h"
#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

namespace {
// Set before main: OpenBLAS reads OPENBLAS_NUM_THREADS when it loads, and a pool of more than one
// thread spins between calls.
[[maybe_unused]] const bool kSerialBlas = [] {
  openblas_set_num_threads(1);
  return true;
}();
}  // namespace

void sgemm_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                  int64_t ldc) {
  if (m == 0 || n == 0) return;
  // CBLAS takes int sizes; anything larger must be split by the caller.
  for (int64_t v : {m, n, k, lda, ldb, ldc}) {
    H3_CHECK(v <= INT_MAX, ErrorCode::kUnsupported, "sgemm: dimension ", v,
             " exceeds the BLAS int range");
  }
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace h3::ops::cpu
