// VSA-H3 on CUDA (h3_dit_spec.md §5): the same stages as the CPU oracle (ops/cpu/vsa_cpu.cpp):
//   0. layout:   q, k, v copied into the padded tile-ordered buffer [n E, H, D] (the reference's
//                tile()), so every 64-row key block is contiguous and the fine kernel's loads need
//                no per-row index (gathering through the partition index ran at half the speed);
//   1. pool:     tile means of q, k, v over each tile's real rows (float64 sums, as the oracle),
//                taken in the same pass over the rows as the layout copy;
//   2. scores:   q̄ k̄ᵀ · scale per head (float64 dot products of the float32 means, rounded once,
//                so the scores, and with them the top-k masks, equal the oracle's bit for bit);
//   3. top-k:    one warp per (query tile, head) finds the k-th highest key of its row by radix
//                select (key = score then lower tile index first, the oracle's tie rule) and writes
//                the mask row and the ascending list of visible key tiles (a block per row above
//                1,024 tiles; H3_VSA_TOPK=sort keeps a bitonic sort for comparison);
//   4. compress: softmax over all tile scores times v̄ (only with a gate);
//   5. fine:     block-sparse flash attention: a CTA owns 64 query rows of one tile and one head and
//                streams the 64-row key blocks of its visible tiles, in tile order (a 256-row tile
//                is four blocks), through shared memory; S = Q Kᵀ and O += P V on mma.sync m16n8k16
//                with float32 accumulators; online softmax with exp2 (§5.5). The probabilities are
//                rounded to the activation dtype before P V and summed unrounded for the
//                denominator, the reference kernel's rounding points that the oracle emulates.
//                The gate combine out = round(fine + round(round(out_c) · g)) (§5.6) is fused into
//                the store.
// Grid order of the fine kernel puts the head fastest, so the dense prefix query tiles (which see
// every key tile) of all heads start first instead of forming a tail.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <tuple>
#include <vector>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/flash_mma.cuh"
#include "ops/cuda/vsa_cuda.h"
#include "ops/cuda/vsa_hopper.cuh"

namespace h3::ops::cuda {

namespace {

using namespace mma;

// ---- 0 + 1. layout and pooling ----------------------------------------------------------------

// grid (S, 3: q/k/v), block 128: row r of x to row untile[r] of the padded tile-ordered buffer
// [n E, H, D] (16-byte chunks), so the fine kernel reads each key block as 64 consecutive rows.
// Used alone when no scores are needed; otherwise vsa_tile_pool_kernel does this copy too.
__global__ void vsa_tile_kernel(const uint4* q, const uint4* k, const uint4* v, int64_t row_chunks,
                                const int* untile, uint4* tq, uint4* tk, uint4* tv) {
  const int64_t r = blockIdx.x;
  const uint4* x = blockIdx.y == 0 ? q : (blockIdx.y == 1 ? k : v);
  uint4* out = blockIdx.y == 0 ? tq : (blockIdx.y == 1 ? tk : tv);
  const int64_t dst = static_cast<int64_t>(untile[r]) * row_chunks, src = r * row_chunks;
  for (int64_t c = threadIdx.x; c < row_chunks; c += blockDim.x) out[dst + c] = x[src + c];
}

constexpr int kPoolThreads = 128;  // one 16-byte chunk of every row per thread
constexpr int kPoolSlots = 256;    // partition slots whose row offsets are staged at a time
constexpr int kPoolUnroll = 4;     // rows in flight per thread (the loads are independent)

template <typename T>
__device__ __forceinline__ void pool_add(double* acc, const uint4& u) {
  constexpr int kVec = 16 / sizeof(T);
  const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc[i] += static_cast<double>(to_f32(e[i]));
}

// grid (ceil(H D / (8 * 128)), n, 3: q/k/v), block 128. The copy into the tile-ordered buffer and
// the tile means in one pass, so each row is read from memory once: a CTA walks its tile's rows
// in partition order, and each thread copies its 16-byte chunk of the row and adds it to float64
// sums, out[h, t, d] = float(sum_j double(x[row_j, h, d]) / size_t), in the oracle's order.
template <typename T>
__global__ void __launch_bounds__(kPoolThreads)
    vsa_tile_pool_kernel(const uint4* q, const uint4* k, const uint4* v, int64_t row_chunks, int D, int n,
                         const int* starts, const int* part, const int* untile, uint4* tq, uint4* tk, uint4* tv,
                         float* qp, float* kp, float* vp) {
  constexpr int kVec = 16 / sizeof(T);  // values per chunk; a chunk never straddles two heads (D % 8 == 0)
  __shared__ int64_t src[kPoolSlots], dst[kPoolSlots];
  const int t = blockIdx.y, which = blockIdx.z;
  const uint4* x = which == 0 ? q : (which == 1 ? k : v);
  uint4* tiled = which == 0 ? tq : (which == 1 ? tk : tv);
  float* pooled = which == 0 ? qp : (which == 1 ? kp : vp);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kPoolThreads + threadIdx.x;
  const bool active = c < row_chunks;
  const int j0 = starts[t], j1 = starts[t + 1];
  double acc[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc[i] = 0.0;
  for (int b = j0; b < j1; b += kPoolSlots) {  // block-uniform trip count
    const int rows = min(kPoolSlots, j1 - b);
    __syncthreads();  // the previous rows' offsets are no longer read
    for (int j = threadIdx.x; j < rows; j += kPoolThreads) {
      const int r = part[b + j];
      src[j] = static_cast<int64_t>(r) * row_chunks;
      dst[j] = static_cast<int64_t>(untile[r]) * row_chunks;
    }
    __syncthreads();
    if (!active) continue;
    int j = 0;
    for (; j + kPoolUnroll <= rows; j += kPoolUnroll) {
      uint4 u[kPoolUnroll];
#pragma unroll
      for (int i = 0; i < kPoolUnroll; ++i) u[i] = x[src[j + i] + c];
#pragma unroll
      for (int i = 0; i < kPoolUnroll; ++i) {
        tiled[dst[j + i] + c] = u[i];
        pool_add<T>(acc, u[i]);
      }
    }
    for (; j < rows; ++j) {
      const uint4 u = x[src[j] + c];
      tiled[dst[j] + c] = u;
      pool_add<T>(acc, u);
    }
  }
  if (!active) return;
  const int64_t e0 = c * kVec;  // first value of the chunk in the [H, D] row
  const int64_t h = e0 / D, d = e0 % D;
  float* out = pooled + (h * n + t) * D + d;
  const double size = static_cast<double>(j1 - j0);
  static_assert(kVec % 4 == 0, "whole float4 stores");
#pragma unroll
  for (int i = 0; i < kVec; i += 4) {
    *reinterpret_cast<float4*>(out + i) =
        make_float4(static_cast<float>(acc[i] / size), static_cast<float>(acc[i + 1] / size),
                    static_cast<float>(acc[i + 2] / size), static_cast<float>(acc[i + 3] / size));
  }
}

// ---- 2. scores ---------------------------------------------------------------------------------

constexpr int kScTile = 96;          // 96 x 96 scores per CTA, 6 x 6 per thread of 16 x 16 (672 = 7 x 96)
constexpr int kScK = 8;              // head-dim values staged per pass
constexpr int kScLd = kScTile + 2;   // even, for 16-byte pairs; the odd pair stride spreads the staging stores
constexpr int kScThreads = 256;

// grid (ceil(n/96), ceil(n/96), H), block 256. float64 products of float32 values are exact, so
// summing them in d order (one accumulator per score) reproduces the oracle's float64 dot product
// exactly. The means are widened to float64 once, when staged: converting per product would bound
// the kernel by the conversion rate rather than the float64 FMA rate. Stage c holds column c of
// 96 q̄ rows and of 96 k̄ rows; a thread's rows are 2 ty + {0, 1} + 32 m (m < 3), so each operand
// fetch is one 16-byte load, and a warp (4 ty x 8 tx) reads 4 and 8 distinct pairs: one
// shared-memory wavefront each.
__global__ void __launch_bounds__(kScThreads, 2) vsa_scores_kernel(const float* qp, const float* kp, int n, int D,
                                                                   double scale, float* scores) {
  // Two stages, so one barrier per pass: a stage is refilled only after the barrier that follows
  // the pass reading it.
  __shared__ __align__(16) double sq[2][kScK * kScLd];
  __shared__ __align__(16) double sk[2][kScK * kScLd];
  constexpr int kStage = kScTile * kScK / kScThreads;  // staged values per thread and operand
  const int h = blockIdx.z, i0 = blockIdx.y * kScTile, j0 = blockIdx.x * kScTile;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int ty = (warp >> 1) * 4 + (lane >> 3), tx = (warp & 1) * 8 + (lane & 7);
  const float* qb = qp + static_cast<int64_t>(h) * n * D;
  const float* kb = kp + static_cast<int64_t>(h) * n * D;
  // Staged value s of this thread: row e / 8, column e % 8 of the pass, e = tid + 256 s.
  float rq[kStage], rk[kStage];
  auto fetch = [&](int c0) {
#pragma unroll
    for (int s = 0; s < kStage; ++s) {
      const int e = tid + kScThreads * s, r = e / kScK, c = c0 + e % kScK;
      rq[s] = i0 + r < n ? qb[static_cast<int64_t>(i0 + r) * D + c] : 0.0f;
      rk[s] = j0 + r < n ? kb[static_cast<int64_t>(j0 + r) * D + c] : 0.0f;
    }
  };
  auto stage = [&](int buf) {
#pragma unroll
    for (int s = 0; s < kStage; ++s) {
      const int e = tid + kScThreads * s, r = e / kScK, c = e % kScK;
      sq[buf][c * kScLd + r] = rq[s];
      sk[buf][c * kScLd + r] = rk[s];
    }
  };
  fetch(0);
  stage(0);
  __syncthreads();
  if (kScK < D) fetch(kScK);
  double acc[6][6];
#pragma unroll
  for (int a = 0; a < 6; ++a) {
#pragma unroll
    for (int b = 0; b < 6; ++b) acc[a][b] = 0.0;
  }
  for (int c0 = 0, buf = 0; c0 < D; c0 += kScK, buf ^= 1) {  // D is a multiple of 8
    const double* cq = sq[buf];
    const double* ck = sk[buf];
#pragma unroll
    for (int c = 0; c < kScK; ++c) {
      double a[6], b[6];
#pragma unroll
      for (int m = 0; m < 3; ++m) {
        const double2 av = *reinterpret_cast<const double2*>(cq + c * kScLd + 32 * m + 2 * ty);
        const double2 bv = *reinterpret_cast<const double2*>(ck + c * kScLd + 32 * m + 2 * tx);
        a[2 * m] = av.x;
        a[2 * m + 1] = av.y;
        b[2 * m] = bv.x;
        b[2 * m + 1] = bv.y;
      }
#pragma unroll
      for (int x = 0; x < 6; ++x) {
#pragma unroll
        for (int y = 0; y < 6; ++y) acc[x][y] += a[x] * b[y];
      }
    }
    if (c0 + kScK < D) {  // block-uniform
      stage(buf ^ 1);     // last read by the previous pass, which every thread has finished
      __syncthreads();
      if (c0 + 2 * kScK < D) fetch(c0 + 2 * kScK);  // in flight during the next pass's products
    }
  }
#pragma unroll
  for (int x = 0; x < 6; ++x) {
    const int i = i0 + 32 * (x >> 1) + 2 * ty + (x & 1);
    if (i >= n) continue;
    float* row = scores + (static_cast<int64_t>(h) * n + i) * n;
#pragma unroll
    for (int y = 0; y < 6; ++y) {
      const int j = j0 + 32 * (y >> 1) + 2 * tx + (y & 1);
      if (j < n) row[j] = static_cast<float>(acc[x][y] * scale);
    }
  }
}

// ---- 3. top-k block mask and key tile lists ----------------------------------------------------

// The sort key of score s at key tile j: the score in an order-preserving unsigned form, then the
// complemented index, so a descending order puts equal scores' lower index first. -0 counts as +0
// (the oracle's == ties).
__device__ __forceinline__ unsigned long long topk_key(float s, int j) {
  if (s == 0.0f) s = 0.0f;
  uint32_t u = __float_as_uint(s);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(u) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(j));
}

// A prefix query tile's row: every key tile visible. Thread `t` of `count` threads.
__device__ __forceinline__ void topk_all_visible(uint8_t* mrow, int* list, int* counts, int64_t row, int n, int t,
                                                 int count) {
  for (int j = t; j < n; j += count) {
    mrow[j] = 1;
    list[j] = j;
  }
  if (t == 0) counts[row] = n;
}

// One byte of the radix select, run by the 32 lanes of a warp: lane l holds bins [8 l, 8 l + 8)
// of the histogram of the next byte; counting from the top bin down, the bin where the running
// count reaches `rank` holds the k-th highest key. Returns true in the one lane that finds it,
// with the bin and the rank still sought inside it.
__device__ __forceinline__ bool topk_find_bin(const unsigned int* hist, int lane, int rank, int& bin,
                                              int& rank_in_bin) {
  unsigned int total = 0;
#pragma unroll
  for (int b = 0; b < 8; ++b) total += hist[8 * lane + b];
  unsigned int incl = total;  // sum over lanes >= lane
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const unsigned int other = __shfl_down_sync(0xffffffffu, incl, off);
    if (lane + off < 32) incl += other;
  }
  unsigned int above = incl - total;  // keys in higher bins
  bool found = false;
  for (int b = 7; b >= 0; --b) {
    const unsigned int c = hist[8 * lane + b];
    if (above < static_cast<unsigned int>(rank) && static_cast<unsigned int>(rank) <= above + c) {
      bin = 8 * lane + b;
      rank_in_bin = rank - static_cast<int>(above);
      found = true;
    }
    above += c;
  }
  return found;
}

// The ascending list of the flagged key tiles of a row and its length, by one warp: the fine kernel
// visits key tiles in tile order, as the oracle.
__device__ __forceinline__ void topk_write_list(const uint8_t* flag, int* list, int* counts, int64_t row, int n,
                                                int lane) {
  int base = 0;
  for (int j0 = 0; j0 < n; j0 += 32) {
    const int j = j0 + lane;
    const bool f = j < n && flag[j];
    const unsigned bal = __ballot_sync(0xffffffffu, f);
    if (f) list[base + __popc(bal & ((1u << lane) - 1u))] = j;
    base += __popc(bal);
  }
  if (lane == 0) counts[row] = base;
}

// grid (n, H), block 256, dynamic smem: np keys (u64) + n flags. Prefix query tiles see every key
// tile (§5.4); a video query tile keeps its k highest-scoring candidates (exempt: video key tiles
// only, prefix keys added; compete: all tiles, k = k_vid + P).
__global__ void __launch_bounds__(256) vsa_topk_kernel(const float* scores, int n, int P, int k_vid, int compete,
                                                       int np, int sort, uint8_t* mask, int* lists, int* counts) {
  extern __shared__ unsigned long long keys[];
  uint8_t* flag = reinterpret_cast<uint8_t*>(keys + np);
  const int i = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int64_t row = static_cast<int64_t>(h) * n + i;
  uint8_t* mrow = mask + row * n;
  int* list = lists + row * n;
  if (i < P) {
    topk_all_visible(mrow, list, counts, row, n, tid, blockDim.x);
    return;
  }
  const float* sr = scores + row * n;
  const int first = compete ? 0 : P;
  const int k = compete ? min(k_vid + P, n) : k_vid;
  for (int j = tid; j < np; j += blockDim.x) keys[j] = j >= first && j < n ? topk_key(sr[j], j) : 0ull;
  for (int j = tid; j < n; j += blockDim.x) flag[j] = 0;
  __syncthreads();
  if (!sort) {
    // Radix select (the default): the keys are distinct (the index is part of them), so the k
    // highest are exactly those >= the k-th highest, T. T is found a byte at a time from the top:
    // a histogram of the next byte over the keys that match the bytes found so far, then the
    // byte where the running count from the top reaches the rank still sought. Same set as the
    // sort below (H3_VSA_TOPK=sort), in 24 barriers instead of one per bitonic pass (55 at 1024).
    __shared__ unsigned int hist[256];
    __shared__ unsigned long long s_prefix;
    __shared__ int s_rank;
    const int rank0 = min(k, n - first);
    if (rank0 > 0) {  // uniform: every thread computes the same value
      unsigned long long prefix = 0, known = 0;
      int rank = rank0;  // the rank of T among the keys that match `prefix` on the `known` bits
      for (int shift = 56; shift >= 0; shift -= 8) {
        hist[tid] = 0u;  // blockDim.x == 256
        __syncthreads();
        for (int j = first + tid; j < n; j += blockDim.x) {
          const unsigned long long key = keys[j];
          if ((key & known) == prefix) atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
        }
        __syncthreads();
        if (tid < 32) {
          int bin = 0, rank_in_bin = 0;
          if (topk_find_bin(hist, tid, rank, bin, rank_in_bin)) {
            s_prefix = prefix | (static_cast<unsigned long long>(bin) << shift);
            s_rank = rank_in_bin;
          }
        }
        __syncthreads();
        prefix = s_prefix;
        rank = s_rank;
        known |= 0xFFull << shift;
      }
      for (int j = first + tid; j < n; j += blockDim.x) {
        if (keys[j] >= prefix) flag[j] = 1;
      }
    }
  } else {
    for (int size = 2; size <= np; size <<= 1) {
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int t = tid; t < np / 2; t += blockDim.x) {
          const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
          const unsigned long long a = keys[lo], b = keys[hi];
          const bool desc = (lo & size) == 0;
          if (desc ? a < b : a > b) {
            keys[lo] = b;
            keys[hi] = a;
          }
        }
        __syncthreads();
      }
    }
    for (int r = tid; r < k; r += blockDim.x) {
      flag[0xFFFFFFFFu - static_cast<uint32_t>(keys[r] & 0xFFFFFFFFull)] = 1;
    }
  }
  if (!compete) {
    for (int j = tid; j < P; j += blockDim.x) flag[j] = 1;
  }
  __syncthreads();
  for (int j = tid; j < n; j += blockDim.x) mrow[j] = flag[j];
  if (tid < 32) topk_write_list(flag, list, counts, row, n, tid);
}

constexpr int kTopkWarpMaxTiles = 1024;  // the warp kernel's limit (keys in shared memory per warp)
constexpr int kTopkWarps = 4;

// grid (ceil(n / 4), H), block 128, a warp per (query tile, head); dynamic smem 4 x (n keys (u64)
// + 256 bins + n flags). The same selection as the block radix select of vsa_topk_kernel (same
// keys, same byte-by-byte search for the k-th highest), with a warp's shuffles in place of block
// barriers: at n = 672 the block kernel spent its time in 24 barriers per row.
__global__ void __launch_bounds__(kTopkWarps * 32) vsa_topk_warp_kernel(const float* scores, int n, int P, int k_vid,
                                                                        int compete, uint8_t* mask, int* lists,
                                                                        int* counts) {
  extern __shared__ unsigned long long topk_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int i = blockIdx.x * kTopkWarps + warp, h = blockIdx.y;
  if (i >= n) return;  // warp-uniform; no block barrier below
  unsigned long long* keys = topk_smem + static_cast<size_t>(warp) * (n + 128);
  unsigned int* hist = reinterpret_cast<unsigned int*>(keys + n);
  uint8_t* flag = reinterpret_cast<uint8_t*>(topk_smem + static_cast<size_t>(kTopkWarps) * (n + 128)) +
                  static_cast<size_t>(warp) * n;
  const int64_t row = static_cast<int64_t>(h) * n + i;
  uint8_t* mrow = mask + row * n;
  int* list = lists + row * n;
  if (i < P) {
    topk_all_visible(mrow, list, counts, row, n, lane, 32);
    return;
  }
  const float* sr = scores + row * n;
  const int first = compete ? 0 : P;
  const int k = compete ? min(k_vid + P, n) : k_vid;
  for (int j = lane; j < n; j += 32) {
    keys[j] = j >= first ? topk_key(sr[j], j) : 0ull;
    flag[j] = 0;
  }
  __syncwarp();
  const int rank0 = min(k, n - first);
  if (rank0 > 0) {
    unsigned long long prefix = 0, known = 0;
    int rank = rank0;
    for (int shift = 56; shift >= 0; shift -= 8) {
#pragma unroll
      for (int b = 0; b < 8; ++b) hist[8 * lane + b] = 0u;
      __syncwarp();
      for (int j = first + lane; j < n; j += 32) {
        const unsigned long long key = keys[j];
        if ((key & known) == prefix) atomicAdd(&hist[(key >> shift) & 0xFFu], 1u);
      }
      __syncwarp();
      int bin = 0, rank_in_bin = 0;
      const bool mine = topk_find_bin(hist, lane, rank, bin, rank_in_bin);
      const int src = __ffs(__ballot_sync(0xffffffffu, mine)) - 1;  // exactly one lane
      bin = __shfl_sync(0xffffffffu, bin, src);
      rank = __shfl_sync(0xffffffffu, rank_in_bin, src);
      prefix |= static_cast<unsigned long long>(bin) << shift;
      known |= 0xFFull << shift;
      __syncwarp();  // the bins are read before the next pass clears them
    }
    for (int j = first + lane; j < n; j += 32) {
      if (keys[j] >= prefix) flag[j] = 1;
    }
  }
  if (!compete) {
    for (int j = lane; j < P; j += 32) flag[j] = 1;
  }
  __syncwarp();
  for (int j = lane; j < n; j += 32) mrow[j] = flag[j];
  topk_write_list(flag, list, counts, row, n, lane);
}

// ---- 4. compression branch ---------------------------------------------------------------------

constexpr int kCompRows = 32;     // query tiles per CTA (they share every load of v̄)
constexpr int kCompKeys = 32;     // key tiles per pass: one per lane
constexpr int kCompThreads = 128;
constexpr int kCompLdw = kCompRows + 4;  // row stride of the staged weights (16-byte aligned)

// grid (ceil(n/32), H), block 128. out_c[h, i] = Σ_j e^{s_ij - max} v̄_j / Σ_j e^{..}, as a small
// GEMM: passes of 32 key tiles stage the weights w[j][i] and v̄_j in shared memory, and each thread
// accumulates 4 query rows x D/16 columns, acc += w_ij v̄_j in j order (the oracle's order). Warp w
// owns rows 8 w .. 8 w + 7 for the softmax, and lane l computes key tile j0 + l of every pass, so
// its denominator partial sums run over j = l, l + 32, ... in order, then one warp_sum: the same
// sums as one warp walking the whole row.
template <int D>
__global__ void __launch_bounds__(kCompThreads) vsa_compress_kernel(const float* scores, const float* vp, int n,
                                                                    float* out_c) {
  constexpr int kRowsPerWarp = kCompRows / (kCompThreads / 32);
  constexpr int kCols = D / 16;                  // columns per thread: 8, 4, 2
  constexpr int kVec = kCols < 4 ? kCols : 4;    // columns per load
  constexpr int kGroups = kCols / kVec;          // column groups, 16 kVec apart
  __shared__ __align__(16) float ws[kCompKeys * kCompLdw];
  __shared__ __align__(16) float vs[kCompKeys * D];
  __shared__ float denom[kCompRows];
  const int h = blockIdx.y, i0 = blockIdx.x * kCompRows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;  // rows 4 ty .. 4 ty + 3
  const float* sb = scores + static_cast<int64_t>(h) * n * n;
  const float* vb = vp + static_cast<int64_t>(h) * n * D;
  float mx[kRowsPerWarp], part[kRowsPerWarp];
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int i = i0 + warp * kRowsPerWarp + k;
    float m = -INFINITY;
    if (i < n) {  // warp-uniform
      const float* sr = sb + static_cast<int64_t>(i) * n;
      for (int j = lane; j < n; j += 32) m = fmaxf(m, sr[j]);
    }
    mx[k] = warp_max(m);
    part[k] = 0.0f;
  }
  float acc[4][kCols];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  for (int j0 = 0; j0 < n; j0 += kCompKeys) {
    __syncthreads();  // the previous pass is no longer read
    const int j = j0 + lane;
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
      const int r = warp * kRowsPerWarp + k, i = i0 + r;
      float e = 0.0f;
      if (i < n && j < n) {
        e = expf(sb[static_cast<int64_t>(i) * n + j] - mx[k]);
        part[k] += e;
      }
      ws[lane * kCompLdw + r] = e;
    }
    for (int idx = threadIdx.x; idx < kCompKeys * (D / 4); idx += kCompThreads) {
      const int jj = idx / (D / 4), c = (idx % (D / 4)) * 4;
      const float4 val = j0 + jj < n ? *reinterpret_cast<const float4*>(vb + static_cast<int64_t>(j0 + jj) * D + c)
                                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      *reinterpret_cast<float4*>(vs + jj * D + c) = val;
    }
    __syncthreads();
    const int len = min(kCompKeys, n - j0);  // the zero padding's products could still flip a zero sum's sign
#pragma unroll 4
    for (int jj = 0; jj < len; ++jj) {
      const float4 w4 = *reinterpret_cast<const float4*>(ws + jj * kCompLdw + 4 * ty);
      const float w[4] = {w4.x, w4.y, w4.z, w4.w};
      float x[kCols];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const float* src = vs + jj * D + g * 16 * kVec + tx * kVec;
        if constexpr (kVec == 4) {
          const float4 v4 = *reinterpret_cast<const float4*>(src);
          x[g * 4] = v4.x;
          x[g * 4 + 1] = v4.y;
          x[g * 4 + 2] = v4.z;
          x[g * 4 + 3] = v4.w;
        } else {
          const float2 v2 = *reinterpret_cast<const float2*>(src);
          x[g * 2] = v2.x;
          x[g * 2 + 1] = v2.y;
        }
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[r][c] += w[r] * x[c];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const float sum = warp_sum(part[k]);
    if (lane == 0) denom[warp * kRowsPerWarp + k] = sum;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = i0 + 4 * ty + r;
    if (i >= n) continue;
    float* out = out_c + (static_cast<int64_t>(h) * n + i) * D;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
#pragma unroll
      for (int v = 0; v < kVec; ++v) out[g * 16 * kVec + tx * kVec + v] = acc[r][g * kVec + v] / denom[4 * ty + r];
    }
  }
}

// ---- 5. fine branch ----------------------------------------------------------------------------

struct FineParams {
  const void* q;
  const void* k;
  const void* v;
  const void* g;      // gate [S, H, D] or null
  const float* out_c; // [H, n, D] or null (no gate)
  void* o;            // output [S, H, D]
  void* fine;         // optional copy of the fine branch alone [S, H, D] (trace), or null
  int64_t row_stride; // H * D
  int n, sub, E;      // tiles, 64-row query blocks per tile (E / 64), tile size
  const int* starts;  // [n + 1] first partition slot of each tile
  const int* sizes;   // [n] real rows of each tile
  const int* part;    // [S] packed row of each partition slot
  const int* lists;   // [H, n, n] visible key tiles per (head, query tile), ascending; null: all
  const int* counts;  // [H, n]
  float scale_log2;
};

constexpr int kFineWarps = 4;
constexpr int kFineRows = 16 * kFineWarps;  // query rows per CTA
constexpr int kFineKeys = 64;               // key rows per block (the reference kernel's BLOCK_N)

// Shared memory of the fine kernel: Q, double-buffered K and V (row stride D + 8), then the CTA's
// list of visible key tiles and their sizes (so the loop never waits on a global index load).
template <int D>
constexpr size_t fine_smem_bytes() {
  return static_cast<size_t>(kFineRows + 4 * kFineKeys) * (D + 8) * 2;
}

// Copies rows [row0, row0 + rows) of the tiled buffer (rows < 64) into shared memory with row
// stride D + 8; the rest of the 64 rows are zero-filled (pad slots are never read).
template <typename T, int D>
__device__ __forceinline__ void load_rows(T* smem, const T* base, int64_t row_stride, int64_t row0, int rows) {
  constexpr int kChunks = D / 8;
  constexpr int LD = D + 8;
  for (int c = threadIdx.x; c < kFineKeys * kChunks; c += kFineWarps * 32) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = r < rows;
    const T* src = valid ? base + (row0 + r) * row_stride + col : base;
    cp_async_16(smem + r * LD + col, src, valid);
  }
}

template <typename T>
__device__ __forceinline__ T round_to(float x) {
  return from_f32<T>(x);
}

template <typename T, int D>
__global__ void __launch_bounds__(kFineWarps * 32, 2) vsa_fine_kernel(FineParams p) {
  constexpr int LD = D + 8;
  constexpr int KS = D / 16;          // k-steps of S = Q K^T
  constexpr int NB = kFineKeys / 8;   // n-blocks of S
  constexpr int DB = D / 8;           // n-blocks of O
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + kFineRows * LD;
  T* sV = sK + 2 * kFineKeys * LD;

  const int h = blockIdx.x;
  const int tile = blockIdx.y / p.sub;
  const int q_local = (blockIdx.y % p.sub) * kFineRows;  // first query row inside the tile
  const int q_rows = min(kFineRows, p.sizes[tile] - q_local);
  if (q_rows <= 0) return;  // a 256-row tile with fewer real rows than this block's offset
  const int64_t head_off = static_cast<int64_t>(h) * D;
  const T* qb = static_cast<const T*>(p.q) + head_off;
  const T* kb = static_cast<const T*>(p.k) + head_off;
  const T* vb = static_cast<const T*>(p.v) + head_off;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;

  const int64_t lrow = static_cast<int64_t>(h) * p.n + tile;
  const int count = p.lists ? p.counts[lrow] : p.n;
  int* s_tile = reinterpret_cast<int*>(sV + 2 * kFineKeys * LD);
  int* s_size = s_tile + p.n;
  for (int x = threadIdx.x; x < count; x += kFineWarps * 32) {
    const int j = p.lists ? p.lists[lrow * p.n + x] : x;
    s_tile[x] = j;
    s_size[x] = p.sizes[j];
  }
  __syncthreads();

  // Key block cursor: list position li, rows [b, b + 64) of tile s_tile[li] (of s_size[li] rows).
  int li = 0, b = 0;
  const int64_t E = p.E;
  load_rows<T, D>(sQ, qb, p.row_stride, tile * E + q_local, q_rows);
  if (count > 0) {
    const int64_t r0 = s_tile[0] * E;
    const int rows0 = min(kFineKeys, s_size[0]);
    load_rows<T, D>(sK, kb, p.row_stride, r0, rows0);
    load_rows<T, D>(sV, vb, p.row_stride, r0, rows0);
  }
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  uint32_t qf[KS][4];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) {
    ldmatrix_x4(qf[ks], sQ + (warp * 16 + (lane & 15)) * LD + ks * 16 + (lane >> 4) * 8);
  }
  float acc_o[DB][4];
#pragma unroll
  for (int i = 0; i < DB; ++i) acc_o[i][0] = acc_o[i][1] = acc_o[i][2] = acc_o[i][3] = 0.0f;
  float m_row[2] = {-INFINITY, -INFINITY};
  float l_row[2] = {0.0f, 0.0f};

  for (int it = 0; li < count; ++it) {
    const int rows = min(kFineKeys, s_size[li] - b);
    // The block after this one: the next 64 rows of this tile, else the next listed tile.
    int nli = li, nb0 = b + kFineKeys;
    if (nb0 >= s_size[li]) {
      nli = li + 1;
      nb0 = 0;
    }
    if (it > 0) {
      cp_async_wait_all();
      __syncthreads();
    }
    if (nli < count) {
      const int nb = (it + 1) & 1;
      const int64_t r0 = s_tile[nli] * E + nb0;
      const int nrows = min(kFineKeys, s_size[nli] - nb0);
      load_rows<T, D>(sK + nb * kFineKeys * LD, kb, p.row_stride, r0, nrows);
      load_rows<T, D>(sV + nb * kFineKeys * LD, vb, p.row_stride, r0, nrows);
      cp_async_commit();
    }
    const T* cK = sK + (it & 1) * kFineKeys * LD;
    const T* cV = sV + (it & 1) * kFineKeys * LD;

    float s[NB][4];
#pragma unroll
    for (int i = 0; i < NB; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
      for (int nb2 = 0; nb2 < NB / 2; ++nb2) {
        uint32_t b[4];
        ldmatrix_x4(b, cK + (nb2 * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + ks * 16 + ((lane >> 3) & 1) * 8);
        mma_16816<T>(s[2 * nb2], qf[ks], b[0], b[1]);
        mma_16816<T>(s[2 * nb2 + 1], qf[ks], b[2], b[3]);
      }
    }
    if (rows < kFineKeys) {  // a ragged tile: its pad slots are no keys
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (nb * 8 + tq * 2 + (e & 1) >= rows) s[nb][e] = -INFINITY;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_row[r], mx * p.scale_log2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = exp2f(m_row[r] - m_use);
      m_row[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const float p0 = exp2f(s[nb][2 * r] * p.scale_log2 - m_use);
        const float p1 = exp2f(s[nb][2 * r + 1] * p.scale_log2 - m_use);
        s[nb][2 * r] = p0;
        s[nb][2 * r + 1] = p1;
        sum += p0 + p1;
      }
      l_row[r] = l_row[r] * corr + sum;
#pragma unroll
      for (int db = 0; db < DB; ++db) {
        acc_o[db][2 * r] *= corr;
        acc_o[db][2 * r + 1] *= corr;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kFineKeys / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int db2 = 0; db2 < DB / 2; ++db2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, cV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + db2 * 16 + (lane >> 4) * 8);
        mma_16816<T>(acc_o[2 * db2], a, b[0], b[1]);
        mma_16816<T>(acc_o[2 * db2 + 1], a, b[2], b[3]);
      }
    }
    li = nli;
    b = nb0;
  }

  // Store: fine = round(acc / l); with a gate, out = round(fine + round(round(out_c) * g)).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_row[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int local = warp * 16 + g + 8 * r;
    if (local >= q_rows) continue;
    const int64_t off = static_cast<int64_t>(p.part[p.starts[tile] + q_local + local]) * p.row_stride + head_off;
    T* ob = static_cast<T*>(p.o) + off;
#pragma unroll
    for (int db = 0; db < DB; ++db) {
      const int c = db * 8 + tq * 2;
      float f0 = l > 0.0f ? acc_o[db][2 * r] / l : 0.0f;
      float f1 = l > 0.0f ? acc_o[db][2 * r + 1] / l : 0.0f;
      const uint32_t fine_bits = pack2<T>(f0, f1);
      if (p.fine) *reinterpret_cast<uint32_t*>(static_cast<T*>(p.fine) + off + c) = fine_bits;
      uint32_t out_bits = fine_bits;
      if (p.out_c) {
        f0 = to_f32(round_to<T>(f0));
        f1 = to_f32(round_to<T>(f1));
        const float* oc = p.out_c + (static_cast<int64_t>(h) * p.n + tile) * D + c;
        const T* gp = static_cast<const T*>(p.g) + off + c;
        const float c0 = to_f32(round_to<T>(oc[0])), c1 = to_f32(round_to<T>(oc[1]));
        const float g0 = to_f32(gp[0]), g1 = to_f32(gp[1]);
        const float t0 = to_f32(round_to<T>(c0 * g0)), t1 = to_f32(round_to<T>(c1 * g1));
        out_bits = pack2<T>(f0 + t0, f1 + t1);
      }
      *reinterpret_cast<uint32_t*>(ob + c) = out_bits;
    }
  }
}

// ---- host side ---------------------------------------------------------------------------------

// Timing events between the stages (only when the caller asks for stage times).
class StageClock {
 public:
  explicit StageClock(bool on) : on_(on) {}
  ~StageClock() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  StageClock(const StageClock&) = delete;
  StageClock& operator=(const StageClock&) = delete;
  // Marks the end of a stage; returns the mark's index (-1 when off).
  int mark() {
    if (!on_) return -1;
    cudaEvent_t e;
    H3_CUDA_CHECK(cudaEventCreate(&e));
    H3_CUDA_CHECK(cudaEventRecord(e, current_stream()));
    events_.push_back(e);
    return static_cast<int>(events_.size()) - 1;
  }
  double between(int a, int b) const {
    if (!on_ || a < 0 || b < 0) return 0.0;
    H3_CUDA_CHECK(cudaEventSynchronize(events_[b]));
    float ms = 0.0f;
    H3_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[a], events_[b]));
    return ms;
  }

 private:
  bool on_;
  std::vector<cudaEvent_t> events_;
};

Tensor upload_i32(const std::vector<int64_t>& v, Device dev) {
  Tensor h = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
  int32_t* p = h.data<int32_t>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<int32_t>(v[i]);
  return h.to(dev);
}

// The geometry's index arrays on one device (VsaGeometry::device_cache), with the host arrays they
// were made from.
struct VsaDeviceIndex {
  std::mutex mu;
  Device device = Device::cpu();
  std::vector<int64_t> sizes_host, untile_host, part_host;
  Tensor starts, part, sizes, untile;
};

// The device index arrays of `geo`: uploaded on the first call for a device (or when the host
// arrays changed since), then reused.
std::tuple<Tensor, Tensor, Tensor, Tensor> device_index(const VsaGeometry& geo, Device dev) {
  if (!geo.device_cache) geo.device_cache = std::make_shared<VsaDeviceIndex>();
  auto* c = static_cast<VsaDeviceIndex*>(geo.device_cache.get());
  std::lock_guard<std::mutex> lock(c->mu);
  if (!c->starts.defined() || c->device != dev || c->sizes_host != geo.tile_sizes ||
      c->untile_host != geo.untile_index || c->part_host != geo.partition_rows) {
    c->starts = upload_i32(geo.tile_starts(), dev);
    c->part = upload_i32(geo.partition_rows, dev);
    c->sizes = upload_i32(geo.tile_sizes, dev);
    c->untile = upload_i32(geo.untile_index, dev);
    c->device = dev;
    c->sizes_host = geo.tile_sizes;
    c->untile_host = geo.untile_index;
    c->part_host = geo.partition_rows;
  }
  return {c->starts, c->part, c->sizes, c->untile};
}

// dtypes and head dims without a GPU kernel: the CPU oracle on copies, results moved back.
Tensor vsa_on_host(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* g, const VsaGeometry& geo,
                   const VsaOptions& opt, VsaTrace* trace) {
  const Device dev = q.device();
  Tensor gh;
  if (g) gh = g->to(Device::cpu());
  Tensor out = ops::cpu::vsa_attention(q.to(Device::cpu()), k.to(Device::cpu()), v.to(Device::cpu()),
                                       g ? &gh : nullptr, geo, opt, trace);
  if (trace) {
    for (Tensor* t : {&trace->q_pooled, &trace->k_pooled, &trace->v_pooled, &trace->scores, &trace->mask,
                      &trace->fine, &trace->out_c_f32}) {
      if (t->defined()) *t = t->to(dev);
    }
  }
  return out.to(dev);
}

bool aligned_rows(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0; }

template <typename T, int D>
void launch_fine(const FineParams& p, int heads, int q_blocks) {
  const size_t smem = fine_smem_bytes<D>() + 2 * sizeof(int) * static_cast<size_t>(p.n);
  H3_CHECK(smem <= 227 * 1024, ErrorCode::kUnsupported, "vsa_attention on CUDA: ", p.n,
           " tiles do not fit the fine kernel's shared memory");
  auto kernel = vsa_fine_kernel<T, D>;
  H3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<dim3(static_cast<unsigned>(heads), static_cast<unsigned>(q_blocks)), kFineWarps * 32, smem,
           current_stream()>>>(p);
  check_launch("vsa_fine");
}

template <typename T>
void dispatch_fine(const FineParams& p, int D, int heads, int q_blocks) {
  switch (D) {
    case 32: launch_fine<T, 32>(p, heads, q_blocks); break;
    case 64: launch_fine<T, 64>(p, heads, q_blocks); break;
    case 128: launch_fine<T, 128>(p, heads, q_blocks); break;
    default: fail(ErrorCode::kInternal, "vsa_fine: head dim ", D);
  }
}

}  // namespace

Tensor vsa_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor* g_in,
                     const VsaGeometry& geo, const VsaOptions& opt, VsaTrace* trace, VsaStageTimes* times) {
  require_cuda(q_in, "vsa_attention", "q");
  require_cuda(k_in, "vsa_attention", "k");
  require_cuda(v_in, "vsa_attention", "v");
  require_same_device(q_in, k_in, "vsa_attention");
  require_same_device(q_in, v_in, "vsa_attention");
  H3_CHECK(q_in.dim() == 3 && k_in.shape() == q_in.shape() && v_in.shape() == q_in.shape(),
           ErrorCode::kInvalidArgument, "vsa_attention: q ", shape_str(q_in.shape()), ", k ",
           shape_str(k_in.shape()), ", v ", shape_str(v_in.shape()), " must all be [S, H, D]");
  H3_CHECK(q_in.size(0) == geo.seq_len, ErrorCode::kInvalidArgument, "vsa_attention: ", q_in.size(0),
           " rows, but the tiling was built for ", geo.seq_len);
  H3_CHECK(opt.sparsity >= 0.0 && opt.sparsity < 1.0, ErrorCode::kInvalidArgument, "VSA sparsity ",
           opt.sparsity, " is outside [0, 1)");
  if (g_in) {
    require_cuda(*g_in, "vsa_attention", "g");
    require_same_device(q_in, *g_in, "vsa_attention");
    H3_CHECK(g_in->shape() == q_in.shape(), ErrorCode::kInvalidArgument, "VSA gate ",
             shape_str(g_in->shape()), " does not match q ", shape_str(q_in.shape()));
  }
  const DType dt = q_in.dtype();
  const int64_t S = q_in.size(0), H = q_in.size(1), D = q_in.size(2);
  const int64_t n = geo.num_tiles(), P = geo.num_prefix_tiles, V = geo.num_video_tiles;
  const int sub = geo.tile_size / kFineKeys;
  const bool gpu_kernels = (dt == DType::kBF16 || dt == DType::kF16) && (D == 32 || D == 64 || D == 128) &&
                           k_in.dtype() == dt && v_in.dtype() == dt && (!g_in || g_in->dtype() == dt) &&
                           S < (1LL << 31) && n * sub <= 65535 && H <= 65535 && n * n * H < (1LL << 40);
  if (!gpu_kernels) return vsa_on_host(q_in, k_in, v_in, g_in, geo, opt, trace);
  set_device_of(q_in);
  const Device dev = q_in.device();
  auto prep = [](const Tensor& t) {
    Tensor r = contiguous(t);
    return aligned_rows(r) ? r : copy(r);
  };
  const Tensor q = prep(q_in), k = prep(k_in), v = prep(v_in);
  const Tensor g = g_in ? prep(*g_in) : Tensor();
  Tensor out = Tensor::empty({S, H, D}, dt, dev);
  if (S == 0) return out;

  StageClock clock(times != nullptr);
  const int t_begin = clock.mark();
  const auto [starts, part, sizes, untile] = device_index(geo, dev);
  const double scale = opt.scale > 0.0f ? static_cast<double>(opt.scale) : 1.0 / std::sqrt(static_cast<double>(D));

  const int64_t k_vid = vsa_topk(opt.sparsity, V);
  const bool all_visible = k_vid >= V;  // the oracle's "k_vid == V": every tile of every row
  const bool need_scores = !all_visible || g_in != nullptr || trace != nullptr;
  const int t_up = clock.mark();

  // The tile-ordered copies of q, k, v (pad slots are never read: loads past a tile's rows are
  // zero-filled by the fine kernel); with scores, the tile means come from the same pass over the
  // rows, so layout_ms then covers the pooling too and pool_ms is zero.
  const Tensor tq = Tensor::empty({n * geo.tile_size, H, D}, dt, dev);
  const Tensor tk = Tensor::empty({n * geo.tile_size, H, D}, dt, dev);
  const Tensor tv = Tensor::empty({n * geo.tile_size, H, D}, dt, dev);
  const int64_t row_chunks = H * D * static_cast<int64_t>(dtype_size(dt)) / 16;
  Tensor qp, kp, vp, scores, mask, lists, counts, out_c;
  if (need_scores) {
    qp = Tensor::empty({H, n, D}, DType::kF32, dev);
    kp = Tensor::empty({H, n, D}, DType::kF32, dev);
    vp = Tensor::empty({H, n, D}, DType::kF32, dev);
    const dim3 grid(static_cast<unsigned>((row_chunks + kPoolThreads - 1) / kPoolThreads), static_cast<unsigned>(n),
                    3);
    auto launch = [&](auto kernel) {
      kernel<<<grid, kPoolThreads, 0, current_stream()>>>(
          static_cast<const uint4*>(q.raw()), static_cast<const uint4*>(k.raw()),
          static_cast<const uint4*>(v.raw()), row_chunks, static_cast<int>(D), static_cast<int>(n),
          static_cast<const int*>(starts.raw()), static_cast<const int*>(part.raw()),
          static_cast<const int*>(untile.raw()), static_cast<uint4*>(tq.raw()), static_cast<uint4*>(tk.raw()),
          static_cast<uint4*>(tv.raw()), static_cast<float*>(qp.raw()), static_cast<float*>(kp.raw()),
          static_cast<float*>(vp.raw()));
    };
    if (dt == DType::kBF16) {
      launch(vsa_tile_pool_kernel<__nv_bfloat16>);
    } else {
      launch(vsa_tile_pool_kernel<__half>);
    }
    check_launch("vsa_tile_pool");
  } else {
    vsa_tile_kernel<<<dim3(static_cast<unsigned>(S), 3), 128, 0, current_stream()>>>(
        static_cast<const uint4*>(q.raw()), static_cast<const uint4*>(k.raw()), static_cast<const uint4*>(v.raw()),
        row_chunks, static_cast<const int*>(untile.raw()), static_cast<uint4*>(tq.raw()),
        static_cast<uint4*>(tk.raw()), static_cast<uint4*>(tv.raw()));
    check_launch("vsa_tile");
  }
  const int t_tile = clock.mark();

  int t_pool = t_tile, t_scores = t_tile, t_topk = t_tile, t_comp = t_tile;
  if (need_scores) {
    scores = Tensor::empty({H, n, n}, DType::kF32, dev);
    const unsigned tiles = static_cast<unsigned>((n + kScTile - 1) / kScTile);
    vsa_scores_kernel<<<dim3(tiles, tiles, static_cast<unsigned>(H)), kScThreads, 0, current_stream()>>>(
        static_cast<const float*>(qp.raw()), static_cast<const float*>(kp.raw()), static_cast<int>(n),
        static_cast<int>(D), scale, static_cast<float*>(scores.raw()));
    check_launch("vsa_scores");
    t_scores = clock.mark();
  }

  mask = Tensor::empty({H, n, n}, DType::kU8, dev);
  if (all_visible) {
    H3_CUDA_CHECK(cudaMemsetAsync(mask.raw(), 1, mask.nbytes(), current_stream()));
  } else {
    int np = 2;
    while (np < n) np <<= 1;
    H3_CHECK(np <= 8192, ErrorCode::kUnsupported, "vsa_attention on CUDA: ", n,
             " tiles per row (the top-k kernel sorts at most 8192)");
    lists = Tensor::empty({H, n, n}, DType::kI32, dev);
    counts = Tensor::empty({H, n}, DType::kI32, dev);
    // H3_VSA_TOPK=sort: the bitonic sort instead of the radix select; H3_VSA_TOPK=block: the radix
    // select with a block per row (same masks; for comparison).
    const char* topk_env = std::getenv("H3_VSA_TOPK");
    const bool topk_sort = topk_env && std::strcmp(topk_env, "sort") == 0;
    const bool topk_block = topk_sort || (topk_env && std::strcmp(topk_env, "block") == 0) || n > kTopkWarpMaxTiles;
    if (!topk_block) {
      const size_t w_smem = static_cast<size_t>(kTopkWarps) * ((static_cast<size_t>(n) + 128) * 8 + n);
      H3_CUDA_CHECK(cudaFuncSetAttribute(vsa_topk_warp_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(w_smem)));
      vsa_topk_warp_kernel<<<dim3(static_cast<unsigned>((n + kTopkWarps - 1) / kTopkWarps),
                                  static_cast<unsigned>(H)),
                             kTopkWarps * 32, w_smem, current_stream()>>>(
          static_cast<const float*>(scores.raw()), static_cast<int>(n), static_cast<int>(P), static_cast<int>(k_vid),
          opt.mode == VsaMode::kCompete ? 1 : 0, static_cast<uint8_t*>(mask.raw()), static_cast<int*>(lists.raw()),
          static_cast<int*>(counts.raw()));
    } else {
      const size_t tk_smem = static_cast<size_t>(np) * 8 + static_cast<size_t>(n);
      H3_CUDA_CHECK(cudaFuncSetAttribute(vsa_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(tk_smem)));
      vsa_topk_kernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(H)), 256, tk_smem,
                        current_stream()>>>(static_cast<const float*>(scores.raw()), static_cast<int>(n),
                                            static_cast<int>(P), static_cast<int>(k_vid),
                                            opt.mode == VsaMode::kCompete ? 1 : 0, np, topk_sort ? 1 : 0,
                                            static_cast<uint8_t*>(mask.raw()), static_cast<int*>(lists.raw()),
                                            static_cast<int*>(counts.raw()));
    }
    check_launch("vsa_topk");
  }
  t_topk = clock.mark();

  if (g_in) {
    out_c = Tensor::empty({H, n, D}, DType::kF32, dev);
    const dim3 grid(static_cast<unsigned>((n + kCompRows - 1) / kCompRows), static_cast<unsigned>(H));
    auto launch = [&](auto kernel) {
      kernel<<<grid, kCompThreads, 0, current_stream()>>>(static_cast<const float*>(scores.raw()),
                                                          static_cast<const float*>(vp.raw()), static_cast<int>(n),
                                                          static_cast<float*>(out_c.raw()));
    };
    switch (D) {
      case 32: launch(vsa_compress_kernel<32>); break;
      case 64: launch(vsa_compress_kernel<64>); break;
      default: launch(vsa_compress_kernel<128>); break;
    }
    check_launch("vsa_compress");
  }
  t_comp = clock.mark();

  Tensor fine;
  if (trace && g_in) fine = Tensor::empty({S, H, D}, dt, dev);
  FineParams fp{};
  fp.q = tq.raw();
  fp.k = tk.raw();
  fp.v = tv.raw();
  fp.g = g_in ? g.raw() : nullptr;
  fp.out_c = g_in ? static_cast<const float*>(out_c.raw()) : nullptr;
  fp.o = out.raw();
  fp.fine = fine.defined() ? fine.raw() : nullptr;
  fp.row_stride = H * D;
  fp.n = static_cast<int>(n);
  fp.sub = sub;
  fp.E = geo.tile_size;
  fp.sizes = static_cast<const int*>(sizes.raw());
  fp.starts = static_cast<const int*>(starts.raw());
  fp.part = static_cast<const int*>(part.raw());
  fp.lists = all_visible ? nullptr : static_cast<const int*>(lists.raw());
  fp.counts = all_visible ? nullptr : static_cast<const int*>(counts.raw());
  fp.scale_log2 = static_cast<float>(scale) * 1.44269504088896340736f;
  // Hopper tensor cores (vsa_hopper.cu) when eligible; H3_VSA_HOPPER=0 keeps the mma.sync kernel.
  const bool hopper = vsa_hopper_eligible(dev.index, D, geo.tile_size, n * geo.tile_size, H);
  if (hopper) {
    const Tensor blocks = Tensor::empty({H * n}, DType::kI32, dev);
    VsaHopperParams hp{};
    hp.blocks = static_cast<int*>(blocks.raw());
    hp.tq = tq.raw();
    hp.tk = tk.raw();
    hp.tv = tv.raw();
    hp.g = fp.g;
    hp.out_c = fp.out_c;
    hp.o = fp.o;
    hp.fine = fp.fine;
    hp.heads = static_cast<int>(H);
    hp.n = fp.n;
    hp.E = fp.E;
    hp.starts = fp.starts;
    hp.sizes = fp.sizes;
    hp.part = fp.part;
    hp.lists = fp.lists;
    hp.counts = fp.counts;
    hp.scale_log2 = fp.scale_log2;
    hp.f16 = dt == DType::kF16;
    vsa_hopper_fine(hp, current_stream());
  } else if (dt == DType::kBF16) {
    dispatch_fine<__nv_bfloat16>(fp, static_cast<int>(D), static_cast<int>(H), static_cast<int>(n * sub));
  } else {
    dispatch_fine<__half>(fp, static_cast<int>(D), static_cast<int>(H), static_cast<int>(n * sub));
  }
  const int t_fine = clock.mark();

  if (times) {
    times->layout_ms = clock.between(t_up, t_tile);
    times->pool_ms = clock.between(t_tile, t_pool);
    times->scores_ms = clock.between(t_pool, t_scores);
    times->topk_ms = clock.between(t_scores, t_topk);
    times->compress_ms = clock.between(t_topk, t_comp);
    times->fine_ms = clock.between(t_comp, t_fine);
    times->total_ms = clock.between(t_begin, t_fine);
    times->fine_hopper = hopper;
  }
  if (trace) {
    trace->q_pooled = qp;
    trace->k_pooled = kp;
    trace->v_pooled = vp;
    trace->scores = scores;
    trace->mask = mask;
    trace->fine = g_in ? fine : out;
    trace->out_c_f32 = out_c;
  }
  return out;
}

}  // namespace h3::ops::cuda
