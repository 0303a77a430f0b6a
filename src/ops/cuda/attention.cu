// Attention on CUDA: one op for every attention of the engine (ENGINEERING.md, "Attention comes
// in several shapes"): bidirectional or causal, grouped-query heads, block-diagonal batches
// (cu_seqlens), an optional additive mask.
//
// Two kernels:
// - flash_fwd: FlashAttention-2 style for bf16/f16 with head dims 16, 32, 64, 128 and no mask.
//   A CTA owns BR = 16 x warps query rows of one head; K/V tiles of BC rows stream through shared
//   memory (cp.async, double buffered); S = Q K^T and O += P V run on mma.sync m16n8k16 tensor
//   cores with float32 accumulators; the softmax is the online one (running max and sum per row,
//   exp2 with the scale folded in), so S never leaves registers.
// - attention_generic: float32 math for everything else (f32 inputs, head dims up to 256 such as
//   72 and 256, additive masks, unaligned views). A warp owns 4 query rows; lanes take one key
//   each for the scores and split the head dim for P V.
// H3_ATTN_GENERIC=1 forces the generic kernel (to bisect a suspected flash-kernel problem).
// On compute capability 9.0, flash calls with head dim 64 or 128 and no mask (causal or not) go to
// the wgmma/TMA kernel of attention_hopper.cu instead; H3_ATTN_HOPPER=0 keeps them on flash_fwd.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/attention_hopper.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/elementwise_util.cuh"
#include "ops/cuda/flash_mma.cuh"

namespace h3::ops::cuda {

namespace {

// A block of query rows and the key range it attends within: rows [q_start, q_end) of a segment
// that starts at seg_start (query and key indices coincide inside a segment) and whose keys are
// [seg_start, kv_end).
struct Tile {
  int q_start, q_end, seg_start, kv_end;
};

struct AttnParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  int64_t q_row, q_head, k_row, k_head, v_row, v_head, o_row, o_head;  // element strides
  int s_q, s_kv;
  int hq, group;  // query heads, query heads per key/value head
  int d;
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e)
  int causal;
  const Tile* tiles;  // null: one segment, tiles computed from blockIdx.x
  int tile_rows;
  const float* mask;  // [s_q, s_kv] additive, or null (generic kernel only)
  int dtype_code;     // generic kernel: q/k/v/o dtype code
};

__device__ __forceinline__ Tile tile_of(const AttnParams& p) {
  if (p.tiles) return p.tiles[blockIdx.x];
  Tile t;
  t.q_start = blockIdx.x * p.tile_rows;
  t.q_end = min(p.s_q, t.q_start + p.tile_rows);
  t.seg_start = 0;
  t.kv_end = p.s_kv;
  return t;
}

// ---- flash kernel ------------------------------------------------------------------------------

using namespace mma;  // the warp-level pieces shared with the VSA kernel (flash_mma.cuh)

template <int D>
struct FlashSmem {
  static constexpr int kStride = D + 8;  // +16 bytes per row: ldmatrix rows hit distinct banks
};

// Copies rows [row0, row0 + rows) of one head into shared memory (stride D + 8), zero-filling
// rows at or beyond row_end.
template <typename T, int D, int THREADS>
__device__ __forceinline__ void load_tile(T* smem, const T* base, int64_t row_stride, int row0, int rows,
                                          int row_end) {
  constexpr int kChunks = D / 8;
  for (int c = threadIdx.x; c < rows * kChunks; c += THREADS) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int gr = row0 + r;
    const bool valid = gr < row_end;
    const T* src = valid ? base + static_cast<int64_t>(gr) * row_stride + col : base;
    cp_async_16(smem + r * FlashSmem<D>::kStride + col, src, valid);
  }
}

template <typename T, int D, int NW, int BC>
__global__ void __launch_bounds__(NW * 32, 1) flash_fwd_kernel(AttnParams p) {
  constexpr int BR = 16 * NW;
  constexpr int THREADS = NW * 32;
  constexpr int LD = FlashSmem<D>::kStride;
  constexpr int KS = D / 16;   // k-steps of S = Q K^T
  constexpr int NB = BC / 8;   // n-blocks of S
  constexpr int DB = D / 8;    // n-blocks of O
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + BR * LD;
  T* sV = sK + 2 * BC * LD;

  const Tile tile = tile_of(p);
  const int head = blockIdx.y;
  const int kv_head = head / p.group;
  const T* qb = static_cast<const T*>(p.q) + head * p.q_head;
  const T* kb = static_cast<const T*>(p.k) + kv_head * p.k_head;
  const T* vb = static_cast<const T*>(p.v) + kv_head * p.v_head;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;

  // Key range: the whole segment, or up to the last query row's own position when causal.
  int kv_hi = tile.kv_end;
  if (p.causal) kv_hi = min(kv_hi, tile.q_end);
  const int kv_lo = tile.seg_start;
  const int n_tiles = kv_hi > kv_lo ? (kv_hi - kv_lo + BC - 1) / BC : 0;

  load_tile<T, D, THREADS>(sQ, qb, p.q_row, tile.q_start, BR, tile.q_end);
  if (n_tiles > 0) {
    load_tile<T, D, THREADS>(sK, kb, p.k_row, kv_lo, BC, kv_hi);
    load_tile<T, D, THREADS>(sV, vb, p.v_row, kv_lo, BC, kv_hi);
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
  // Query positions of this thread's two rows, relative to the segment start.
  const int q_rel0 = tile.q_start + warp * 16 + g - tile.seg_start;
  const int q_rel1 = q_rel0 + 8;

  for (int j = 0; j < n_tiles; ++j) {
    if (j > 0) {
      cp_async_wait_all();
      __syncthreads();
    }
    if (j + 1 < n_tiles) {
      const int nb = (j + 1) & 1;
      load_tile<T, D, THREADS>(sK + nb * BC * LD, kb, p.k_row, kv_lo + (j + 1) * BC, BC, kv_hi);
      load_tile<T, D, THREADS>(sV + nb * BC * LD, vb, p.v_row, kv_lo + (j + 1) * BC, BC, kv_hi);
      cp_async_commit();
    }
    const T* cK = sK + (j & 1) * BC * LD;
    const T* cV = sV + (j & 1) * BC * LD;

    float s[NB][4];
#pragma unroll
    for (int i = 0; i < NB; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
      for (int nb2 = 0; nb2 < NB / 2; ++nb2) {
        uint32_t b[4];
        ldmatrix_x4(b, cK + (nb2 * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + ks * 16 +
                           ((lane >> 3) & 1) * 8);
        mma_16816<T>(s[2 * nb2], qf[ks], b[0], b[1]);
        mma_16816<T>(s[2 * nb2 + 1], qf[ks], b[2], b[3]);
      }
    }

    // Mask keys past the range end and, when causal, keys after the query's own position.
    const int key0 = kv_lo + j * BC;  // absolute index of this tile's first key
    const bool need_mask = key0 + BC > kv_hi || (p.causal && key0 + BC - 1 - tile.seg_start > q_rel0 - g);
    if (need_mask) {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + nb * 8 + tq * 2 + (e & 1);
          const int q_rel = (e < 2) ? q_rel0 : q_rel1;
          const bool masked = key >= kv_hi || (p.causal && key - tile.seg_start > q_rel);
          if (masked) s[nb][e] = -INFINITY;
        }
      }
    }

    // Online softmax over this tile (rows g and g + 8 of the warp's 16).
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

    // O += P V, P taken from the S accumulators (C layout of two n-blocks = one A fragment).
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int db2 = 0; db2 < DB / 2; ++db2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, cV + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + db2 * 16 +
                                 (lane >> 4) * 8);
        mma_16816<T>(acc_o[2 * db2], a, b[0], b[1]);
        mma_16816<T>(acc_o[2 * db2 + 1], a, b[2], b[3]);
      }
    }
  }

  // Normalize and store this thread's two rows.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_row[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int row = tile.q_start + warp * 16 + g + 8 * r;
    if (row >= tile.q_end) continue;
    T* ob = static_cast<T*>(p.o) + static_cast<int64_t>(row) * p.o_row + head * p.o_head;
#pragma unroll
    for (int db = 0; db < DB; ++db) {
      const uint32_t v = pack2<T>(acc_o[db][2 * r] * inv, acc_o[db][2 * r + 1] * inv);
      *reinterpret_cast<uint32_t*>(ob + db * 8 + tq * 2) = v;
    }
  }
}

// ---- generic kernel -------------------------------------------------------------------------------

constexpr int kGenWarps = 4;
constexpr int kGenRowsPerWarp = 4;
constexpr int kGenRows = kGenWarps * kGenRowsPerWarp;  // query rows per CTA
constexpr int kGenKeys = 32;                             // keys per tile (one per lane)
constexpr int kGenMaxD = 256;

__global__ void __launch_bounds__(kGenWarps * 32) attention_generic_kernel(AttnParams p) {
  extern __shared__ float gsm[];
  const int d = p.d;
  float* sQ = gsm;                          // [kGenRows][d]
  float* sK = sQ + kGenRows * d;            // [kGenKeys][d + 1]
  float* sV = sK + kGenKeys * (d + 1);      // [kGenKeys][d]
  const Tile tile = tile_of(p);
  const int head = blockIdx.y, kv_head = head / p.group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int code = p.dtype_code;

  for (int i = threadIdx.x; i < kGenRows * d; i += blockDim.x) {
    const int r = i / d, c = i % d;
    const int row = tile.q_start + r;
    sQ[i] = row < tile.q_end ? ld(p.q, code, static_cast<int64_t>(row) * p.q_row + head * p.q_head + c) : 0.0f;
  }

  int kv_hi = tile.kv_end;
  if (p.causal) kv_hi = min(kv_hi, tile.q_end);
  const int kv_lo = tile.seg_start;

  constexpr int kMaxChunks = kGenMaxD / 32;
  float o[kGenRowsPerWarp][kMaxChunks];
  float m[kGenRowsPerWarp], l[kGenRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) o[r][c] = 0.0f;
  }

  for (int key0 = kv_lo; key0 < kv_hi; key0 += kGenKeys) {
    __syncthreads();
    for (int i = threadIdx.x; i < kGenKeys * d; i += blockDim.x) {
      const int r = i / d, c = i % d;
      const int key = key0 + r;
      float kv = 0.0f, vv = 0.0f;
      if (key < kv_hi) {
        kv = ld(p.k, code, static_cast<int64_t>(key) * p.k_row + kv_head * p.k_head + c);
        vv = ld(p.v, code, static_cast<int64_t>(key) * p.v_row + kv_head * p.v_head + c);
      }
      sK[r * (d + 1) + c] = kv;
      sV[r * d + c] = vv;
    }
    __syncthreads();
    const int key = key0 + lane;
#pragma unroll
    for (int r = 0; r < kGenRowsPerWarp; ++r) {
      const int qr = warp * kGenRowsPerWarp + r;
      const int row = tile.q_start + qr;
      if (row >= tile.q_end) continue;  // warp-uniform
      const float* q = sQ + qr * d;
      const float* kr = sK + lane * (d + 1);
      float sc = 0.0f;
      for (int c = 0; c < d; ++c) sc += q[c] * kr[c];
      sc *= p.scale;
      bool masked = key >= kv_hi || (p.causal && key - tile.seg_start > row - tile.seg_start);
      if (!masked && p.mask) sc += p.mask[static_cast<int64_t>(row) * p.s_kv + key];
      if (masked) sc = -INFINITY;
      const float mx = warp_max(sc);
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float pr = expf(sc - m_use);
      const float corr = expf(m[r] - m_use);
      m[r] = m_new;
      l[r] = l[r] * corr + warp_sum(pr);
#pragma unroll
      for (int c = 0; c < kMaxChunks; ++c) o[r][c] *= corr;
      for (int j = 0; j < kGenKeys; ++j) {
        const float pj = __shfl_sync(0xffffffffu, pr, j);
        if (pj == 0.0f) continue;  // uniform across the warp
        const float* vr = sV + j * d;
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c) {
          const int col = lane + 32 * c;
          if (col < d) o[r][c] += pj * vr[col];
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kGenRowsPerWarp; ++r) {
    const int row = tile.q_start + warp * kGenRowsPerWarp + r;
    if (row >= tile.q_end) continue;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
    for (int c = 0; c < kMaxChunks; ++c) {
      const int col = lane + 32 * c;
      if (col < d) st(p.o, code, static_cast<int64_t>(row) * p.o_row + head * p.o_head + col, o[r][c] * inv);
    }
  }
}

// ---- host side ------------------------------------------------------------------------------------

// Tiles of `rows` query rows per segment (only built for block-diagonal batches).
std::vector<Tile> build_tiles(const std::vector<int64_t>& cu, int rows) {
  std::vector<Tile> tiles;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    for (int64_t q = cu[s]; q < cu[s + 1]; q += rows) {
      tiles.push_back(Tile{static_cast<int>(q), static_cast<int>(std::min<int64_t>(q + rows, cu[s + 1])),
                           static_cast<int>(cu[s]), static_cast<int>(cu[s + 1])});
    }
  }
  return tiles;
}

struct Launch {
  AttnParams p;
  unsigned grid_x;
  Tensor tiles;  // keeps the device tile list alive until the kernel is queued
};

Launch prepare(const AttnParams& base, const std::vector<int64_t>& cu, int rows, Device device) {
  Launch l;
  l.p = base;
  l.p.tile_rows = rows;
  if (cu.empty()) {
    l.p.tiles = nullptr;
    l.grid_x = static_cast<unsigned>((base.s_q + rows - 1) / rows);
    return l;
  }
  const std::vector<Tile> tiles = build_tiles(cu, rows);
  l.grid_x = static_cast<unsigned>(tiles.size());
  if (tiles.empty()) return l;
  l.tiles = Tensor::empty({static_cast<int64_t>(tiles.size() * 4)}, DType::kI32, device);
  H3_CUDA_CHECK(cudaMemcpyAsync(l.tiles.raw(), tiles.data(), tiles.size() * sizeof(Tile),
                                cudaMemcpyHostToDevice, current_stream()));
  l.p.tiles = static_cast<const Tile*>(l.tiles.raw());
  return l;
}

template <typename T, int D, int NW, int BC>
void launch_flash(const AttnParams& base, const std::vector<int64_t>& cu, Device device) {
  constexpr int BR = 16 * NW;
  Launch l = prepare(base, cu, BR, device);
  if (l.grid_x == 0) return;
  const size_t smem = static_cast<size_t>(BR + 4 * BC) * (D + 8) * sizeof(T);
  auto kernel = flash_fwd_kernel<T, D, NW, BC>;
  H3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  kernel<<<dim3(l.grid_x, static_cast<unsigned>(base.hq)), NW * 32, smem, current_stream()>>>(l.p);
  check_launch("flash_fwd");
}

template <typename T>
void dispatch_flash(const AttnParams& p, const std::vector<int64_t>& cu, Device device, int variant) {
  switch (p.d) {
    case 16: launch_flash<T, 16, 8, 64>(p, cu, device); break;
    case 32: launch_flash<T, 32, 8, 64>(p, cu, device); break;
    case 64: launch_flash<T, 64, 8, 64>(p, cu, device); break;
    case 128:
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        // Variants for the benchmark (H3_ATTN_VARIANT); 0 is the default.
        if (variant == 1) {
          launch_flash<T, 128, 4, 64>(p, cu, device);
          break;
        }
        if (variant == 2) {
          launch_flash<T, 128, 8, 32>(p, cu, device);
          break;
        }
      }
      launch_flash<T, 128, 8, 64>(p, cu, device);
      break;
    default: fail(ErrorCode::kInternal, "flash attention: head dim ", p.d);
  }
}

void launch_generic(const AttnParams& base, const std::vector<int64_t>& cu, Device device) {
  Launch l = prepare(base, cu, kGenRows, device);
  if (l.grid_x == 0) return;
  const int d = base.d;
  const size_t smem = static_cast<size_t>(kGenRows * d + kGenKeys * (d + 1) + kGenKeys * d) * sizeof(float);
  H3_CUDA_CHECK(cudaFuncSetAttribute(attention_generic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  attention_generic_kernel<<<dim3(l.grid_x, static_cast<unsigned>(base.hq)), kGenWarps * 32, smem,
                             current_stream()>>>(l.p);
  check_launch("attention_generic");
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "1") == 0;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

bool aligned16(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0 && t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0;
}

}  // namespace

namespace {

// Whether the mma.sync flash kernel takes these inputs (whatever H3_ATTN_GENERIC says).
bool flash_fits(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask) {
  const int64_t d = q.size(2);
  const bool half = q.dtype() == DType::kBF16 || q.dtype() == DType::kF16;
  const bool dims = d == 16 || d == 32 || d == 64 || d == 128;
  const bool layout = q.stride(2) == 1 && k.stride(2) == 1 && v.stride(2) == 1 && aligned16(q) &&
                      aligned16(k) && aligned16(v) && k.dtype() == q.dtype() && v.dtype() == q.dtype();
  return half && dims && !mask && layout;
}

// q/k/v as the kernels read them: k and v in q's dtype, the last dim dense.
struct Prepared {
  Tensor q, k, v;
};
Prepared prepare(const Tensor& q, const Tensor& k, const Tensor& v) {
  auto prep = [&](const Tensor& t) {
    Tensor r = t.dtype() == q.dtype() ? t : cast(t, q.dtype());
    if (r.stride(2) != 1) r = copy(r);
    return r;
  };
  return {prep(q), prep(k), prep(v)};
}

// The kernel for prepared inputs: ap.kernel when it takes them (else a clear error), or the
// fastest one that does.
AttentionKernel choose_kernel(const Prepared& in, const AttentionParams& ap, const Tensor* mask) {
  const Tensor &q = in.q, &k = in.k, &v = in.v;
  const bool flash = flash_fits(q, k, v, mask);
  const std::string shapes = "q " + shape_str(q.shape()) + " " + dtype_name(q.dtype()) + ", k " +
                             shape_str(k.shape()) + (ap.causal ? ", causal" : "") + (mask ? ", masked" : "");
  switch (ap.kernel) {
    case AttentionKernel::kAuto:
      if (flash && env_int("H3_ATTN_VARIANT", 0) == 0 && !env_flag("H3_ATTN_GENERIC") &&
          hopper_attention_eligible(q, k, v, ap.causal, mask)) {
        return AttentionKernel::kHopper;
      }
      return flash && !env_flag("H3_ATTN_GENERIC") ? AttentionKernel::kMma : AttentionKernel::kGeneric;
    case AttentionKernel::kHopper:
      H3_CHECK(flash && hopper_attention_fits(q, k, v, ap.causal, mask), ErrorCode::kUnsupported,
               "ops::attention: the hopper kernel does not take these inputs (it needs a compute "
               "capability 9.0 GPU with the sm_90a kernels built in, f16/bf16, head dim 64 or 128, "
               "no mask, rows 16-byte aligned); got ",
               shapes, " on ", q.device().str());
      return AttentionKernel::kHopper;
    case AttentionKernel::kMma:
      H3_CHECK(flash, ErrorCode::kUnsupported,
               "ops::attention: the mma kernel does not take these inputs (it needs f16/bf16, head dim 16, 32, 64 or "
               "128, no mask, rows 16-byte aligned); got ", shapes);
      return AttentionKernel::kMma;
    case AttentionKernel::kGeneric:
      return AttentionKernel::kGeneric;
    case AttentionKernel::kCpu:
      break;
  }
  fail(ErrorCode::kInvalidArgument, "ops::attention: kernel '", attention_kernel_name(ap.kernel),
       "' asked for on ", q.device().str());
}

}  // namespace

AttentionPath attention_path(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask) {
  if (flash_fits(q, k, v, mask) && !env_flag("H3_ATTN_GENERIC")) return AttentionPath::kFlash;
  return AttentionPath::kGeneric;
}

AttentionKernel attention_kernel_for(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& ap,
                                     const Tensor* mask) {
  set_device_of(q);
  return choose_kernel(prepare(q, k, v), ap, mask);
}

Tensor attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const AttentionParams& ap,
                 const Tensor* mask) {
  require_cuda(q_in, "attention", "q");
  require_cuda(k_in, "attention", "k");
  require_cuda(v_in, "attention", "v");
  require_same_device(q_in, k_in, "attention");
  require_same_device(q_in, v_in, "attention");
  H3_CHECK(q_in.dim() == 3 && k_in.dim() == 3 && v_in.shape() == k_in.shape() && q_in.size(2) == k_in.size(2) &&
               k_in.size(1) > 0 && q_in.size(1) % k_in.size(1) == 0,
           ErrorCode::kInvalidArgument, "ops::attention: expected q [S, Hq, D], k/v [S_kv, Hkv, D] with Hq % Hkv == 0; got q ",
           shape_str(q_in.shape()), ", k ", shape_str(k_in.shape()), ", v ", shape_str(v_in.shape()));
  const DType dt = q_in.dtype();
  H3_CHECK(dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16, ErrorCode::kUnsupported,
           "ops::attention: dtype ", dtype_name(dt), " on CUDA (expected f32, bf16 or f16)");
  const int64_t s_q = q_in.size(0), s_kv = k_in.size(0), d = q_in.size(2);
  H3_CHECK(s_q < (1LL << 31) && s_kv < (1LL << 31), ErrorCode::kUnsupported,
           "ops::attention: sequence too long for CUDA (", s_q, ", ", s_kv, ")");
  H3_CHECK(d >= 1 && d <= kGenMaxD, ErrorCode::kUnsupported, "ops::attention: head dim ", d,
           " on CUDA (at most ", kGenMaxD, ")");
  const std::vector<int64_t>& cu = ap.cu_seqlens;
  if (!cu.empty()) {
    H3_CHECK(cu.size() >= 2 && cu.front() == 0 && cu.back() == s_q && s_q == s_kv, ErrorCode::kInvalidArgument,
             "ops::attention: cu_seqlens must run from 0 to S = S_kv (", s_q, ", ", s_kv, ")");
    for (size_t i = 1; i < cu.size(); ++i) {
      H3_CHECK(cu[i] >= cu[i - 1], ErrorCode::kInvalidArgument, "ops::attention: cu_seqlens decreases at ", i);
    }
  }
  if (mask) {
    require_cuda(*mask, "attention", "mask");
    H3_CHECK(mask->dim() == 2 && mask->size(0) == s_q && mask->size(1) == s_kv, ErrorCode::kInvalidArgument,
             "ops::attention: mask ", shape_str(mask->shape()), " (expected [", s_q, ", ", s_kv, "])");
  }
  set_device_of(q_in);
  // Mixed dtypes are brought to q's; strided views are used as they are when the last dim is dense.
  const Prepared in = prepare(q_in, k_in, v_in);
  const Tensor &q = in.q, &k = in.k, &v = in.v;
  const AttentionKernel kernel = choose_kernel(in, ap, mask);
  const Tensor m = mask ? as_dtype(*mask, DType::kF32) : Tensor();
  Tensor out = Tensor::empty(q.shape(), dt, q.device());
  if (out.numel() == 0) return out;

  AttnParams p{};
  p.q = q.raw();
  p.k = k.raw();
  p.v = v.raw();
  p.o = out.raw();
  p.q_row = q.stride(0);
  p.q_head = q.stride(1);
  p.k_row = k.stride(0);
  p.k_head = k.stride(1);
  p.v_row = v.stride(0);
  p.v_head = v.stride(1);
  p.o_row = out.stride(0);
  p.o_head = out.stride(1);
  p.s_q = static_cast<int>(s_q);
  p.s_kv = static_cast<int>(s_kv);
  p.hq = static_cast<int>(q.size(1));
  p.group = static_cast<int>(q.size(1) / k.size(1));
  p.d = static_cast<int>(d);
  p.scale = ap.scale > 0.0f ? ap.scale : 1.0f / std::sqrt(static_cast<float>(d));
  p.scale_log2 = p.scale * 1.4426950408889634f;
  p.causal = ap.causal ? 1 : 0;
  p.mask = mask ? static_cast<const float*>(m.raw()) : nullptr;
  p.dtype_code = dtype_code(dt);
  H3_CHECK(p.hq <= 65535, ErrorCode::kUnsupported, "ops::attention: ", p.hq, " heads in one launch");

  if (kernel == AttentionKernel::kHopper) {
    hopper_attention(q, k, v, out, p.scale, cu, ap.causal);
  } else if (kernel == AttentionKernel::kMma) {
    // H3_ATTN_VARIANT picks a benchmark variant of the mma.sync kernel (and rules out the Hopper one).
    const int variant = env_int("H3_ATTN_VARIANT", 0);
    if (dt == DType::kBF16) {
      dispatch_flash<__nv_bfloat16>(p, cu, q.device(), variant);
    } else {
      dispatch_flash<__half>(p, cu, q.device(), variant);
    }
  } else {
    launch_generic(p, cu, q.device());
  }
  return out;
}

}  // namespace h3::ops::cuda
