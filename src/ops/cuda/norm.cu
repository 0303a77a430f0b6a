// Normalizations on CUDA: rms_norm (also per head), layer_norm, group_norm, weight_norm (the
// weight-norm fold of the audio VAE's convolutions, at load), and two fused kernels
// of the DiT block (h3_dit_spec.md, block structure): RMSNorm followed by AdaLN modulation
// (rms_norm_modulate) and the per-head QK RMSNorm followed by RoPE (qk_norm_rope).
//
// Row kernels give each row to one warp: the DiT's rows are 5,376 wide (hidden) or 128 (a head),
// and a warp per row keeps every multiprocessor busy for either. Statistics are accumulated in
// float32 per lane and combined by shuffles; the fused kernels round once, where the plain path
// rounds after each op (their switch H3_FUSE_*=0 restores the plain path).
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/elementwise_util.cuh"
#include "ops/cuda/fp8_cuda.h"
#include "ops/cuda/fp8_util.cuh"

namespace h3::ops::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;

struct RowArgs {
  const void* x;
  int xt;
  void* out;
  int ot;
  int64_t rows;
  int64_t cols;
  float eps;
  const void* w;  // may be null
  int wt;
  const void* b;  // layer_norm bias, may be null
  int bt;
  // Modulation (rms_norm_modulate): scale/shift [tables, cols] picked by idx[row].
  const void* scale;
  int sct;
  const void* shift;
  int sht;
  IndexPtr idx;
  int64_t tables;
  int* bad;
};

__device__ __forceinline__ float rms_inv(const RowArgs& a, int64_t row, int lane) {
  float ss = 0.0f;
  for (int64_t c = lane; c < a.cols; c += 32) {
    const float v = ld(a.x, a.xt, row * a.cols + c);
    ss += v * v;
  }
  ss = warp_sum(ss);
  return 1.0f / sqrtf(ss / static_cast<float>(a.cols) + a.eps);
}

// The modulation table row of `row` (rms_norm_modulate); false, with the op's error flag set, when
// the index is outside the table.
__device__ __forceinline__ bool table_row(const RowArgs& a, int64_t row, int lane, int64_t* t) {
  *t = a.idx[row];
  if (*t >= 0 && *t < a.tables) return true;
  if (lane == 0) *a.bad = 1;
  return false;
}

// mode 0: rms_norm; 1: rms_norm then modulate (fused).
__global__ void rms_rows_kernel(RowArgs a, int mode) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (row >= a.rows) return;
  const float inv = rms_inv(a, row, lane);
  int64_t t = 0;
  if (mode == 1 && !table_row(a, row, lane, &t)) return;
  for (int64_t c = lane; c < a.cols; c += 32) {
    float v = ld(a.x, a.xt, row * a.cols + c) * inv;
    if (a.w) v *= ld(a.w, a.wt, c);
    if (mode == 1) v = v * (1.0f + ld(a.scale, a.sct, t * a.cols + c)) + ld(a.shift, a.sht, t * a.cols + c);
    st(a.out, a.ot, row * a.cols + c, v);
  }
}

// 1 / RMS of a row read eight values at a time, the warp's lanes striding by 256.
__device__ __forceinline__ float rms_inv_vec8(const RowArgs& a, int64_t base, int lane) {
  float ss = 0.0f;
  for (int64_t c = lane * 8; c < a.cols; c += 256) {
    float v[8];
    ld8(a.x, a.xt, base + c, v);
    for (int k = 0; k < 8; ++k) ss += v[k] * v[k];
  }
  return 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(a.cols) + a.eps);
}

// Eight values of a row from column c, already in float32, normalized (mode 1: and modulated by
// table row t) before the output's rounding. One definition for the 16-bit output and the E4M3
// one, and for the kernels that read the row from memory or hold it in registers, so all see the
// same arithmetic.
__device__ __forceinline__ void rms_apply8(const RowArgs& a, int64_t c, float inv, int mode,
                                           int64_t t, float v[8]) {
  float w[8], sc[8], sh[8];
  if (a.w) ld8(a.w, a.wt, c, w);
  if (mode == 1) {
    ld8(a.scale, a.sct, t * a.cols + c, sc);
    ld8(a.shift, a.sht, t * a.cols + c, sh);
  }
  for (int k = 0; k < 8; ++k) {
    v[k] *= inv;
    if (a.w) v[k] *= w[k];
    if (mode == 1) v[k] = v[k] * (1.0f + sc[k]) + sh[k];
  }
}

__device__ __forceinline__ void rms_values8(const RowArgs& a, int64_t base, int64_t c, float inv,
                                            int mode, int64_t t, float v[8]) {
  ld8(a.x, a.xt, base + c, v);
  rms_apply8(a, c, inv, mode, t, v);
}

// rms_rows_kernel eight values at a time (vec8_ok operands, cols % 8 == 0): a lane reads 16 bytes
// per access instead of 2, which takes the DiT's 5,376-wide rows from latency-bound to
// bandwidth-bound. The second pass reads the row again (from L1/L2: one DRAM read per row).
__global__ void rms_rows_vec8_kernel(RowArgs a, int mode) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (row >= a.rows) return;
  const int64_t base = row * a.cols;
  const float inv = rms_inv_vec8(a, base, lane);
  int64_t t = 0;
  if (mode == 1 && !table_row(a, row, lane, &t)) return;
  for (int64_t c = lane * 8; c < a.cols; c += 256) {
    float v[8];
    rms_values8(a, base, c, inv, mode, t, v);
    st8(a.out, a.ot, base + c, v);
  }
}

// rms_rows_vec8_kernel's modulated rows (mode 1) quantized per row to E4M3, as
// quantize_activation_fp8 quantizes that kernel's output: each value rounded to the output dtype
// (a.ot) as st8 stores it, the row's amax over those, then value / scale to E4M3 (q [rows, cols],
// qscale [rows]). The values are formed twice, for the amax and for the bytes, from the row the
// first pass brought into L1/L2, instead of writing the 16-bit row and reading it back.
__global__ void rms_modulate_fp8_vec8_kernel(RowArgs a, uint8_t* q, float* qscale) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (row >= a.rows) return;
  const int64_t base = row * a.cols;
  const float inv = rms_inv_vec8(a, base, lane);
  int64_t t = 0;
  if (!table_row(a, row, lane, &t)) return;
  float m = 0.0f;
  for (int64_t c = lane * 8; c < a.cols; c += 256) {
    float v[8];
    rms_values8(a, base, c, inv, 1, t, v);
    round8(a.ot, v);
    for (int k = 0; k < 8; ++k) m = nan_max(m, fabsf(v[k]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, o));
  const float s = scale_of(m);
  if (lane == 0) qscale[row] = s;
  for (int64_t c = lane * 8; c < a.cols; c += 256) {
    float v[8];
    rms_values8(a, base, c, inv, 1, t, v);
    round8(a.ot, v);
    *reinterpret_cast<uint2*>(q + base + c) = e4m3x8(v, s);
  }
}

// rms_modulate_fp8_vec8_kernel per group (cols % 128 == 0): in each pass the 16 lanes holding
// one run of 128 columns share its amax (e4m3x8_group), so each value is formed once. Rows from
// a.rows to m4 are the padding cuBLASLt's block scaling wants (zero bytes, scale 1); qscale is
// [cols / 128, m4], token-major.
__global__ void rms_modulate_fp8_groups_kernel(RowArgs a, int64_t m4, uint8_t* q, float* qscale) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (row >= m4) return;
  const int64_t base = row * a.cols;
  if (row >= a.rows) {
    for (int64_t c = lane * 8; c < a.cols; c += 256) {
      *reinterpret_cast<uint2*>(q + base + c) = make_uint2(0u, 0u);
      if ((lane & 15) == 0) qscale[(c / 128) * m4 + row] = 1.0f;
    }
    return;
  }
  const float inv = rms_inv_vec8(a, base, lane);
  int64_t t = 0;
  if (!table_row(a, row, lane, &t)) return;
  for (int64_t c = lane * 8; c < a.cols; c += 256) {
    float v[8];
    rms_values8(a, base, c, inv, 1, t, v);
    round8(a.ot, v);
    *reinterpret_cast<uint2*>(q + base + c) = e4m3x8_group(v, lane, &qscale[(c / 128) * m4 + row]);
  }
}

// ---- rows held in registers -----------------------------------------------------------------
// The kernels above read a row twice: once for its sum of squares, once (from L2, since a warp's
// row no longer fits in L1 beside its neighbours') to normalize it, and a warp has only a few of
// its loads in flight. For 16-bit rows of up to kRegMaxCols values (the DiT's 5,376, the
// conditioner's 5,120, the video VAE decoder's channels) each thread instead loads all its C
// 16-byte chunks of the row before using any, so the whole row is in flight at once, and the
// second pass works from registers. Rows of up to 2,048 values take a warp each (four rows per
// CTA); wider ones four warps, one row per CTA (C = 8 chunks a thread either way). With one warp a
// row's squares add in rms_rows_vec8_kernel's order, with four in another, so the scale may differ
// in the last bit.
// H3_FUSE_ROW_REGS=0 goes back to the kernels above.
constexpr int64_t kRegMaxCols = 8192;

enum class RegOut { kNorm, kModulate, kFp8Rows, kFp8Groups };

struct RegExtra {
  // The gated residual in front of the norm (x_out not null): the row is a.x + gate[t] * branch,
  // stored to x_out in a.x's dtype (gated_residual's bytes) and normalized as stored.
  const void* branch = nullptr;
  const void* gate = nullptr;
  int gt = 0;
  void* x_out = nullptr;
  // E4M3 outputs: rms_modulate_fp8_vec8_kernel's and rms_modulate_fp8_groups_kernel's layouts.
  uint8_t* q = nullptr;
  float* qscale = nullptr;
  int64_t m4 = 0;
};

// A row's total over its W warps (W = 1: the warp's shuffle tree), combined in warp order, so the
// same bits on every run. `red` holds one slot per warp and serves one reduction.
template <int W, bool kMax>
__device__ __forceinline__ float row_reduce(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? nan_max(v, u) : v + u;
  }
  if constexpr (W == 1) {
    return v;
  } else {
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
#pragma unroll
    for (int i = 1; i < W; ++i) r = kMax ? nan_max(r, red[i]) : r + red[i];
    return r;
  }
}

template <int W, int C, RegOut kOut>
__global__ void __launch_bounds__(W == 1 ? 128 : 32 * W)
    rms_rows_regs_kernel(RowArgs a, RegExtra e) {
  constexpr int kRowThreads = 32 * W;
  constexpr int kCtaThreads = W == 1 ? 128 : 32 * W;
  constexpr int mode = kOut == RegOut::kNorm ? 0 : 1;
  __shared__ float red[2][W];
  const int t = static_cast<int>(threadIdx.x) % kRowThreads, lane = threadIdx.x & 31;
  const int64_t row =
      blockIdx.x * static_cast<int64_t>(kCtaThreads / kRowThreads) + threadIdx.x / kRowThreads;
  // W > 1: one row per CTA, so every return below is the whole CTA's.
  if (row >= (kOut == RegOut::kFp8Groups ? e.m4 : a.rows)) return;
  const int64_t base = row * a.cols;
  auto col = [&](int j) { return (static_cast<int64_t>(j) * kRowThreads + t) * 8; };
  if (kOut == RegOut::kFp8Groups && row >= a.rows) {  // cuBLASLt's padding rows: zero, scale 1
    for (int j = 0; j < C && col(j) < a.cols; ++j) {
      *reinterpret_cast<uint2*>(e.q + base + col(j)) = make_uint2(0u, 0u);
      if ((lane & 15) == 0) e.qscale[(col(j) / 128) * e.m4 + row] = 1.0f;
    }
    return;
  }
  int64_t tab = 0;
  if ((mode == 1 || e.x_out) && !table_row(a, row, t, &tab)) return;
  const auto* x16 = static_cast<const uint16_t*>(a.x);
  uint4 raw[C];
#pragma unroll
  for (int j = 0; j < C; ++j) {
    if (col(j) < a.cols) raw[j] = *reinterpret_cast<const uint4*>(x16 + base + col(j));
  }
  if (e.x_out) {
    const auto* b16 = static_cast<const uint16_t*>(e.branch);
    uint4 braw[C];
#pragma unroll
    for (int j = 0; j < C; ++j) {
      if (col(j) < a.cols) braw[j] = *reinterpret_cast<const uint4*>(b16 + base + col(j));
    }
#pragma unroll
    for (int j = 0; j < C; ++j) {
      if (col(j) >= a.cols) continue;
      float xv[8], bv[8], gv[8];
      unpack8(raw[j], a.xt, xv);
      unpack8(braw[j], a.xt, bv);
      ld8(e.gate, e.gt, tab * a.cols + col(j), gv);
      gated_add8(xv, gv, bv);
      raw[j] = pack8(a.xt, xv);
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(e.x_out) + base + col(j)) = raw[j];
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < C; ++j) {
    if (col(j) >= a.cols) continue;
    float v[8];
    unpack8(raw[j], a.xt, v);
    for (int k = 0; k < 8; ++k) ss += v[k] * v[k];
  }
  const float inv =
      1.0f / sqrtf(row_reduce<W, false>(ss, red[0]) / static_cast<float>(a.cols) + a.eps);
  auto values = [&](int j, float v[8]) {  // chunk j normalized (and modulated), in float32
    unpack8(raw[j], a.xt, v);
    rms_apply8(a, col(j), inv, mode, tab, v);
  };
  float m = 0.0f;  // kFp8Rows: the row's amax, over the values rounded as a 16-bit store rounds
#pragma unroll
  for (int j = 0; j < C; ++j) {
    if (col(j) >= a.cols) continue;
    float v[8];
    values(j, v);
    if constexpr (kOut == RegOut::kNorm || kOut == RegOut::kModulate) {
      st8(a.out, a.ot, base + col(j), v);
    } else {
      round8(a.ot, v);
      if constexpr (kOut == RegOut::kFp8Groups) {
        *reinterpret_cast<uint2*>(e.q + base + col(j)) =
            e4m3x8_group(v, lane, &e.qscale[(col(j) / 128) * e.m4 + row]);
      } else {
        for (int k = 0; k < 8; ++k) m = nan_max(m, fabsf(v[k]));
      }
    }
  }
  if constexpr (kOut == RegOut::kFp8Rows) {
    const float s = scale_of(row_reduce<W, true>(m, red[1]));
    if (t == 0) e.qscale[row] = s;
#pragma unroll
    for (int j = 0; j < C; ++j) {
      if (col(j) >= a.cols) continue;
      float v[8];
      values(j, v);
      round8(a.ot, v);
      *reinterpret_cast<uint2*>(e.q + base + col(j)) = e4m3x8(v, s);
    }
  }
}

__global__ void layer_norm_kernel(RowArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (row >= a.rows) return;
  float s = 0.0f;
  for (int64_t c = lane; c < a.cols; c += 32) s += ld(a.x, a.xt, row * a.cols + c);
  const float mean = warp_sum(s) / static_cast<float>(a.cols);
  float ss = 0.0f;
  for (int64_t c = lane; c < a.cols; c += 32) {
    const float d = ld(a.x, a.xt, row * a.cols + c) - mean;
    ss += d * d;
  }
  const float inv = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(a.cols) + a.eps);
  for (int64_t c = lane; c < a.cols; c += 32) {
    float v = (ld(a.x, a.xt, row * a.cols + c) - mean) * inv;
    if (a.w) v *= ld(a.w, a.wt, c);
    if (a.b) v += ld(a.b, a.bt, c);
    st(a.out, a.ot, row * a.cols + c, v);
  }
}

// QK-norm + RoPE on x [S, H, D] rows (one row = one head of one token): RMSNorm with weight [D],
// then rotate-half on the first `rot` channels with cos/sin [S, rot]. The normalized row is kept
// in shared memory so each lane can read its rotation partner.
__global__ void qk_norm_rope_kernel(RowArgs a, int64_t heads, const void* cs, int cst, const void* sn,
                                    int snt, int64_t rot) {
  extern __shared__ float row_buf[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + warp;
  if (row >= a.rows) return;
  float* buf = row_buf + warp * a.cols;
  const float inv = rms_inv(a, row, lane);
  for (int64_t c = lane; c < a.cols; c += 32) {
    float v = ld(a.x, a.xt, row * a.cols + c) * inv;
    if (a.w) v *= ld(a.w, a.wt, c);
    buf[c] = v;
  }
  __syncwarp();
  const int64_t s = row / heads;
  const int64_t half = rot / 2;
  for (int64_t c = lane; c < a.cols; c += 32) {
    const float v = buf[c];
    float r = v;
    if (c < half) {
      r = v * ld(cs, cst, s * rot + c) - buf[c + half] * ld(sn, snt, s * rot + c);
    } else if (c < rot) {
      r = v * ld(cs, cst, s * rot + c) + buf[c - half] * ld(sn, snt, s * rot + c);
    }
    st(a.out, a.ot, row * a.cols + c, r);
  }
}

// qk_norm_rope_kernel for head rows of G * 8 values (G = 8, 16 or 32 lanes per row, vec8_ok
// operands, rot and rot / 2 multiples of 8): each lane holds eight values of one row, the row's
// sum of squares is a shuffle tree over its G lanes, and the rotation partner (8 values, half
// the rotary width away) comes from the lane rot / 16 away by shuffles, not shared memory.
// A lane group takes R consecutive rows (heads % R == 0, so one token's): their loads are in
// flight together, and the token's cos/sin values are read once for the R heads instead of once
// per head (every head of a token rotates by the same table row).
template <int G, int R>
__global__ void qk_norm_rope_vec8_kernel(RowArgs a, int64_t heads, const void* cs, int cst,
                                         const void* sn, int snt, int64_t rot) {
  const int64_t gid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t row = (gid / G) * R;
  const int part = static_cast<int>(gid % G);  // which eight values of the row
  const bool live = row < a.rows;
  const int64_t r0 = live ? row : a.rows - R;  // dead lanes still join the shuffles
  const int64_t c = static_cast<int64_t>(part) * 8;
  float v[R][8], inv[R];
#pragma unroll
  for (int j = 0; j < R; ++j) ld8(a.x, a.xt, (r0 + j) * a.cols + c, v[j]);
#pragma unroll
  for (int j = 0; j < R; ++j) {
    float ss = 0.0f;
    for (int k = 0; k < 8; ++k) ss += v[j][k] * v[j][k];
    for (int off = G / 2; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off, G);
    inv[j] = 1.0f / sqrtf(ss / static_cast<float>(a.cols) + a.eps);
  }
  float w[8];
  if (a.w) ld8(a.w, a.wt, c, w);
#pragma unroll
  for (int j = 0; j < R; ++j) {
    for (int k = 0; k < 8; ++k) {
      v[j][k] *= inv[j];
      if (a.w) v[j][k] *= w[k];
    }
  }
  const int hp = static_cast<int>(rot / 16);  // lanes between partners
  const int64_t half = rot / 2;
  const bool rotated = live && c < rot;
  float co[8], si[8];
  if (rotated) {
    const int64_t s = r0 / heads;
    ld8(cs, cst, s * rot + c, co);
    ld8(sn, snt, s * rot + c, si);
  }
#pragma unroll
  for (int j = 0; j < R; ++j) {
    float up[8], down[8];
    for (int k = 0; k < 8; ++k) {
      up[k] = __shfl_sync(0xffffffffu, v[j][k], min(part + hp, G - 1), G);
      down[k] = __shfl_sync(0xffffffffu, v[j][k], max(part - hp, 0), G);
    }
    if (!live) continue;
    if (rotated) {
      for (int k = 0; k < 8; ++k)
        v[j][k] = c < half ? v[j][k] * co[k] - up[k] * si[k] : v[j][k] * co[k] + down[k] * si[k];
    }
    st8(a.out, a.ot, (r0 + j) * a.cols + c, v[j]);
  }
}

// layerscale_residual_rms_norm for rows of at most kResNormChunks * 256 values (8 per lane and
// chunk): pass one forms x' = x + r(branch * scale) with the composition's two float32 roundings
// (__fmul_rn/__fadd_rn keep them from contracting into one FMA), writes it and sums its squares
// in rms_rows_vec8_kernel's order; pass two normalizes the row from registers. So both outputs
// equal the composition's (layerscale kernel, rms_norm, cast) bit for bit.
constexpr int kResNormChunks = 8;

__global__ void residual_rms_vec8_kernel(const float* __restrict__ x, const void* br, int bt,
                                         const float* __restrict__ scale, float* xo, void* no, int nt,
                                         const void* w, int wt, int64_t rows, int64_t cols, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t base = row * cols;
  float v[kResNormChunks][8];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kResNormChunks; ++j) {
    const int64_t c = lane * 8 + j * 256;
    if (c >= cols) break;
    float xv[8], b[8], sc[8];
    ld8(x, kCodeF32, base + c, xv);
    ld8(br, bt, base + c, b);
    ld8(scale, kCodeF32, c, sc);
    for (int k = 0; k < 8; ++k) v[j][k] = __fadd_rn(xv[k], __fmul_rn(b[k], sc[k]));
    st8(xo, kCodeF32, base + c, v[j]);
    for (int k = 0; k < 8; ++k) ss += v[j][k] * v[j][k];
  }
  const float inv = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(cols) + eps);
#pragma unroll
  for (int j = 0; j < kResNormChunks; ++j) {
    const int64_t c = lane * 8 + j * 256;
    if (c >= cols) break;
    float wv[8];
    if (w) ld8(w, wt, c, wv);
    for (int k = 0; k < 8; ++k) {
      v[j][k] *= inv;
      if (w) v[j][k] *= wv[k];
    }
    st8(no, nt, base + c, v[j]);
  }
}

// group_norm statistics: sum and sum of squares per (n, group) in float64 (a group can hold
// hundreds of millions of elements in the video VAE).
__global__ void group_stats_kernel(const void* x, int xt, int64_t group_elems, int64_t chunk,
                                   double* stats) {
  const int64_t g = blockIdx.y;
  const int64_t begin = blockIdx.x * chunk;
  const int64_t end = min(group_elems, begin + chunk);
  const int64_t base = g * group_elems;
  double s = 0.0, ss = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = ld(x, xt, base + i);
    s += v;
    ss += v * v;
  }
  __shared__ double red[2][32];
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, o);
    ss += __shfl_xor_sync(0xffffffffu, ss, o);
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) {
    red[0][warp] = s;
    red[1][warp] = ss;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double ts = 0, tss = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
      ts += red[0][w];
      tss += red[1][w];
    }
    atomicAdd(&stats[2 * g], ts);
    atomicAdd(&stats[2 * g + 1], tss);
  }
}

__global__ void group_apply_kernel(const void* x, int xt, void* out, int ot, const double* stats,
                                   int64_t n, int64_t channels, int64_t spatial, int64_t groups,
                                   float eps, const void* w, int wt, const void* b, int bt) {
  const int64_t cpg = channels / groups;
  const double count = static_cast<double>(cpg * spatial);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (i / spatial) % channels;
    const int64_t nb = i / (spatial * channels);
    const int64_t g = nb * groups + c / cpg;
    const double mean = stats[2 * g] / count;
    double var = stats[2 * g + 1] / count - mean * mean;
    if (var < 0) var = 0;
    const float inv = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
    float v = (ld(x, xt, i) - static_cast<float>(mean)) * inv;
    if (w) v *= ld(w, wt, c);
    if (b) v += ld(b, bt, c);
    st(out, ot, i, v);
  }
}

void check_float(const Tensor& t, const char* op, const char* name) {
  H3_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16,
           ErrorCode::kUnsupported, "ops::", op, ": ", name, " dtype ", dtype_name(t.dtype()),
           " is not supported on CUDA (expected f32, bf16 or f16)");
}

// Common setup of the row kernels: x contiguous, output allocated, affine parameters checked.
struct RowSetup {
  Tensor x, out, w, b;
  RowArgs a{};
};

// alloc_out false: no output tensor (a kernel that writes another form of it, such as E4M3).
RowSetup row_setup(const Tensor& x_in, const Tensor* weight, const Tensor* bias, float eps,
                   const char* op, bool alloc_out = true) {
  require_cuda(x_in, op, "x");
  check_float(x_in, op, "x");
  H3_CHECK(x_in.dim() >= 1, ErrorCode::kInvalidArgument, "ops::", op, ": x is a scalar");
  set_device_of(x_in);
  RowSetup s;
  s.x = contiguous(x_in);
  const int64_t cols = s.x.size(-1);
  for (const Tensor* p : {weight, bias}) {
    if (!p) continue;
    require_cuda(*p, op, "weight/bias");
    require_same_device(x_in, *p, op);
    check_float(*p, op, "weight/bias");
    H3_CHECK(p->numel() == cols, ErrorCode::kInvalidArgument, "ops::", op, ": weight/bias ",
             shape_str(p->shape()), " does not match the last dim of x ", shape_str(x_in.shape()));
  }
  if (weight) s.w = contiguous(*weight);
  if (bias) s.b = contiguous(*bias);
  if (alloc_out) s.out = Tensor::empty(s.x.shape(), s.x.dtype(), s.x.device());
  s.a.x = s.x.raw();
  s.a.xt = dtype_code(s.x.dtype());
  s.a.out = s.out.defined() && s.out.numel() ? s.out.raw() : nullptr;
  // The output's dtype is x's, also where no output tensor is made: the E4M3 kernels round to it
  // first, as the two-op path stores it.
  s.a.ot = dtype_code(s.x.dtype());
  s.a.cols = cols;
  s.a.rows = cols ? s.x.numel() / cols : 0;
  s.a.eps = eps;
  s.a.w = weight ? s.w.raw() : nullptr;
  s.a.wt = weight ? dtype_code(s.w.dtype()) : 0;
  s.a.b = bias ? s.b.raw() : nullptr;
  s.a.bt = bias ? dtype_code(s.b.dtype()) : 0;
  return s;
}

// The row kernels' eight-at-a-time form applies (x, out and the weight vec8_ok, rows of 8k).
bool rows_vec8(const RowSetup& s) {
  return s.a.cols % 8 == 0 && vec8_ok(s.x) && vec8_ok(s.out) && (!s.a.w || vec8_ok(s.w));
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// Whether the register kernels take the rows of s (16-bit x of at most kRegMaxCols values in
// chunks of eight; x, the weight and, with_out, the output vec8_ok).
bool row_regs_fit(const RowSetup& s, bool with_out) {
  return (s.a.xt == kCodeBF16 || s.a.xt == kCodeF16) && s.a.cols % 8 == 0 &&
         s.a.cols <= kRegMaxCols && vec8_ok(s.x) && (!with_out || vec8_ok(s.out)) &&
         (!s.a.w || vec8_ok(s.w)) && fusion_enabled("ROW_REGS");
}

// Rows [0, rows) of rms_rows_regs_kernel.
template <RegOut kOut>
void launch_row_regs(const RowArgs& a, const RegExtra& e, int64_t rows) {
  const auto g = [](int64_t n) { return static_cast<unsigned>(n); };
  if (a.cols <= 8 * 256) {
    rms_rows_regs_kernel<1, 8, kOut><<<g((rows + 3) / 4), 128, 0, current_stream()>>>(a, e);
  } else {
    rms_rows_regs_kernel<4, 8, kOut><<<g(rows), 128, 0, current_stream()>>>(a, e);
  }
}

template <typename Launch>
void with_index_check(const char* op, int64_t tables, Device device, RowArgs& a, Launch&& launch) {
  run_index_checked(op, tables, "table rows", device, [&](int* bad) {
    a.bad = bad;
    launch();
  });
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor* weight, float eps) {
  RowSetup s = row_setup(x, weight, nullptr, eps, "rms_norm");
  if (s.a.rows == 0 || s.a.cols == 0) return s.out;
  if (row_regs_fit(s, true)) {
    launch_row_regs<RegOut::kNorm>(s.a, RegExtra{}, s.a.rows);
  } else if (rows_vec8(s)) {
    rms_rows_vec8_kernel<<<row_blocks(s.a.rows), kWarpsPerBlock * 32, 0, current_stream()>>>(s.a, 0);
  } else {
    rms_rows_kernel<<<row_blocks(s.a.rows), kWarpsPerBlock * 32, 0, current_stream()>>>(s.a, 0);
  }
  check_launch("rms_norm");
  return s.out;
}

Tensor layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps) {
  RowSetup s = row_setup(x, weight, bias, eps, "layer_norm");
  if (s.a.rows == 0 || s.a.cols == 0) return s.out;
  layer_norm_kernel<<<row_blocks(s.a.rows), kWarpsPerBlock * 32, 0, current_stream()>>>(s.a);
  check_launch("layer_norm");
  return s.out;
}

Tensor group_norm(const Tensor& x_in, int groups, const Tensor* weight, const Tensor* bias, float eps) {
  require_cuda(x_in, "group_norm", "x");
  check_float(x_in, "group_norm", "x");
  H3_CHECK(x_in.dim() >= 2 && groups > 0 && x_in.size(1) % groups == 0, ErrorCode::kInvalidArgument,
           "ops::group_norm: x ", shape_str(x_in.shape()), " cannot be split into ", groups,
           " groups over dim 1");
  const int64_t channels = x_in.size(1);
  for (const Tensor* p : {weight, bias}) {
    if (!p) continue;
    require_cuda(*p, "group_norm", "weight/bias");
    check_float(*p, "group_norm", "weight/bias");
    H3_CHECK(p->numel() == channels, ErrorCode::kInvalidArgument, "ops::group_norm: weight/bias ",
             shape_str(p->shape()), " does not match ", channels, " channels");
  }
  set_device_of(x_in);
  const Tensor x = contiguous(x_in);
  const Tensor w = weight ? contiguous(*weight) : Tensor();
  const Tensor b = bias ? contiguous(*bias) : Tensor();
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int64_t batch = x.size(0);
  const int64_t spatial = n / (batch * channels);
  const int64_t group_elems = (channels / groups) * spatial;
  Tensor stats = Tensor::zeros({batch * groups, 2}, DType::kF64, x.device());
  const int64_t chunk = 16384;
  const int64_t chunks = (group_elems + chunk - 1) / chunk;
  H3_CHECK(batch * groups <= 65535, ErrorCode::kUnsupported, "ops::group_norm: ", batch * groups,
           " (batch x groups) exceeds one launch");
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(batch * groups));
  group_stats_kernel<<<grid, 256, 0, current_stream()>>>(x.raw(), dtype_code(x.dtype()), group_elems,
                                                          chunk, static_cast<double*>(stats.raw()));
  check_launch("group_norm stats");
  group_apply_kernel<<<grid_for(n, 256), 256, 0, current_stream()>>>(
      x.raw(), dtype_code(x.dtype()), out.raw(), dtype_code(out.dtype()),
      static_cast<const double*>(stats.raw()), n, channels, spatial, groups, eps,
      weight ? w.raw() : nullptr, weight ? dtype_code(w.dtype()) : 0, bias ? b.raw() : nullptr,
      bias ? dtype_code(b.dtype()) : 0);
  check_launch("group_norm");
  return out;
}

namespace {

// rms_norm_modulate's checks and row arguments (the tables and indices bound), for its 16-bit and
// E4M3 outputs.
struct ModulateSetup {
  RowSetup s;
  Tensor sc, sh, idx;
};

ModulateSetup modulate_setup(const Tensor& x, const Tensor* weight, float eps,
                             const Tensor& scale_t, const Tensor& shift_t, const Tensor& idx_in,
                             const char* op, bool alloc_out) {
  for (const Tensor* t : {&scale_t, &shift_t, &idx_in}) require_cuda(*t, op, "input");
  check_float(scale_t, op, "scale");
  check_float(shift_t, op, "shift");
  H3_CHECK(x.dim() == 2 && scale_t.dim() == 2 && shift_t.shape() == scale_t.shape() &&
               scale_t.size(1) == x.size(1) && idx_in.numel() == x.size(0),
           ErrorCode::kInvalidArgument, "ops::", op,
           ": expected x [S, C], scale/shift [T, C], idx [S]; got x ", shape_str(x.shape()),
           ", scale ", shape_str(scale_t.shape()), ", shift ", shape_str(shift_t.shape()), ", idx ",
           shape_str(idx_in.shape()));
  H3_CHECK(idx_in.dtype() == DType::kI64 || idx_in.dtype() == DType::kI32,
           ErrorCode::kInvalidArgument, "ops::", op, ": index dtype ", dtype_name(idx_in.dtype()),
           " (expected i32 or i64)");
  ModulateSetup m;
  m.s = row_setup(x, weight, nullptr, eps, op, alloc_out);
  m.sc = contiguous(scale_t);
  m.sh = contiguous(shift_t);
  m.idx = contiguous(idx_in);
  RowArgs& a = m.s.a;
  a.scale = m.sc.raw();
  a.sct = dtype_code(m.sc.dtype());
  a.shift = m.sh.raw();
  a.sht = dtype_code(m.sh.dtype());
  a.idx.ptr = m.idx.raw();
  a.idx.is64 = m.idx.dtype() == DType::kI64;
  a.tables = m.sc.size(0);
  return m;
}

}  // namespace

Tensor rms_norm_modulate(const Tensor& x, const Tensor* weight, float eps, const Tensor& scale_t,
                         const Tensor& shift_t, const Tensor& idx_in) {
  if (!fusion_enabled("RMSNORM_MODULATE")) {
    return modulate(rms_norm(x, weight, eps), scale_t, shift_t, idx_in);
  }
  ModulateSetup m =
      modulate_setup(x, weight, eps, scale_t, shift_t, idx_in, "rms_norm_modulate", true);
  RowSetup& s = m.s;
  if (s.a.rows == 0 || s.a.cols == 0) return s.out;
  const bool vec = rows_vec8(s) && vec8_ok(m.sc) && vec8_ok(m.sh);
  const bool regs = vec && row_regs_fit(s, true);
  with_index_check("rms_norm_modulate", s.a.tables, s.x.device(), s.a, [&] {
    if (regs) {
      launch_row_regs<RegOut::kModulate>(s.a, RegExtra{}, s.a.rows);
    } else if (vec) {
      rms_rows_vec8_kernel<<<row_blocks(s.a.rows), kWarpsPerBlock * 32, 0, current_stream()>>>(s.a, 1);
    } else {
      rms_rows_kernel<<<row_blocks(s.a.rows), kWarpsPerBlock * 32, 0, current_stream()>>>(s.a, 1);
    }
  });
  return s.out;
}

bool rms_norm_modulate_fp8_fused(const Tensor& x, const Tensor* weight, const Tensor& scale,
                                 const Tensor& shift, Fp8ActScaling act) {
  const bool per_token = act == Fp8ActScaling::kPerToken;
  const bool per_group = act == Fp8ActScaling::kPerGroup && x.dim() == 2 && x.size(1) % 128 == 0;
  return (per_token || per_group) && x.dim() == 2 && x.size(1) % 8 == 0 && vec8_ok(x) &&
         (!weight || vec8_ok(*weight)) && vec8_ok(scale) && vec8_ok(shift) &&
         fusion_enabled("RMSNORM_MODULATE") && fusion_enabled("FP8_NORM_MODULATE");
}

Fp8Activation rms_norm_modulate_fp8(const Tensor& x, const Tensor* weight, float eps,
                                    const Tensor& scale_t, const Tensor& shift_t,
                                    const Tensor& idx_in, Fp8ActScaling act) {
  if (!rms_norm_modulate_fp8_fused(x, weight, scale_t, shift_t, act)) {
    return cuda::quantize_activation_fp8(
        cuda::rms_norm_modulate(x, weight, eps, scale_t, shift_t, idx_in), act);
  }
  ModulateSetup m =
      modulate_setup(x, weight, eps, scale_t, shift_t, idx_in, "rms_norm_modulate_fp8", false);
  RowSetup& s = m.s;
  const bool groups = act == Fp8ActScaling::kPerGroup;
  Fp8Activation out =
      groups ? empty_fp8_groups(s.a.rows, s.a.cols, s.x.shape(), s.x.dtype(), s.x.device())
             : empty_fp8_rows(s.a.rows, s.a.cols, s.x.shape(), s.x.dtype(), s.x.device());
  if (s.a.rows == 0) return out;
  auto* q = static_cast<uint8_t*>(out.data.raw());
  auto* qs = static_cast<float*>(out.scale.raw());
  const int64_t m4 = out.data.size(0);
  RegExtra e;
  e.q = q;
  e.qscale = qs;
  e.m4 = m4;
  const bool regs = row_regs_fit(s, false);
  with_index_check("rms_norm_modulate_fp8", s.a.tables, s.x.device(), s.a, [&] {
    if (regs && groups)
      launch_row_regs<RegOut::kFp8Groups>(s.a, e, m4);
    else if (regs)
      launch_row_regs<RegOut::kFp8Rows>(s.a, e, s.a.rows);
    else if (groups)
      rms_modulate_fp8_groups_kernel<<<row_blocks(m4), kWarpsPerBlock * 32, 0, current_stream()>>>(
          s.a, m4, q, qs);
    else
      rms_modulate_fp8_vec8_kernel<<<row_blocks(s.a.rows), kWarpsPerBlock * 32, 0,
                                     current_stream()>>>(s.a, q, qs);
  });
  return out;
}

namespace {

// gated_residual_rms_norm_modulate(_fp8)'s checks, and whether its one-kernel path applies: the
// branch in the residual's 16-bit dtype, the gate table shaped as the scale's, every operand
// vec8_ok and the rows within the register kernels' width; the fusions it joins on.
bool gated_norm_fits(const Tensor& res, const Tensor& branch, const Tensor& gate, const Tensor& idx,
                     const Tensor& scale, const char* op) {
  for (const Tensor* t : {&res, &branch, &gate, &idx}) require_cuda(*t, op, "input");
  check_float(res, op, "residual");
  check_float(branch, op, "branch");
  check_float(gate, op, "gate");
  H3_CHECK(res.dim() == 2 && branch.shape() == res.shape() && gate.dim() == 2 &&
               gate.size(1) == res.size(1) && idx.numel() == res.size(0),
           ErrorCode::kInvalidArgument, "ops::", op,
           ": expected residual/branch [S, C], gate [T, C], idx [S]; got ", shape_str(res.shape()),
           ", ", shape_str(branch.shape()), ", ", shape_str(gate.shape()), ", ",
           shape_str(idx.shape()));
  return branch.dtype() == res.dtype() && gate.shape() == scale.shape() && vec8_ok(branch) &&
         vec8_ok(gate) && fusion_enabled("GATED_NORM") && fusion_enabled("GATED_RESIDUAL");
}

// The gated residual's part of the register kernel's arguments; x_out is the sum's tensor.
RegExtra gated_extra(const Tensor& branch, const Tensor& gate, const Tensor& x_out) {
  RegExtra e;
  e.branch = branch.raw();
  e.gate = gate.raw();
  e.gt = dtype_code(gate.dtype());
  e.x_out = x_out.raw();
  return e;
}

}  // namespace

GatedNorm gated_residual_rms_norm_modulate(const Tensor& residual, const Tensor& branch,
                                           const Tensor& gate, const Tensor& idx,
                                           const Tensor* weight, float eps, const Tensor& scale,
                                           const Tensor& shift) {
  const char* op = "gated_residual_rms_norm_modulate";
  GatedNorm r;
  if (gated_norm_fits(residual, branch, gate, idx, scale, op)) {
    ModulateSetup m = modulate_setup(residual, weight, eps, scale, shift, idx, op, true);
    RowSetup& s = m.s;
    if (row_regs_fit(s, true) && vec8_ok(m.sc) && vec8_ok(m.sh) &&
        fusion_enabled("RMSNORM_MODULATE")) {
      const Tensor br = contiguous(branch), g = contiguous(gate);
      r.x = Tensor::empty(s.x.shape(), s.x.dtype(), s.x.device());
      r.modulated = s.out;
      if (s.a.rows == 0) return r;
      const RegExtra e = gated_extra(br, g, r.x);
      with_index_check(op, s.a.tables, s.x.device(), s.a,
                       [&] { launch_row_regs<RegOut::kModulate>(s.a, e, s.a.rows); });
      return r;
    }
  }
  r.x = cuda::gated_residual(residual, branch, gate, idx);
  r.modulated = cuda::rms_norm_modulate(r.x, weight, eps, scale, shift, idx);
  return r;
}

GatedNormFp8 gated_residual_rms_norm_modulate_fp8(const Tensor& residual, const Tensor& branch,
                                                  const Tensor& gate, const Tensor& idx,
                                                  const Tensor* weight, float eps,
                                                  const Tensor& scale, const Tensor& shift,
                                                  Fp8ActScaling act) {
  const char* op = "gated_residual_rms_norm_modulate_fp8";
  GatedNormFp8 r;
  if (gated_norm_fits(residual, branch, gate, idx, scale, op) &&
      rms_norm_modulate_fp8_fused(residual, weight, scale, shift, act)) {
    ModulateSetup m = modulate_setup(residual, weight, eps, scale, shift, idx, op, false);
    RowSetup& s = m.s;
    if (row_regs_fit(s, false)) {
      const Tensor br = contiguous(branch), g = contiguous(gate);
      const bool groups = act == Fp8ActScaling::kPerGroup;
      r.x = Tensor::empty(s.x.shape(), s.x.dtype(), s.x.device());
      r.modulated =
          groups ? empty_fp8_groups(s.a.rows, s.a.cols, s.x.shape(), s.x.dtype(), s.x.device())
                 : empty_fp8_rows(s.a.rows, s.a.cols, s.x.shape(), s.x.dtype(), s.x.device());
      if (s.a.rows == 0) return r;
      RegExtra e = gated_extra(br, g, r.x);
      e.q = static_cast<uint8_t*>(r.modulated.data.raw());
      e.qscale = static_cast<float*>(r.modulated.scale.raw());
      e.m4 = r.modulated.data.size(0);
      with_index_check(op, s.a.tables, s.x.device(), s.a, [&] {
        if (groups)
          launch_row_regs<RegOut::kFp8Groups>(s.a, e, e.m4);
        else
          launch_row_regs<RegOut::kFp8Rows>(s.a, e, s.a.rows);
      });
      return r;
    }
  }
  r.x = cuda::gated_residual(residual, branch, gate, idx);
  r.modulated = cuda::rms_norm_modulate_fp8(r.x, weight, eps, scale, shift, idx, act);
  return r;
}

namespace {

// Rows per lane group of qk_norm_rope_vec8_kernel: four where the heads come in fours (the DiT's
// 56, the video VAE decoder's 32), else two, else one; H3_QKROPE_ROWS=1 or 2 caps it.
int qk_rope_rows_per_group(int64_t heads) {
  const char* env = std::getenv("H3_QKROPE_ROWS");
  const int cap = env ? std::atoi(env) : 4;
  if (cap >= 4 && heads % 4 == 0) return 4;
  if (cap >= 2 && heads % 2 == 0) return 2;
  return 1;
}

}  // namespace

Tensor qk_norm_rope(const Tensor& x, const Tensor* weight, float eps, const Tensor& cos_t,
                    const Tensor& sin_t, int rotary_dim) {
  if (!fusion_enabled("QKNORM_ROPE")) return rope(rms_norm(x, weight, eps), cos_t, sin_t, rotary_dim);
  require_cuda(cos_t, "qk_norm_rope", "cos");
  require_cuda(sin_t, "qk_norm_rope", "sin");
  check_float(cos_t, "qk_norm_rope", "cos");
  check_float(sin_t, "qk_norm_rope", "sin");
  H3_CHECK(x.dim() == 3 && rotary_dim >= 0 && rotary_dim % 2 == 0 && rotary_dim <= x.size(2) &&
               cos_t.numel() == x.size(0) * rotary_dim && sin_t.numel() == cos_t.numel(),
           ErrorCode::kInvalidArgument, "ops::qk_norm_rope: expected x [S, H, D], cos/sin [S, ",
           rotary_dim, "] with an even rotary_dim <= D; got x ", shape_str(x.shape()), ", cos ",
           shape_str(cos_t.shape()), ", sin ", shape_str(sin_t.shape()));
  H3_CHECK(x.size(2) <= 4096, ErrorCode::kUnsupported, "ops::qk_norm_rope: head dim ", x.size(2),
           " above 4096");
  RowSetup s = row_setup(x, weight, nullptr, eps, "qk_norm_rope");
  if (s.a.rows == 0 || s.a.cols == 0) return s.out;
  const Tensor cs = contiguous(cos_t), sn = contiguous(sin_t);
  const int64_t lanes = s.a.cols / 8;
  if (rows_vec8(s) && vec8_ok(cs) && vec8_ok(sn) && rotary_dim % 16 == 0 &&
      (lanes == 8 || lanes == 16 || lanes == 32)) {
    constexpr int kThreads = 256;
    const int64_t heads = x.size(1);
    const int rows = qk_rope_rows_per_group(heads);
    const auto blocks = static_cast<unsigned>((s.a.rows / rows * lanes + kThreads - 1) / kThreads);
    auto launch = [&](auto kernel) {
      kernel<<<blocks, kThreads, 0, current_stream()>>>(s.a, heads, cs.raw(),
                                                        dtype_code(cs.dtype()), sn.raw(),
                                                        dtype_code(sn.dtype()), rotary_dim);
    };
    // G lanes per row, R rows per lane group.
    auto launch_g = [&](auto g) {
      constexpr int G = decltype(g)::value;
      switch (rows) {
        case 4:
          return launch(qk_norm_rope_vec8_kernel<G, 4>);
        case 2:
          return launch(qk_norm_rope_vec8_kernel<G, 2>);
        default:
          return launch(qk_norm_rope_vec8_kernel<G, 1>);
      }
    };
    switch (lanes) {
      case 8:
        launch_g(std::integral_constant<int, 8>{});
        break;
      case 16:
        launch_g(std::integral_constant<int, 16>{});
        break;
      default:
        launch_g(std::integral_constant<int, 32>{});
        break;
    }
    check_launch("qk_norm_rope");
    return s.out;
  }
  const size_t smem = static_cast<size_t>(kWarpsPerBlock) * s.a.cols * sizeof(float);
  if (smem > 48 * 1024) {
    H3_CUDA_CHECK(cudaFuncSetAttribute(qk_norm_rope_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  }
  qk_norm_rope_kernel<<<row_blocks(s.a.rows), kWarpsPerBlock * 32, smem, current_stream()>>>(
      s.a, x.size(1), cs.raw(), dtype_code(cs.dtype()), sn.raw(), dtype_code(sn.dtype()), rotary_dim);
  check_launch("qk_norm_rope");
  return s.out;
}

ResidualNorm layerscale_residual_rms_norm(const Tensor& x, const Tensor& branch, const Tensor& scale,
                                          const Tensor* weight, float eps, DType norm_dtype) {
  const char* op = "layerscale_residual_rms_norm";
  require_cuda(x, op, "x");
  require_cuda(branch, op, "branch");
  require_cuda(scale, op, "scale");
  check_float(branch, op, "branch");
  H3_CHECK(x.dim() == 2 && x.dtype() == DType::kF32 && branch.shape() == x.shape() &&
               scale.dtype() == DType::kF32 && scale.numel() == x.size(1),
           ErrorCode::kInvalidArgument, "ops::", op,
           ": expected x [S, C] float32, branch [S, C], scale [C] float32; got x ", x.desc(), ", branch ",
           branch.desc(), ", scale ", scale.desc());
  H3_CHECK(norm_dtype == DType::kF32 || norm_dtype == DType::kBF16 || norm_dtype == DType::kF16,
           ErrorCode::kUnsupported, "ops::", op, ": norm dtype ", dtype_name(norm_dtype),
           " (expected f32, bf16 or f16)");
  require_same_device(x, branch, op);
  require_same_device(x, scale, op);
  auto composed = [&] {
    ResidualNorm r;
    r.x = add(x, mul(branch.dtype() == DType::kF32 ? branch : cast(branch, DType::kF32), scale));
    const Tensor n = rms_norm(r.x, weight, eps);
    r.normed = n.dtype() == norm_dtype ? n : cast(n, norm_dtype);
    return r;
  };
  const int64_t cols = x.size(1);
  if (!fusion_enabled("RESIDUAL_NORM") || cols > kResNormChunks * 256) return composed();
  RowSetup s = row_setup(x, weight, nullptr, eps, op);
  const Tensor br = contiguous(branch), sc = contiguous(scale);
  if (!rows_vec8(s) || !vec8_ok(br) || !vec8_ok(sc)) return composed();
  ResidualNorm r;
  r.x = s.out;  // float32, x's shape
  r.normed = Tensor::empty(x.shape(), norm_dtype, x.device());
  if (s.a.rows == 0 || cols == 0) return r;
  residual_rms_vec8_kernel<<<row_blocks(s.a.rows), kWarpsPerBlock * 32, 0, current_stream()>>>(
      static_cast<const float*>(s.x.raw()), br.raw(), dtype_code(br.dtype()), static_cast<const float*>(sc.raw()),
      static_cast<float*>(r.x.raw()), r.normed.raw(), dtype_code(norm_dtype), s.a.w, s.a.wt, s.a.rows, cols, eps);
  check_launch(op);
  return r;
}

// ---- weight_norm -----------------------------------------------------------------------------

namespace {

constexpr int kWnThreads = 256;

// One block per slice of dim 0. Squares are exact in float64; the per-thread partial sums and the
// shuffle tree combine in a fixed order, so the fold is the same bits on every run. The CPU sums in
// index order: the two float64 sums differ in their last bits at most, which moves the float32
// norm only when it lies within that much of a rounding boundary.
__global__ void weight_norm_kernel(const void* g, int gt, const void* v, int vt, void* out, int ot,
                                   int64_t inner) {
  __shared__ double partial[kWnThreads / 32];
  __shared__ float scale;
  const int64_t row = blockIdx.x;
  const int64_t base = row * inner;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < inner; i += kWnThreads) {
    const double x = ld(v, vt, base + i);
    ss += x * x;
  }
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_down_sync(0xffffffffu, ss, off);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kWnThreads / 32; ++w) total += partial[w];
    const float norm = static_cast<float>(sqrt(total));
    scale = __fdiv_rn(ld(g, gt, row), norm);  // IEEE division, as the CPU's float32 g / norm
  }
  __syncthreads();
  const float s = scale;
  for (int64_t i = threadIdx.x; i < inner; i += kWnThreads)
    st(out, ot, base + i, __fmul_rn(ld(v, vt, base + i), s));
}

// out = the fold of v (contiguous, out's shape), one block per slice.
void launch_weight_norm(Tensor& out, const Tensor& g_in, const Tensor& v) {
  const Tensor g = contiguous(g_in);
  const int64_t rows = v.size(0);
  const int64_t inner = v.numel() / rows;
  if (inner == 0) return;
  H3_CHECK(rows <= 0x7fffffff, ErrorCode::kUnsupported, "ops::weight_norm: ", rows,
           " slices exceed one launch");
  weight_norm_kernel<<<static_cast<unsigned>(rows), kWnThreads, 0, current_stream()>>>(
      g.raw(), dtype_code(g.dtype()), v.raw(), dtype_code(v.dtype()), out.raw(),
      dtype_code(out.dtype()), inner);
  check_launch("weight_norm");
}

}  // namespace

Tensor weight_norm(const Tensor& g_in, const Tensor& v_in) {
  require_cuda(g_in, "weight_norm", "g");
  require_cuda(v_in, "weight_norm", "v");
  check_float(g_in, "weight_norm", "g");
  check_float(v_in, "weight_norm", "v");
  H3_CHECK(v_in.dim() >= 1 && v_in.size(0) >= 1 && g_in.numel() == v_in.size(0),
           ErrorCode::kInvalidArgument, "ops::weight_norm: g ", shape_str(g_in.shape()),
           " must hold one gain per slice of dim 0 of v ", shape_str(v_in.shape()));
  set_device_of(v_in);
  const Tensor v = contiguous(v_in);
  Tensor out = Tensor::empty(v.shape(), v.dtype(), v.device());
  launch_weight_norm(out, g_in, v);
  return out;
}

void weight_norm_into(Tensor& dst, const Tensor& g, const Tensor& v_in) {
  require_cuda(dst, "weight_norm_into", "dst");
  require_cuda(g, "weight_norm_into", "g");
  require_cuda(v_in, "weight_norm_into", "v");
  check_float(g, "weight_norm_into", "g");
  check_float(v_in, "weight_norm_into", "v");
  H3_CHECK(dst.is_contiguous() && dst.dtype() == DType::kF32 && dst.shape() == v_in.shape() &&
               v_in.size(0) >= 1 && g.numel() == v_in.size(0),
           ErrorCode::kInvalidArgument, "ops::weight_norm_into: dst ", dst.desc(), ", g ",
           shape_str(g.shape()), " and v ", v_in.desc(), " do not match");
  set_device_of(v_in);
  // A strided v is copied first; a contiguous one may be dst itself: each block reads its slice
  // whole before any thread writes it (weight_norm_kernel), and blocks own disjoint slices.
  launch_weight_norm(dst, g, contiguous(v_in));
}

}  // namespace h3::ops::cuda
