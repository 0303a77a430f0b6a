// Exact softmax attention: per head and segment, scores by sgemm, a max-subtracted softmax in
// float32 (sum in float64), then P·V by sgemm. Handles grouped-query heads, causal masking
// (top-left aligned, as torch SDPA's is_causal), block-diagonal cu_seqlens and an additive mask.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace h3::ops::cpu {

namespace {
// Rows of queries handled at once, bounding the score buffer to kRowBlock x S_kv floats.
constexpr int64_t kRowBlock = 256;
}  // namespace

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
  std::vector<float> scores;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < hq; ++h) {
    const int64_t hk = h / group;
    const float* qh = qf.data() + h * d;
    const float* kh = kf.data() + hk * d;
    const float* vh = vf.data() + hk * dv;
    for (const Segment& seg : segments) {
      const int64_t nk = seg.k1 - seg.k0;
      if (nk <= 0) continue;
      for (int64_t r0 = seg.q0; r0 < seg.q1; r0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, seg.q1 - r0);
        scores.assign(static_cast<size_t>(rows * nk), 0.0f);
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
          float mx = neg_inf;
          for (int64_t j = 0; j < nk; ++j) mx = std::max(mx, srow[j]);
          if (mx == neg_inf) {
            // A fully masked row attends to nothing: zeros (as flash attention), not NaN.
            std::fill(srow, srow + nk, 0.0f);
            continue;
          }
          double sum = 0.0;
          for (int64_t j = 0; j < nk; ++j) {
            srow[j] = std::exp(srow[j] - mx);
            sum += srow[j];
          }
          const float inv = static_cast<float>(1.0 / sum);
          for (int64_t j = 0; j < nk; ++j) srow[j] *= inv;
        }
        // out_rows = P V_seg, written straight into the [S, Hq, Dv] layout.
        sgemm(false, false, rows, dv, nk, 1.0f, scores.data(), nk, vh + seg.k0 * hkv * dv, hkv * dv,
              0.0f, out.data() + (r0 * hq + h) * dv, hq * dv);
      }
    }
  }
  return store_f32(out.data(), {s_q, hq, dv}, q.dtype());
}

}  // namespace h3::ops::cpu
