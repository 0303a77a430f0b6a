// conv1d / conv_transpose1d with float64 accumulation (Conv1dParams::f64_accumulate): the same
// layouts and arithmetic as conv.cpp, with the inputs widened exactly to float64, every product and
// sum in float64 and one rounding of each output to the output dtype.
//
// Why: the audio VAE decoder (h3_components_spec.md §3.4) amplifies rounding noise; its float32
// reference itself is 8.3e-6 from a float64 run (golden tolerances.json), so a second float32
// implementation with another summation order lands at about 1.4e-5 from it, past the 1e-5 bound.
// Accumulating the convolutions in float64 leaves only the reference's own error (about 7e-6).
// The GEMM form uses OpenBLAS dgemm when the build has it, plain loops otherwise.
#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#ifdef H3_WITH_OPENBLAS
#include <cblas.h>
#endif

#include "core/status.h"
#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

namespace {

// Upper bound of one im2col buffer, in doubles (16 MiB).
constexpr int64_t kColBudget = int64_t{1} << 21;

std::vector<double> widen(const Tensor& t) {
  const F32 f(t);
  return std::vector<double>(f.data(), f.data() + f.size());
}

std::vector<double> bias_filled(const Tensor* bias, int64_t n, int64_t c, int64_t inner) {
  std::vector<double> out(static_cast<size_t>(n * c * inner), 0.0);
  if (!bias) return out;
  const F32 b(*bias);
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t ci = 0; ci < c; ++ci) std::fill_n(out.data() + (ni * c + ci) * inner, inner, double{b[ci]});
  return out;
}

Tensor store(const std::vector<double>& v, const Shape& shape, DType dtype) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = static_cast<float>(v[i]);
  return store_f32(f.data(), shape, dtype);
}

// C[m, n] += op(A)[m, k] * B[k, n], row-major; op(A) = A^T (A stored [k, m]) when trans_a.
void dgemm_acc(bool trans_a, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
               const double* b, int64_t ldb, double* c, int64_t ldc) {
  if (m == 0 || n == 0 || k == 0) return;
#ifdef H3_WITH_OPENBLAS
  for (int64_t v : {m, n, k, lda, ldb, ldc}) {
    H3_CHECK(v <= INT_MAX, ErrorCode::kUnsupported, "conv1d (f64): dimension ", v,
             " exceeds the BLAS int range");
  }
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), 1.0, c, static_cast<int>(ldc));
#else
  for (int64_t i = 0; i < m; ++i) {
    double* ci = c + i * ldc;
    for (int64_t p = 0; p < k; ++p) {
      const double aip = trans_a ? a[p * lda + i] : a[i * lda + p];
      const double* bp = b + p * ldb;
      for (int64_t j = 0; j < n; ++j) ci[j] += aip * bp[j];
    }
  }
#endif
}

}  // namespace

Tensor conv1d_f64(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv1dParams& p) {
  const int64_t n = x.size(0), cin = x.size(1), l = x.size(2);
  const int64_t cout = w.size(0), cin_g = w.size(1), k = w.size(2);
  const int64_t g = p.groups, cout_g = cout / g;
  const int64_t lout = (l + 2 * p.padding - p.dilation * (k - 1) - 1) / p.stride + 1;
  const std::vector<double> xd = widen(x), wd = widen(w);
  std::vector<double> out = bias_filled(bias, n, cout, lout);
  if (cin_g == 1 && cout_g == 1) {
    for (int64_t ni = 0; ni < n; ++ni) {
      for (int64_t c = 0; c < cout; ++c) {
        const double* xr = xd.data() + (ni * cin + c) * l;
        const double* wr = wd.data() + c * k;
        double* o = out.data() + (ni * cout + c) * lout;
        for (int64_t lo = 0; lo < lout; ++lo) {
          double acc = 0.0;
          for (int64_t kk = 0; kk < k; ++kk) {
            const int64_t li = lo * p.stride - p.padding + kk * p.dilation;
            if (li >= 0 && li < l) acc += xr[li] * wr[kk];
          }
          o[lo] += acc;
        }
      }
    }
    return store(out, {n, cout, lout}, x.dtype());
  }
  const int64_t rows = cin_g * k;
  const int64_t chunk = std::max<int64_t>(1, std::min(lout, kColBudget / std::max<int64_t>(rows, 1)));
  std::vector<double> col(static_cast<size_t>(rows * chunk));
  for (int64_t ni = 0; ni < n; ++ni) {
    for (int64_t gi = 0; gi < g; ++gi) {
      for (int64_t l0 = 0; l0 < lout; l0 += chunk) {
        const int64_t cl = std::min(chunk, lout - l0);
        for (int64_t ci = 0; ci < cin_g; ++ci) {
          const double* xr = xd.data() + (ni * cin + gi * cin_g + ci) * l;
          for (int64_t kk = 0; kk < k; ++kk) {
            double* cr = col.data() + (ci * k + kk) * cl;
            for (int64_t j = 0; j < cl; ++j) {
              const int64_t li = (l0 + j) * p.stride - p.padding + kk * p.dilation;
              cr[j] = (li >= 0 && li < l) ? xr[li] : 0.0;
            }
          }
        }
        dgemm_acc(false, cout_g, cl, rows, wd.data() + gi * cout_g * rows, rows, col.data(), cl,
                  out.data() + (ni * cout + gi * cout_g) * lout + l0, lout);
      }
    }
  }
  return store(out, {n, cout, lout}, x.dtype());
}

Tensor conv_transpose1d_f64(const Tensor& x, const Tensor& w, const Tensor* bias,
                            const ConvTranspose1dParams& p) {
  const int64_t n = x.size(0), cin = x.size(1), l = x.size(2);
  const int64_t g = p.groups, cin_g = cin / g, cout_g = w.size(1), k = w.size(2);
  const int64_t cout = cout_g * g;
  const int64_t lout = (l - 1) * p.stride - 2 * p.padding + p.dilation * (k - 1) + p.output_padding + 1;
  const std::vector<double> xd = widen(x), wd = widen(w);
  std::vector<double> out = bias_filled(bias, n, cout, lout);
  if (cin_g == 1 && cout_g == 1) {
    for (int64_t ni = 0; ni < n; ++ni) {
      for (int64_t c = 0; c < cout; ++c) {
        const double* xr = xd.data() + (ni * cin + c) * l;
        const double* wr = wd.data() + c * k;
        double* o = out.data() + (ni * cout + c) * lout;
        for (int64_t li = 0; li < l; ++li) {
          for (int64_t kk = 0; kk < k; ++kk) {
            const int64_t lo = li * p.stride - p.padding + kk * p.dilation;
            if (lo >= 0 && lo < lout) o[lo] += xr[li] * wr[kk];
          }
        }
      }
    }
    return store(out, {n, cout, lout}, x.dtype());
  }
  // col[(co, kk), li] = sum_ci w[ci, co, kk] * x[ci, li], then scattered (col2im) into out.
  const int64_t rows = cout_g * k;
  const int64_t chunk = std::max<int64_t>(1, std::min(l, kColBudget / std::max<int64_t>(rows, 1)));
  std::vector<double> col(static_cast<size_t>(rows * chunk));
  for (int64_t ni = 0; ni < n; ++ni) {
    for (int64_t gi = 0; gi < g; ++gi) {
      for (int64_t l0 = 0; l0 < l; l0 += chunk) {
        const int64_t cl = std::min(chunk, l - l0);
        std::fill(col.begin(), col.begin() + rows * cl, 0.0);
        dgemm_acc(true, rows, cl, cin_g, wd.data() + gi * cin_g * rows, rows,
                  xd.data() + (ni * cin + gi * cin_g) * l + l0, l, col.data(), cl);
        for (int64_t co = 0; co < cout_g; ++co) {
          double* o = out.data() + (ni * cout + gi * cout_g + co) * lout;
          for (int64_t kk = 0; kk < k; ++kk) {
            const double* cr = col.data() + (co * k + kk) * cl;
            for (int64_t j = 0; j < cl; ++j) {
              const int64_t lo = (l0 + j) * p.stride - p.padding + kk * p.dilation;
              if (lo >= 0 && lo < lout) o[lo] += cr[j];
            }
          }
        }
      }
    }
  }
  return store(out, {n, cout, lout}, x.dtype());
}

// One row at a time: the r*L samples of the up-filtered, activated signal live in a row buffer
// (the composition writes five tensors of up to r*L samples per row and reads them back), and each
// sample is computed once. Every sum runs in the composition's order from 0.0 in float64 and is
// rounded to float32 where it rounds, and SnakeBeta is snake_beta's float32 expression, so the
// result is the composition's bit for bit (float32 products are exact in float64). The sums run
// over a tap at a time for a whole row (samples of one phase of the up-filter, or every output of
// the down-filter), which keeps each sample's order and lets the compiler vectorize across samples.
Tensor anti_aliased_snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta,
                               const Tensor& up_filter, const Tensor& down_filter, int ratio) {
  const int64_t n = x.size(0), c = x.size(1), l = x.size(2), k = up_filter.size(2), r = ratio;
  const int64_t pad = k / r - 1;                      // replicate padding of x, each side
  const int64_t crop = pad * r + (k - r) / 2;         // first transposed-conv output kept
  const int64_t left = k / 2 - (k % 2 == 0 ? 1 : 0);  // replicate padding of the 2x signal, left
  const int64_t lp = l + 2 * pad, lu = r * l;
  const F32 xf(x), uf(up_filter), df(down_filter);
  std::vector<float> a = widen_optional(&log_alpha), b = widen_optional(&log_beta);
  for (float& v : a) v = std::exp(v);
  for (float& v : b) v = std::exp(v);
  std::vector<float> out(static_cast<size_t>(n * c * l));
  std::vector<float> xp(static_cast<size_t>(lp));          // x, replicate-padded
  std::vector<float> sp(static_cast<size_t>(lu + k - 1));  // SnakeBeta(u), replicate-padded
  std::vector<double> acc(static_cast<size_t>(std::max(lu / r + 1, l)));
  for (int64_t row = 0; row < n * c; ++row) {
    const int64_t ci = row % c;
    const float* xr = xf.data() + row * l;
    const float* fu = uf.data() + ci * k;
    const float* fd = df.data() + ci * k;
    for (int64_t i = 0; i < lp; ++i) xp[i] = xr[std::clamp<int64_t>(i - pad, 0, l - 1)];
    float* s = sp.data() + left;
    // u[m] = sum over padded inputs i ascending of xp[i] * fu[t - r*i] (t = m + crop, the tap in
    // [0, K)). The samples m = m0 + r*j of one phase share the taps kk = ph + r*q: i = t/r - q.
    for (int64_t m0 = 0; m0 < std::min(r, lu); ++m0) {
      const int64_t ph = (m0 + crop) % r, base = (m0 + crop) / r;
      const int64_t taps = (k - ph + r - 1) / r, count = (lu - m0 + r - 1) / r;
      std::fill_n(acc.begin(), count, 0.0);
      for (int64_t q = taps - 1; q >= 0; --q) {
        const double w = fu[ph + r * q];
        // Inputs past either end of xp contribute nothing (the scatter never reaches there).
        const int64_t j0 = std::max<int64_t>(0, q - base), j1 = std::min(count, lp + q - base);
        for (int64_t j = j0; j < j1; ++j) acc[j] += static_cast<double>(xp[base - q + j]) * w;
      }
      for (int64_t j = 0; j < count; ++j) s[m0 + r * j] = static_cast<float>(acc[j]);
    }
    const float alpha = a[static_cast<size_t>(ci)];
    const float inv = 1.0f / (b[static_cast<size_t>(ci)] + 1e-9f);
    for (int64_t m = 0; m < lu; ++m) {
      const float u = s[m];
      const float sn = std::sin(u * alpha);
      s[m] = u + inv * (sn * sn);
    }
    std::fill(sp.begin(), sp.begin() + left, s[0]);
    std::fill(sp.begin() + left + lu, sp.end(), s[lu - 1]);
    // y[j] = sum over taps kk ascending of sp[r*j + kk] * fd[kk].
    std::fill_n(acc.begin(), l, 0.0);
    for (int64_t kk = 0; kk < k; ++kk) {
      const double w = fd[kk];
      const float* src = sp.data() + kk;
      for (int64_t j = 0; j < l; ++j) acc[j] += static_cast<double>(src[r * j]) * w;
    }
    float* o = out.data() + row * l;
    for (int64_t j = 0; j < l; ++j) o[j] = static_cast<float>(acc[j]);
  }
  return store_f32(out.data(), x.shape(), x.dtype());
}

}  // namespace h3::ops::cpu
