// Exact softmax attention: per head and segment, scores by sgemm, a max-subtracted softmax in
// float32 (sum in float64), then P·V by sgemm. Handles grouped-query heads, causal masking
// (top-left aligned, as torch SDPA's is_causal), block-diagonal cu_seqlens and an additive mask.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

namespace {
// Rows of queries handled at once, bounding the score buffer to kRowBlock x S_kv floats.
constexpr int64_t kRowBlock = 256;
// Scores (query rows x key rows x heads) from which the heads are shared out over threads.
constexpr int64_t kParallelScores = int64_t{1} << 22;
// The softmax runs on four floats at a time (one SSE2 register, so every x86-64 has it) through
// the compiler's vector extensions (GCC and Clang): std::exp is a scalar libm call per element, and
// the scalar loop around it was half of a tiny DiT step on the CPU, which the auto-vectorizer would
// not take on (a select on floats may trap, as it reads it). A row's tail runs lane 0 of the same
// function, so every element gets the same arithmetic.
#define H3_INLINE inline __attribute__((always_inline))
using F32x4 = float __attribute__((vector_size(16)));
using I32x4 = int32_t __attribute__((vector_size(16)));
using F64x2 = double __attribute__((vector_size(16)));
constexpr int kLanes = 4;

H3_INLINE F32x4 splat(float v) { return F32x4{} + v; }

H3_INLINE F32x4 load4(const float* p) {
  F32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// e^x for a score minus its row maximum (x <= 0, or NaN): x = n ln2 + r with |r| <= ln2 / 2 (ln2
// in two parts, so r is exact), Cephes' degree-6 polynomial for e^r (within 2 ulp of e^x), 2^n
// from the exponent bits. Below -87 the result is 0 where expf gives a denormal: a weight under
// 1e-38 of the row's largest changes no float32 sum.
H3_INLINE F32x4 exp_nonpositive(F32x4 x) {
  const I32x4 underflow = x < splat(-87.0f);
  const F32x4 xc = underflow ? splat(-87.0f) : x;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (|xc log2 e| < 2^22).
  const F32x4 n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const F32x4 r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  F32x4 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const F32x4 y = p * (r * r) + r + 1.0f;
  const F32x4 two_n = std::bit_cast<F32x4>((__builtin_convertvector(n, I32x4) + 127) << 23);
  return underflow ? splat(0.0f) : y * two_n;
}

H3_INLINE float exp_nonpositive(float x) { return exp_nonpositive(splat(x))[0]; }

float row_max(const float* x, int64_t n) {
  F32x4 lanes = splat(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const F32x4 v = load4(x + j);
    lanes = lanes < v ? v : lanes;
  }
  float mx = lanes[0];
  for (int l = 1; l < kLanes; ++l) mx = std::max(mx, lanes[l]);
  for (; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

// x[j] = e^(x[j] - mx) in place; returns their sum in float64.
double exp_shifted_sum(float* x, int64_t n, float mx) {
  // Two float64 pairs: a four-double vector would not fit one SSE2 register and lives on the stack.
  F64x2 lo = F64x2{}, hi = F64x2{};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const F32x4 e = exp_nonpositive(load4(x + j) - mx);
    std::memcpy(x + j, &e, sizeof e);
    lo += F64x2{e[0], e[1]};
    hi += F64x2{e[2], e[3]};
  }
  double sum = (lo[0] + hi[0]) + (lo[1] + hi[1]);
  for (; j < n; ++j) sum += (x[j] = exp_nonpositive(x[j] - mx));
  return sum;
}
#undef H3_INLINE
}  // namespace

float softmax_exp(float x) { return exp_nonpositive(x); }

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                 const Tensor* mask) {
  const int64_t s_q = q.size(0), hq = q.size(1), d = q.size(2);
  const int64_t s_kv = k.size(0), hkv = k.size(1);
  const int64_t dv = v.size(2);
  const int64_t group = hq / hkv;
  const float scale = p.scale != 0.0f ? p.scale : static_cast<float>(1.0 / std::sqrt(double(d)));
  const F32 qf(q), kf(k), vf(v);
  std::vector<float> maskf = widen_optional(mask);

  // Segments: [q_begin, q_end) attends [k_begin, k_end). Without cu_seqlens, one segment.
  struct Segment {
    int64_t q0, q1, k0, k1;
  };
  std::vector<Segment> segments;
  if (p.cu_seqlens.empty()) {
    segments.push_back({0, s_q, 0, s_kv});
  } else {
    for (size_t i = 0; i + 1 < p.cu_seqlens.size(); ++i) {
      const int64_t a = p.cu_seqlens[i], b = p.cu_seqlens[i + 1];
      segments.push_back({a, b, a, b});
    }
  }

  std::vector<float> out(static_cast<size_t>(s_q * hq * dv), 0.0f);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // One head, all segments, into `out` (heads write disjoint columns of it).
  auto run_head = [&](int64_t h, std::vector<float>& scores) {
    const int64_t hk = h / group;
    const float* qh = qf.data() + h * d;
    const float* kh = kf.data() + hk * d;
    const float* vh = vf.data() + hk * dv;
    for (const Segment& seg : segments) {
      const int64_t nk = seg.k1 - seg.k0;
      if (nk <= 0) continue;
      for (int64_t r0 = seg.q0; r0 < seg.q1; r0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, seg.q1 - r0);
        // sgemm with beta 0 writes every element: no need to clear the buffer first.
        if (scores.size() < static_cast<size_t>(rows * nk))
          scores.resize(static_cast<size_t>(rows * nk));
        // scores = scale * Q_rows K_seg^T (row strides skip the other heads).
        sgemm(false, true, rows, nk, d, scale, qh + r0 * hq * d, hq * d, kh + seg.k0 * hkv * d,
              hkv * d, 0.0f, scores.data(), nk);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = r0 + r;
          float* srow = scores.data() + r * nk;
          if (mask) {
            const float* mrow = maskf.data() + i * s_kv + seg.k0;
            for (int64_t j = 0; j < nk; ++j) srow[j] += mrow[j];
          }
          if (p.causal) {
            for (int64_t j = std::max<int64_t>(0, i + 1 - seg.k0); j < nk; ++j) srow[j] = neg_inf;
          }
          const float mx = row_max(srow, nk);
          if (mx == neg_inf) {
            // A fully masked row attends to nothing: zeros (as flash attention), not NaN.
            std::fill(srow, srow + nk, 0.0f);
            continue;
          }
          const double sum = exp_shifted_sum(srow, nk, mx);
          const float inv = static_cast<float>(1.0 / sum);
          for (int64_t j = 0; j < nk; ++j) srow[j] *= inv;
        }
        // out_rows = P V_seg, written straight into the [S, Hq, Dv] layout.
        sgemm(false, false, rows, dv, nk, 1.0f, scores.data(), nk, vh + seg.k0 * hkv * dv, hkv * dv,
              0.0f, out.data() + (r0 * hq + h) * dv, hq * dv);
      }
    }
  };

  // Heads are independent: on several cores each thread takes every threads-th head (the GEMMs
  // inside run serially). A head is computed the same way whichever thread runs it.
  int64_t score_elems = 0;
  for (const Segment& seg : segments) score_elems += (seg.q1 - seg.q0) * (seg.k1 - seg.k0);
  const int64_t threads =
      score_elems * hq < kParallelScores ? 1 : std::min<int64_t>(hq, cpu_threads());
  parallel_for(threads, [&](int64_t t) {
    std::vector<float> scores;
    for (int64_t h = t; h < hq; h += threads) run_head(h, scores);
  });
  return store_f32(out.data(), {s_q, hq, dv}, q.dtype());
}

}  // namespace h3::ops::cpu
