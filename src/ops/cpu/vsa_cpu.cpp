// CPU oracle of VSA-H3 (h3_dit_spec.md §5.3-5.6): float64 accumulation, one rounding to the
// activation dtype where the reference's bf16 kernel produces a bf16 tensor.
#include <cmath>
#include <vector>

#include "core/status.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/vsa.h"

namespace h3::ops::cpu {

namespace {

// Rounds a float to the storage dtype and back (identity for f32).
float round_to(DType t, float v) {
  switch (t) {
    case DType::kBF16: return round_bf16(v);
    case DType::kF16: return round_f16(v);
    default: return v;
  }
}

// Tile means over valid rows: [H, n, D] f32. Pads are zero in the reference's buffer, so the sum
// over the E slots equals the sum over the valid rows; the divisor is the true tile size.
Tensor pool_tiles(const std::vector<float>& x, int64_t H, int64_t D, const VsaGeometry& g,
                  const std::vector<int64_t>& starts) {
  const int64_t n = g.num_tiles();
  Tensor out = Tensor::empty({H, n, D}, DType::kF32);
  float* o = out.data<float>();
  std::vector<double> acc(static_cast<size_t>(D));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = starts[t]; j < starts[t + 1]; ++j) {
        const float* row = x.data() + (g.partition_rows[j] * H + h) * D;
        for (int64_t d = 0; d < D; ++d) acc[d] += row[d];
      }
      for (int64_t d = 0; d < D; ++d) {
        o[(h * n + t) * D + d] = static_cast<float>(acc[d] / static_cast<double>(g.tile_sizes[t]));
      }
    }
  }
  return out;
}

}  // namespace

Tensor vsa_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g,
                     const VsaGeometry& geo, const VsaOptions& opt, VsaTrace* trace) {
  const int64_t S = q.size(0), H = q.size(1), D = q.size(2);
  const int64_t n = geo.num_tiles();
  const DType dt = q.dtype();
  const double scale = opt.scale > 0.0f ? opt.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const std::vector<int64_t> starts = geo.tile_starts();
  std::vector<int64_t> tile_of(static_cast<size_t>(S));
  for (int64_t r = 0; r < S; ++r) tile_of[r] = geo.untile_index[r] / geo.tile_size;

  const std::vector<float> qv = q.to_f32_vector(), kv = k.to_f32_vector(), vv = v.to_f32_vector();

  const bool need_scores = opt.sparsity > 0.0 || g != nullptr || trace != nullptr;
  Tensor q_pooled, k_pooled, v_pooled, scores, mask;
  if (need_scores) {
    q_pooled = pool_tiles(qv, H, D, geo, starts);
    k_pooled = pool_tiles(kv, H, D, geo, starts);
    v_pooled = pool_tiles(vv, H, D, geo, starts);
    scores = Tensor::empty({H, n, n}, DType::kF32);
    const float* qp = q_pooled.data<float>();
    const float* kp = k_pooled.data<float>();
    float* sc = scores.data<float>();
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += static_cast<double>(qp[(h * n + i) * D + d]) * kp[(h * n + j) * D + d];
          sc[(h * n + i) * n + j] = static_cast<float>(acc * scale);
        }
    mask = opt.block_mask ? opt.block_mask->to(Device::cpu()).contiguous()
                          : vsa_block_mask(scores, geo, opt.sparsity, opt.mode);
  } else if (opt.block_mask) {
    mask = opt.block_mask->to(Device::cpu()).contiguous();
  } else {
    mask = Tensor::zeros({H, n, n}, DType::kU8);
    mask.fill(1);
  }
  const uint8_t* mk = mask.data<uint8_t>();

  // Fine branch: softmax over the valid rows of every visible key tile (§5.5).
  //  - float32: exact softmax in float64.
  //  - bf16/f16: the reference's kernel is FlashAttention-2 style: key blocks of 64 rows in tile
  //    order (a 256-row tile is four 64-row blocks), base-2 exponentials against the running
  //    maximum, the float32 probabilities summed for the denominator but rounded to the
  //    activation dtype before the product with V, the accumulator rescaled in float32 when the
  //    maximum grows. Emulating those rounding points keeps this oracle within one rounding of the
  //    reference's `fine`, which the gate branch's final rounding would otherwise double.
  Tensor fine = Tensor::empty({S, H, D}, dt);
  std::vector<float> fine_v(static_cast<size_t>(S * H * D));
  const bool emulate_kernel = dt == DType::kBF16 || dt == DType::kF16;
  const float log2e = 1.44269504088896340736f;

  // One (head, query tile) pair writes only its own rows, and every sum below runs in the same
  // order whatever the thread, so the split over threads changes no bit of the result.
  constexpr int64_t kBlock = 64;
  struct Scratch {
    std::vector<int64_t> keys;
    std::vector<std::pair<int64_t, int64_t>> blocks;  // [begin, end) into partition_rows
    std::vector<float> k_t;                           // per block: K transposed, [D][kBlock]
    std::vector<float> v_b;                           // per block: V in the activation dtype
    std::vector<double> logits, acc, dots;
    std::vector<float> acc_f;
  };
  auto fine_tile = [&](int64_t h, int64_t i, Scratch& w) {
    auto& [keys, blocks, k_t, v_b, logits, acc, dots, acc_f] = w;
    keys.clear();
    blocks.clear();
    for (int64_t j = 0; j < n; ++j) {
      if (!mk[(h * n + i) * n + j]) continue;
      for (int64_t p = starts[j]; p < starts[j + 1]; ++p) keys.push_back(geo.partition_rows[p]);
      for (int64_t p = starts[j]; p < starts[j + 1]; p += kBlock) {
        blocks.emplace_back(p, std::min(p + kBlock, starts[j + 1]));
      }
    }
    // Every query row of the tile meets the same keys: transposed once, the dot products of a
    // row with a block's keys run side by side, each still summed over d in order (and a float
    // product is exact in double, so a fused multiply-add gives the same bits).
    k_t.assign(blocks.size() * static_cast<size_t>(D * kBlock), 0.0f);
    for (size_t b = 0; b < blocks.size(); ++b) {
      for (int64_t c = blocks[b].first; c < blocks[b].second; ++c) {
        const float* kr = kv.data() + (geo.partition_rows[c] * H + h) * D;
        float* col = k_t.data() + b * D * kBlock + (c - blocks[b].first);
        for (int64_t d = 0; d < D; ++d) col[d * kBlock] = kr[d];
      }
    }
    // The rows of V the tile reads, packed [blocks][kBlock][D] and rounded to the activation
    // dtype as the kernel reads them: once per tile, not once per query row.
    if (emulate_kernel) {
      v_b.resize(k_t.size());
      for (size_t b = 0; b < blocks.size(); ++b) {
        for (int64_t c = blocks[b].first; c < blocks[b].second; ++c) {
          const float* vr = vv.data() + (geo.partition_rows[c] * H + h) * D;
          float* dst = v_b.data() + (b * kBlock + (c - blocks[b].first)) * D;
          for (int64_t d = 0; d < D; ++d) dst[d] = round_to(dt, vr[d]);
        }
      }
    }
    dots.resize(kBlock);
    auto block_dots = [&](size_t b, const float* qr) {
      std::fill(dots.begin(), dots.end(), 0.0);
      const float* kb = k_t.data() + b * D * kBlock;
      for (int64_t d = 0; d < D; ++d) {
        const double qd = qr[d];
        for (int64_t kk = 0; kk < kBlock; ++kk) dots[kk] += qd * kb[d * kBlock + kk];
      }
    };
    for (int64_t p = starts[i]; p < starts[i + 1]; ++p) {
      const int64_t r = geo.partition_rows[p];
      const float* qr = qv.data() + (r * H + h) * D;
      float* out = fine_v.data() + (r * H + h) * D;
      if (!emulate_kernel) {
        logits.resize(keys.size());
        double mx = -INFINITY;
        size_t c = 0;
        for (size_t b = 0; b < blocks.size(); ++b) {
          block_dots(b, qr);
          for (int64_t kk = 0; kk < blocks[b].second - blocks[b].first; ++kk, ++c) {
            logits[c] = dots[kk] * scale;
            mx = std::max(mx, logits[c]);
          }
        }
        double denom = 0;
        for (double& l : logits) denom += (l = std::exp(l - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t c = 0; c < keys.size(); ++c) {
          const float* vr = vv.data() + (keys[c] * H + h) * D;
          for (int64_t d = 0; d < D; ++d) acc[d] += logits[c] * vr[d];
        }
        for (int64_t d = 0; d < D; ++d) out[d] = static_cast<float>(acc[d] / denom);
        continue;
      }
      const float qk_scale = static_cast<float>(scale) * log2e;
      float m_i = -INFINITY, l_i = 0.0f;
      std::fill(acc_f.begin(), acc_f.end(), 0.0f);
      for (size_t b = 0; b < blocks.size(); ++b) {
        const auto [b0, b1] = blocks[b];
        logits.resize(static_cast<size_t>(b1 - b0));
        block_dots(b, qr);
        float m_ij = m_i;
        for (int64_t c = b0; c < b1; ++c) {
          const float sc = static_cast<float>(dots[c - b0]) * qk_scale;
          logits[c - b0] = sc;
          m_ij = std::max(m_ij, sc);
        }
        const float alpha = std::exp2(m_i - m_ij);
        float l_ij = 0.0f;
        for (double& l : logits) {
          const float pf = std::exp2(static_cast<float>(l) - m_ij);
          l_ij += pf;
          l = round_to(dt, pf);
        }
        l_i = l_i * alpha + l_ij;
        // P·V in float64, each output column summed over the block's keys in key order.
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t c = b0; c < b1; ++c) {
          const double pc = logits[c - b0];
          const float* vr = v_b.data() + (b * kBlock + (c - b0)) * D;
          for (int64_t d = 0; d < D; ++d) acc[d] += pc * vr[d];
        }
        for (int64_t d = 0; d < D; ++d) acc_f[d] = acc_f[d] * alpha + static_cast<float>(acc[d]);
        m_i = m_ij;
      }
      for (int64_t d = 0; d < D; ++d) out[d] = round_to(dt, acc_f[d] / l_i);
    }
  };
  const int64_t pairs = H * n;
  const int64_t parts = std::min<int64_t>(cpu_threads(), pairs);
  parallel_for(parts, [&](int64_t part) {
    Scratch w;
    w.acc.resize(static_cast<size_t>(D));
    w.acc_f.resize(static_cast<size_t>(D));
    // Interleaved, so that heads with many visible tiles spread over the threads.
    for (int64_t pair = part; pair < pairs; pair += parts) fine_tile(pair / n, pair % n, w);
  });
  convert_elements(fine_v.data(), DType::kF32, fine.raw(), dt, fine_v.size());

  Tensor out = fine;
  Tensor out_c_f32;
  if (g != nullptr) {
    H3_CHECK(g->shape() == q.shape(), ErrorCode::kInvalidArgument, "VSA gate ",
             shape_str(g->shape()), " does not match q ", shape_str(q.shape()));
    // Compression branch: softmax over all tile scores (unmasked) times the tile means of v.
    out_c_f32 = Tensor::empty({H, n, D}, DType::kF32);
    float* oc = out_c_f32.data<float>();
    const float* sc = scores.data<float>();
    const float* vp = v_pooled.data<float>();
    std::vector<double> w(static_cast<size_t>(n));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i) {
        double mx = -INFINITY, denom = 0;
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(sc[(h * n + i) * n + j]));
        for (int64_t j = 0; j < n; ++j) {
          w[j] = std::exp(sc[(h * n + i) * n + j] - mx);
          denom += w[j];
        }
        for (int64_t d = 0; d < D; ++d) {
          double a = 0;
          for (int64_t j = 0; j < n; ++j) a += w[j] * vp[(h * n + j) * D + d];
          oc[(h * n + i) * D + d] = static_cast<float>(a / denom);
        }
      }
    // out = round(fine + round(round(out_c) * g)), every rounding in the activation dtype (§5.6).
    const std::vector<float> gv = g->to_f32_vector();
    std::vector<float> res(fine_v.size());
    for (int64_t r = 0; r < S; ++r)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const size_t idx = static_cast<size_t>((r * H + h) * D + d);
          const float c = round_to(dt, oc[(h * n + tile_of[r]) * D + d]);
          res[idx] = round_to(dt, fine_v[idx] + round_to(dt, c * gv[idx]));
        }
    out = Tensor::empty({S, H, D}, dt);
    convert_elements(res.data(), DType::kF32, out.raw(), dt, res.size());
  }
  if (trace) {
    trace->q_pooled = q_pooled;
    trace->k_pooled = k_pooled;
    trace->v_pooled = v_pooled;
    trace->scores = scores;
    trace->mask = mask;
    trace->fine = fine;
    trace->out_c_f32 = out_c_f32;
  }
  return out;
}

}  // namespace h3::ops::cpu
