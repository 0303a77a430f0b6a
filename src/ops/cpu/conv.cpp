// Convolutions: conv1d (stride, zero padding, dilation, groups), conv_transpose1d and conv3d (zero,
// reflect or replicate padding). The general paths are im2col + sgemm over bounded column buffers;
// depthwise 1-D convolutions and 1x1x1 3-D convolutions take direct paths.
#include <algorithm>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

namespace {
// Upper bound of one im2col buffer, in floats (16 MiB).
constexpr int64_t kColBudget = int64_t{1} << 22;

// Output buffer pre-filled with the bias of each output channel (zeros without bias).
std::vector<float> bias_filled(const Tensor* bias, int64_t n, int64_t c, int64_t inner) {
  std::vector<float> out(static_cast<size_t>(n * c * inner), 0.0f);
  if (!bias) return out;
  const F32 b(*bias);
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t ci = 0; ci < c; ++ci)
      std::fill_n(out.data() + (ni * c + ci) * inner, inner, b[ci]);
  return out;
}

// Source coordinate of padded coordinate q (already shifted by -pad) in a dim of size n; -1 is a
// zero. Reflect mirrors without repeating the edge (torch's "reflect").
int64_t source_index(int64_t i, int64_t n, PadMode mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::kZeros:
      return -1;
    case PadMode::kReplicate:
      return i < 0 ? 0 : n - 1;
    case PadMode::kReflect:
      if (n == 1) return 0;
      while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
      return i;
  }
  return -1;
}
}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv1dParams& p) {
  const int64_t n = x.size(0), cin = x.size(1), l = x.size(2);
  const int64_t cout = w.size(0), cin_g = w.size(1), k = w.size(2);
  const int64_t g = p.groups, cout_g = cout / g;
  const int64_t lout = (l + 2 * p.padding - p.dilation * (k - 1) - 1) / p.stride + 1;
  const F32 xf(x), wf(w);
  std::vector<float> out = bias_filled(bias, n, cout, lout);
  if (cin_g == 1 && cout_g == 1) {
    // Depthwise: a direct loop beats a GEMM with one row.
    for (int64_t ni = 0; ni < n; ++ni) {
      for (int64_t c = 0; c < cout; ++c) {
        const float* xr = xf.data() + (ni * cin + c) * l;
        const float* wr = wf.data() + c * k;
        float* o = out.data() + (ni * cout + c) * lout;
        for (int64_t lo = 0; lo < lout; ++lo) {
          float acc = 0.0f;
          for (int64_t kk = 0; kk < k; ++kk) {
            const int64_t li = lo * p.stride - p.padding + kk * p.dilation;
            if (li >= 0 && li < l) acc += xr[li] * wr[kk];
          }
          o[lo] += acc;
        }
      }
    }
    return store_f32(out.data(), {n, cout, lout}, x.dtype());
  }
  const int64_t rows = cin_g * k;
  const int64_t chunk = std::max<int64_t>(1, std::min(lout, kColBudget / std::max<int64_t>(rows, 1)));
  std::vector<float> col(static_cast<size_t>(rows * chunk));
  for (int64_t ni = 0; ni < n; ++ni) {
    for (int64_t gi = 0; gi < g; ++gi) {
      for (int64_t l0 = 0; l0 < lout; l0 += chunk) {
        const int64_t cl = std::min(chunk, lout - l0);
        for (int64_t ci = 0; ci < cin_g; ++ci) {
          const float* xr = xf.data() + (ni * cin + gi * cin_g + ci) * l;
          for (int64_t kk = 0; kk < k; ++kk) {
            float* cr = col.data() + (ci * k + kk) * cl;
            for (int64_t j = 0; j < cl; ++j) {
              const int64_t li = (l0 + j) * p.stride - p.padding + kk * p.dilation;
              cr[j] = (li >= 0 && li < l) ? xr[li] : 0.0f;
            }
          }
        }
        sgemm(false, false, cout_g, cl, rows, 1.0f, wf.data() + gi * cout_g * rows, rows, col.data(),
              cl, 1.0f, out.data() + (ni * cout + gi * cout_g) * lout + l0, lout);
      }
    }
  }
  return store_f32(out.data(), {n, cout, lout}, x.dtype());
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias,
                        const ConvTranspose1dParams& p) {
  const int64_t n = x.size(0), cin = x.size(1), l = x.size(2);
  const int64_t g = p.groups, cin_g = cin / g, cout_g = w.size(1), k = w.size(2);
  const int64_t cout = cout_g * g;
  const int64_t lout = (l - 1) * p.stride - 2 * p.padding + p.dilation * (k - 1) + p.output_padding + 1;
  const F32 xf(x), wf(w);
  std::vector<float> out = bias_filled(bias, n, cout, lout);
  if (cin_g == 1 && cout_g == 1) {
    for (int64_t ni = 0; ni < n; ++ni) {
      for (int64_t c = 0; c < cout; ++c) {
        const float* xr = xf.data() + (ni * cin + c) * l;
        const float* wr = wf.data() + c * k;
        float* o = out.data() + (ni * cout + c) * lout;
        for (int64_t li = 0; li < l; ++li) {
          for (int64_t kk = 0; kk < k; ++kk) {
            const int64_t lo = li * p.stride - p.padding + kk * p.dilation;
            if (lo >= 0 && lo < lout) o[lo] += xr[li] * wr[kk];
          }
        }
      }
    }
    return store_f32(out.data(), {n, cout, lout}, x.dtype());
  }
  // col[(co, kk), li] = sum_ci w[ci, co, kk] * x[ci, li], then scattered (col2im) into out.
  const int64_t rows = cout_g * k;
  const int64_t chunk = std::max<int64_t>(1, std::min(l, kColBudget / std::max<int64_t>(rows, 1)));
  std::vector<float> col(static_cast<size_t>(rows * chunk));
  for (int64_t ni = 0; ni < n; ++ni) {
    for (int64_t gi = 0; gi < g; ++gi) {
      for (int64_t l0 = 0; l0 < l; l0 += chunk) {
        const int64_t cl = std::min(chunk, l - l0);
        sgemm(true, false, rows, cl, cin_g, 1.0f, wf.data() + gi * cin_g * rows, rows,
              xf.data() + (ni * cin + gi * cin_g) * l + l0, l, 0.0f, col.data(), cl);
        for (int64_t co = 0; co < cout_g; ++co) {
          float* o = out.data() + (ni * cout + gi * cout_g + co) * lout;
          for (int64_t kk = 0; kk < k; ++kk) {
            const float* cr = col.data() + (co * k + kk) * cl;
            for (int64_t j = 0; j < cl; ++j) {
              const int64_t lo = (l0 + j) * p.stride - p.padding + kk * p.dilation;
              if (lo >= 0 && lo < lout) o[lo] += cr[j];
            }
          }
        }
      }
    }
  }
  return store_f32(out.data(), {n, cout, lout}, x.dtype());
}

Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv3dParams& p) {
  const int64_t n = x.size(0), cin = x.size(1);
  const int64_t in[3] = {x.size(2), x.size(3), x.size(4)};
  const int64_t cout = w.size(0);
  const int64_t ks[3] = {w.size(2), w.size(3), w.size(4)};
  int64_t os[3];
  for (int d = 0; d < 3; ++d) os[d] = (in[d] + 2 * p.padding[d] - ks[d]) / p.stride[d] + 1;
  const int64_t in_vol = in[0] * in[1] * in[2];
  const int64_t out_vol = os[0] * os[1] * os[2];
  const int64_t kvol = ks[0] * ks[1] * ks[2];
  const F32 xf(x), wf(w);
  std::vector<float> out = bias_filled(bias, n, cout, out_vol);
  const Shape out_shape = {n, cout, os[0], os[1], os[2]};

  const bool pointwise = kvol == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.stride[2] == 1 &&
                         p.padding[0] == 0 && p.padding[1] == 0 && p.padding[2] == 0;
  if (pointwise) {
    // A 1x1x1 convolution is one GEMM per batch item: [Cout, Cin] x [Cin, T*H*W].
    for (int64_t ni = 0; ni < n; ++ni)
      sgemm(false, false, cout, out_vol, cin, 1.0f, wf.data(), cin, xf.data() + ni * cin * in_vol,
            in_vol, 1.0f, out.data() + ni * cout * out_vol, out_vol);
    return store_f32(out.data(), out_shape, x.dtype());
  }

  // Source index tables per dim: src[d][o * kd + kk] for output coordinate o and tap kk.
  std::vector<int64_t> src[3];
  for (int d = 0; d < 3; ++d) {
    src[d].resize(static_cast<size_t>(os[d] * ks[d]));
    for (int64_t o = 0; o < os[d]; ++o)
      for (int64_t kk = 0; kk < ks[d]; ++kk)
        src[d][o * ks[d] + kk] = source_index(o * p.stride[d] - p.padding[d] + kk, in[d], p.pad_mode);
  }
  const int64_t rows = cin * kvol;
  const int64_t plane = os[2];
  const int64_t hrows =
      std::max<int64_t>(1, std::min(os[1], kColBudget / std::max<int64_t>(rows * plane, 1)));
  std::vector<float> col(static_cast<size_t>(rows * hrows * plane));
  for (int64_t ni = 0; ni < n; ++ni) {
    for (int64_t to = 0; to < os[0]; ++to) {
      for (int64_t h0 = 0; h0 < os[1]; h0 += hrows) {
        const int64_t hr = std::min(hrows, os[1] - h0);
        const int64_t cols = hr * plane;
        for (int64_t ci = 0; ci < cin; ++ci) {
          const float* xc = xf.data() + (ni * cin + ci) * in_vol;
          for (int64_t kt = 0; kt < ks[0]; ++kt) {
            const int64_t ti = src[0][to * ks[0] + kt];
            for (int64_t kh = 0; kh < ks[1]; ++kh) {
              for (int64_t kw = 0; kw < ks[2]; ++kw) {
                float* cr = col.data() + (((ci * ks[0] + kt) * ks[1] + kh) * ks[2] + kw) * cols;
                for (int64_t hh = 0; hh < hr; ++hh) {
                  const int64_t hi = src[1][(h0 + hh) * ks[1] + kh];
                  float* cw = cr + hh * plane;
                  if (ti < 0 || hi < 0) {
                    std::fill_n(cw, plane, 0.0f);
                    continue;
                  }
                  const float* xrow = xc + (ti * in[1] + hi) * in[2];
                  for (int64_t wo = 0; wo < plane; ++wo) {
                    const int64_t wi = src[2][wo * ks[2] + kw];
                    cw[wo] = wi < 0 ? 0.0f : xrow[wi];
                  }
                }
              }
            }
          }
        }
        sgemm(false, false, cout, cols, rows, 1.0f, wf.data(), rows, col.data(), cols, 1.0f,
              out.data() + ni * cout * out_vol + (to * os[1] + h0) * plane, out_vol);
      }
    }
  }
  return store_f32(out.data(), out_shape, x.dtype());
}

}  // namespace h3::ops::cpu
