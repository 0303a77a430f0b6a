// FlashAttention-3 style forward kernel for Hopper (sm_90a), bf16/f16, head dim 128 or 64, no mask,
// bidirectional or causal.
// Self-contained (CUDA headers only) so the standalone harness bench/kernels/attn_hopper_bench.cu
// can include it; attention_hopper.cu wraps it for ops::attention.
//
// Shape of one CTA (384 threads = 3 warpgroups, one CTA per SM):
// - warpgroup 0 is the producer: one thread issues bulk tensor copies (TMA, 128-byte swizzle) of
//   the CTA's 128 query rows once, then of 128-key K and V tiles into a 3-stage ring; each stage
//   has "full" mbarriers (K and V separately, completed by the copy engine's byte count) and an
//   "empty" mbarrier the consumers arrive on once they no longer read it. Its registers are given
//   back (setmaxnreg) to the consumers.
// - warpgroups 1 and 2 are consumers, 64 query rows each. S = Q K^T is one chain of 8 wgmma
//   m64n128k16 with both operands in shared memory; P (bf16/f16, from registers) times V is a
//   second chain with V read transposed (MN-major) by the tensor cores. The softmax is the online
//   one in float32 with exp2 and the scale folded in (as in the mma.sync kernel). Within a
//   warpgroup, the softmax of tile j overlaps the P V product of tile j - 1 (issue S_j, issue
//   O += P_{j-1} V_{j-1}, wait for S_j only, softmax, then wait for O): the tensor cores stay busy
//   while the multi-function units compute exponentials. The two consumer warpgroups interleave
//   naturally on top of that (an explicit ping-pong between them through named barriers measured
//   no faster).
// Measured on the H200 at the DiT shape (37,966 rows, 56 heads): 65 ms, 636 TFLOP/s (PyTorch SDPA:
// 72 ms; the mma.sync flash_fwd kernel: 162 ms).
// Head dim 64 (the video VAE's ViT decoder: 32 heads, 1,797-row tiles) is the same kernel on
// half-width tiles: S = Q K^T takes 4 k-steps and O = P V is m64n64, so each 128-key tile carries
// half the tensor-core work for the same exponentials; the smaller tiles leave room for a fourth
// stage of the K/V ring.
// Block-diagonal batches (cu_seqlens) come as a tile list: a CTA reads keys [seg_start, kv_end)
// and masks keys past kv_end in the last tile (the copy engine zero-fills rows past the tensor's
// end; rows of the next segment are finite and masked). Grouped-query heads map query head h to
// key/value head h / group.
// Causal (top-left aligned, as the mma.sync kernel and torch SDPA's is_causal: key j of a segment
// is visible to its query i when j <= i): a CTA reads keys up to its last query row and masks, per
// element, only the tiles that reach past a thread's first row. The CTAs with the most keys are
// launched first (the grid runs the query tiles in reverse), so the short ones fill the last wave.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <cstring>

namespace h3::ops::cuda::hopper {

constexpr int kRowsPerCta = 128;  // 2 consumer warpgroups x 64 rows (the default shape)
constexpr int kKeysPerTile = 128;
constexpr int kHeadDim = 128;  // the DiT's (and VSA's); Geometry<64> is the video VAE decoder's
constexpr int kThreads = 384;

// Shared-memory plan for head dim D and C consumer warpgroups (64 query rows each). Tiles are
// stored as D / 64 column halves of 128-byte rows.
template <int D, int C = 2>
struct Geometry {
  static_assert(D == 64 || D == 128, "the Hopper attention kernel takes head dim 64 or 128");
  static_assert(C == 2 || (C == 3 && D == 64), "3 consumer warpgroups only at head dim 64");
  static constexpr int kRows = 64 * C;            // query rows per CTA
  static constexpr int kThreads = 128 * (C + 1);  // the producer warpgroup and C consumers
  // Registers per consumer thread after the producer gives its own back (setmaxnreg): 240 with two
  // consumers; 160 with three (512 threads launch at 128 each; the producer keeps 24).
  static constexpr int kConsumerRegs = C == 2 ? 240 : 160;
  // 3 stages at D = 128 (224 KiB with Q) measured 65 ms against 74 ms with 2 at the DiT shape;
  // D = 64 tiles are half the size, so a fourth stage fits in less than 3 stages take at 128.
  static constexpr int kStages = D == 128 ? 3 : 4;
  static constexpr int kTileBytes = kKeysPerTile * D * 2;  // one K or V tile
  static constexpr int kQBytes = kRows * D * 2;
  // Q, K and V stages, then the mbarriers; +1024 so the base can be rounded up to the 1024-byte
  // alignment the 128-byte swizzle pattern repeats on.
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kTileBytes + 128 + 1024;
};
constexpr int kStages = Geometry<kHeadDim>::kStages;
constexpr int kTileBytes = Geometry<kHeadDim>::kTileBytes;
constexpr int kQBytes = Geometry<kHeadDim>::kQBytes;
constexpr int kSmemBytes = Geometry<kHeadDim>::kSmemBytes;

// A block of query rows [q_start, q_end) of a segment starting at seg_start whose keys are
// [seg_start, kv_end) (same layout as the tile list of attention.cu).
struct TileDesc {
  int q_start, q_end, seg_start, kv_end;
};

struct KernelArgs {
  void* o;
  int64_t o_row, o_head;  // element strides of the output
  int s_q, s_kv;
  int group;              // query heads per key/value head
  float scale_log2;       // softmax scale * log2(e)
  const TileDesc* tiles;  // null: one segment, tile blockIdx.x covers rows [128 x, 128 x + 128)
  int causal;             // 1: key j of a segment visible to query i only when j <= i
};

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define H3_HOPPER_ATTN_DEVICE 1
#endif

namespace detail {

#ifdef H3_HOPPER_ATTN_DEVICE

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// One 3-D box (64 elements of the head dim x rows x 1 head) into shared memory, completing on bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
      "%4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// One MUFU.EX2 (exp2f adds range handling around it; 6% of the kernel's time at the DiT shape).
// Flushing subnormal results to zero does not matter for softmax weights.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of wgmma operands across the asynchronous
// window (issue .. wait), in which the tensor cores own those registers.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address, leading
// and stride byte offsets (all >> 4), layout 1 = 128-byte swizzle.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}

// One m64n128k16 step, d (64 float accumulators per thread) += A B, for TYPE "bf16" or "f16": A
// from shared memory (SS, descriptors) or from registers (RS, 4 registers per thread, the
// accumulator layout of a 16-wide slice); B from shared memory, K-major (TRANS_B 0, as K in S = Q K^T)
// or MN-major (TRANS_B 1, as V in O = P V).
#define H3_WGMMA_N128_D                                                                                   \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"   \
  "%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,"  \
  "%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define H3_WGMMA_N128_OUT                                                                                 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define H3_WGMMA_SS_N128(TYPE)                                                                            \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                               \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " H3_WGMMA_N128_D           \
               ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                          \
               : H3_WGMMA_N128_OUT                                                                        \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define H3_WGMMA_RS_N128(TYPE, TRANS_B)                                                                   \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                               \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " " H3_WGMMA_N128_D           \
               ", {%64,%65,%66,%67}, %68, p, 1, 1, " #TRANS_B ";\n}\n"                                    \
               : H3_WGMMA_N128_OUT                                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

// The m64n64k16 form (32 accumulators per thread): O = P V at head dim 64.
#define H3_WGMMA_N64_D                                                                                    \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"   \
  "%27,%28,%29,%30,%31}"
#define H3_WGMMA_N64_OUT                                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define H3_WGMMA_RS_N64(TYPE)                                                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                               \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " " H3_WGMMA_N64_D             \
               ", {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"                                              \
               : H3_WGMMA_N64_OUT                                                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

template <typename T>
struct Wgmma;
template <>
struct Wgmma<__nv_bfloat16> {
  static __device__ __forceinline__ void ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    H3_WGMMA_SS_N128("bf16");
  }
  // B MN-major (V); rs_k: B K-major (K).
  static __device__ __forceinline__ void rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    H3_WGMMA_RS_N128("bf16", 1);
  }
  static __device__ __forceinline__ void rs_k(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    H3_WGMMA_RS_N128("bf16", 0);
  }
  // B MN-major (V) at head dim 64.
  static __device__ __forceinline__ void rs64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    H3_WGMMA_RS_N64("bf16");
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
  }
};
template <>
struct Wgmma<__half> {
  static __device__ __forceinline__ void ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    H3_WGMMA_SS_N128("f16");
  }
  // B MN-major (V); rs_k: B K-major (K).
  static __device__ __forceinline__ void rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    H3_WGMMA_RS_N128("f16", 1);
  }
  static __device__ __forceinline__ void rs_k(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    H3_WGMMA_RS_N128("f16", 0);
  }
  // B MN-major (V) at head dim 64.
  static __device__ __forceinline__ void rs64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    H3_WGMMA_RS_N64("f16");
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
  }
};

// S = Q K^T for one warpgroup: D / 16 k-steps of 16 along the head dim. Q and K tiles are stored
// as 64-column halves ([half][rows][64], 128-byte rows, swizzled); a k-step inside a half moves
// the start address by 32 bytes, the next 8-row group is 1024 bytes on (stride byte offset).
template <typename T, int D = kHeadDim, int kRows = kRowsPerCta>
__device__ __forceinline__ void issue_qk(float (&s)[64], uint32_t q_base, uint32_t k_base) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const uint32_t off = (ks >> 2) * (kKeysPerTile * 128) + (ks & 3) * 32;
    const uint32_t q_off = (ks >> 2) * (kRows * 128) + (ks & 3) * 32;
    Wgmma<T>::ss(s, make_desc(q_base + q_off, 16, 1024), make_desc(k_base + off, 16, 1024), ks > 0 ? 1 : 0);
  }
}

// O += P V: 8 k-steps of 16 keys. V is [half][keys][64] with the head dim contiguous, read as an
// MN-major operand: the next 64 columns of the head dim (leading byte offset) are one half on, the
// next 8 keys (stride byte offset) 1024 bytes on; a k-step moves 16 rows = 2048 bytes.
// kKeys: rows of the V tile (the block-sparse VSA kernel streams 64-row tiles). At D = 64 the
// whole head dim is one 128-byte swizzle atom wide, so the leading byte offset is never stepped.
template <typename T, int kKeys = kKeysPerTile, int D = kHeadDim>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const uint32_t (&pa)[kKeys / 4], uint32_t v_base) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    const uint32_t a[4] = {pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3]};
    if constexpr (D == 128) {
      Wgmma<T>::rs(o, a, make_desc(v_base + kk * 2048, kKeys * 128, 1024), 1);
    } else {
      Wgmma<T>::rs64(o, a, make_desc(v_base + kk * 2048, kKeys * 128, 1024), 1);
    }
  }
}

#endif  // H3_HOPPER_ATTN_DEVICE

}  // namespace detail

template <typename T, int D = kHeadDim, int C = 2>
__global__ void __launch_bounds__(Geometry<D, C>::kThreads, 1)
    attention_hopper_kernel(const __grid_constant__ CUtensorMap map_q,
                            const __grid_constant__ CUtensorMap map_k,
                            const __grid_constant__ CUtensorMap map_v, const KernelArgs args) {
#ifdef H3_HOPPER_ATTN_DEVICE
  using namespace detail;
  using G = Geometry<D, C>;
  constexpr int kStages = G::kStages, kTileBytes = G::kTileBytes, kQBytes = G::kQBytes;
  constexpr int kRows = G::kRows;
  constexpr int kHalves = D / 64;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t sQ = base;
  const uint32_t sK = sQ + kQBytes;                      // kStages tiles
  const uint32_t sV = sK + kStages * kTileBytes;         // kStages tiles
  const uint32_t bars = sV + kStages * kTileBytes;       // 8-byte mbarriers
  const uint32_t bar_q = bars;
  auto bar_k = [&](int s) { return bars + 8u * (1 + s); };
  auto bar_v = [&](int s) { return bars + 8u * (1 + kStages + s); };
  auto bar_empty = [&](int s) { return bars + 8u * (1 + 2 * kStages + s); };

  TileDesc tile;
  const int bx =
      args.causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  if (args.tiles) {
    tile = args.tiles[bx];
  } else {
    tile.q_start = bx * kRows;
    tile.q_end = min(args.s_q, tile.q_start + kRows);
    tile.seg_start = 0;
    tile.kv_end = args.s_kv;
  }
  const int head = blockIdx.y;
  const int kv_head = head / args.group;
  const int kv_lo = tile.seg_start;
  const int kv_hi = args.causal ? min(tile.kv_end, tile.q_end) : tile.kv_end;
  const int n_tiles = kv_hi > kv_lo ? (kv_hi - kv_lo + kKeysPerTile - 1) / kKeysPerTile : 0;

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    mbar_init(bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(bar_k(s), 1);
      mbar_init(bar_v(s), 1);
      mbar_init(bar_empty(s), 128 * C);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    if (threadIdx.x == 0) {
      mbar_expect_tx(bar_q, kQBytes);
      for (int h = 0; h < kHalves; ++h) tma_load_3d(sQ + h * (kQBytes / kHalves), &map_q, 64 * h, tile.q_start, head, bar_q);
      for (int j = 0; j < n_tiles; ++j) {
        const int st = j % kStages;
        if (j >= kStages) mbar_wait(bar_empty(st), ((j / kStages) - 1) & 1);
        const int row = kv_lo + j * kKeysPerTile;
        const uint32_t k_dst = sK + st * kTileBytes, v_dst = sV + st * kTileBytes;
        mbar_expect_tx(bar_k(st), kTileBytes);
        for (int h = 0; h < kHalves; ++h) tma_load_3d(k_dst + h * (kTileBytes / kHalves), &map_k, 64 * h, row, kv_head, bar_k(st));
        mbar_expect_tx(bar_v(st), kTileBytes);
        for (int h = 0; h < kHalves; ++h) tma_load_3d(v_dst + h * (kTileBytes / kHalves), &map_v, 64 * h, row, kv_head, bar_v(st));
      }
    }
  } else {
    if constexpr (G::kConsumerRegs == 240) {
      asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    } else {
      asm volatile("setmaxnreg.inc.sync.aligned.u32 160;\n");
    }
    const int cw = warpgroup - 1;  // consumer warpgroup: rows [64 cw, 64 cw + 64) of the tile
    const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
    const int g = lane >> 2, tq = lane & 3;
    const uint32_t q_base = sQ + cw * 64 * 128;
    const float sl2 = args.scale_log2;
    // This thread's two query rows (the segment's offsets cancel in the causal test j <= i).
    const int row0 = tile.q_start + cw * 64 + warp * 16 + g;

    float o[D / 2], s[64];
    uint32_t pa[32];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
    float m_row[2] = {-INFINITY, -INFINITY};
    float l_row[2] = {0.0f, 0.0f};

    // Masks keys at or past kv_hi (only the last tile can hold such keys) and, when causal, keys
    // after the row's own position (element i is row row0 + 8 ((i >> 1) & 1)), then turns the
    // scores of this tile into probabilities: new running max, correction factor for the old
    // sums, exp2. Every row sees key kv_lo in tile 0, so its running max is finite from there on.
    auto softmax = [&](int j, float (&corr)[2]) {
      const int key0 = kv_lo + j * kKeysPerTile;
      if (key0 + kKeysPerTile > kv_hi || (args.causal && key0 + kKeysPerTile - 1 > row0)) {
#pragma unroll
        for (int i = 0; i < 64; ++i) {
          const int key = key0 + (i / 4) * 8 + tq * 2 + (i & 1);
          if (key >= kv_hi || (args.causal && key > row0 + 8 * ((i >> 1) & 1))) s[i] = -INFINITY;
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int nb = 0; nb < 16; ++nb) mx = fmaxf(mx, fmaxf(s[4 * nb + 2 * r], s[4 * nb + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_row[r], mx * sl2);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        corr[r] = fast_exp2(m_row[r] - m_use);
        m_row[r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int nb = 0; nb < 16; ++nb) {
          const float p0 = fast_exp2(fmaf(s[4 * nb + 2 * r], sl2, -m_use));
          const float p1 = fast_exp2(fmaf(s[4 * nb + 2 * r + 1], sl2, -m_use));
          s[4 * nb + 2 * r] = p0;
          s[4 * nb + 2 * r + 1] = p1;
          sum += p0 + p1;
        }
        l_row[r] = l_row[r] * corr[r] + sum;
      }
    };
    auto to_operand = [&]() {
#pragma unroll
      for (int i = 0; i < 32; ++i) pa[i] = Wgmma<T>::pack(s[2 * i], s[2 * i + 1]);
    };

    mbar_wait(bar_q, 0);
    float corr[2];
    if (n_tiles > 0) {
      mbar_wait(bar_k(0), 0);
      wgmma_fence();
      issue_qk<T, D, kRows>(s, q_base, sK);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(s);
      softmax(0, corr);
      to_operand();
    }
    for (int j = 1; j < n_tiles; ++j) {
      const int st = j % kStages, prev = (j - 1) % kStages;
      mbar_wait(bar_k(st), (j / kStages) & 1);
      fence_regs(o);
      fence_regs(pa);
      wgmma_fence();
      issue_qk<T, D, kRows>(s, q_base, sK + st * kTileBytes);
      wgmma_commit();
      mbar_wait(bar_v(prev), ((j - 1) / kStages) & 1);
      issue_pv<T, kKeysPerTile, D>(o, pa, sV + prev * kTileBytes);
      wgmma_commit();
      wgmma_wait<1>();
      fence_regs(s);
      softmax(j, corr);
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(pa);
      mbar_arrive(bar_empty(prev));
#pragma unroll
      for (int i = 0; i < D / 2; ++i) o[i] *= corr[(i >> 1) & 1];
      to_operand();
    }
    if (n_tiles > 0) {
      const int last = (n_tiles - 1) % kStages;
      mbar_wait(bar_v(last), ((n_tiles - 1) / kStages) & 1);
      fence_regs(o);
      fence_regs(pa);
      wgmma_fence();
      issue_pv<T, kKeysPerTile, D>(o, pa, sV + last * kTileBytes);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(pa);
      mbar_arrive(bar_empty(last));
    }

    // Normalize and store this thread's two rows (8-column blocks of 2 elements each).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_row[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int row = tile.q_start + cw * 64 + warp * 16 + g + 8 * r;
      if (row >= tile.q_end) continue;
      T* ob = static_cast<T*>(args.o) + static_cast<int64_t>(row) * args.o_row + head * args.o_head;
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) {
        const uint32_t v = Wgmma<T>::pack(o[4 * nb + 2 * r] * inv, o[4 * nb + 2 * r + 1] * inv);
        *reinterpret_cast<uint32_t*>(ob + nb * 8 + tq * 2) = v;
      }
    }
  }
#else
  (void)map_q;
  (void)map_k;
  (void)map_v;
  (void)args;
#endif
}

// ---- host side -----------------------------------------------------------------------------------

struct Problem {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  int64_t q_row, q_head, k_row, k_head, v_row, v_head, o_row, o_head;  // element strides
  int s_q, s_kv, hq, hkv;
  float scale_log2;
  bool f16;                // false: bf16
  const TileDesc* tiles;   // device tile list (block-diagonal batches) or null
  int n_tiles;             // entries of tiles
  int head_dim = kHeadDim; // 128 or 64
  int consumers = 2;       // consumer warpgroups (64 query rows each): 2, or 3 at head dim 64
  bool causal = false;     // top-left aligned, per segment
};

// Query rows per CTA of a problem (the tile list's block size).
inline int rows_per_cta(const Problem& pb) { return 64 * pb.consumers; }

// Rows of a [S, H, D] view as a 3-D tensor map (head dim, rows, heads) with 64 x 128 x 1 boxes
// and the 128-byte swizzle the wgmma descriptors expect (box_rows: rows per box, 128 by default).
inline const char* make_map(CUtensorMap* map, const void* ptr, int64_t rows, int64_t heads, int64_t row_stride,
                            int64_t head_stride, bool f16, int box_rows = kKeysPerTile, int head_dim = kHeadDim) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult res{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &res) !=
            cudaSuccess ||
        res != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (!encode) return "cuTensorMapEncodeTiled is not available from the driver";
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(heads)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(row_stride) * 2, static_cast<cuuint64_t>(head_stride) * 2};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem[3] = {1, 1, 1};
  const CUresult r = encode(map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3,
                            const_cast<void*>(ptr), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? nullptr : "cuTensorMapEncodeTiled rejected the q/k/v layout";
}

// Whether a view can use the kernel: 16-byte aligned base and row/head strides (the copy engine's
// rule), contiguous head dim assumed by the caller.
inline bool strides_ok(const void* p, int64_t row_stride, int64_t head_stride) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && row_stride % 8 == 0 && head_stride % 8 == 0 &&
         row_stride > 0 && head_stride > 0;
}

// Writes 1 to *out when this build holds the sm_90a kernel body (0 when compiled for another
// target, where the kernel is an empty stub and must not be used).
// static: each translation unit that includes this header gets its own copy.
static __global__ void attention_hopper_probe(int* out) {
#ifdef H3_HOPPER_ATTN_DEVICE
  *out = 1;
#else
  *out = 0;
#endif
}

// Queues the kernel; returns null, or what went wrong (nothing was queued then).
inline const char* launch(const Problem& pb, cudaStream_t stream) {
  if (pb.q_row % 8 || pb.k_row % 8 || pb.v_row % 8 || pb.q_head % 8 || pb.k_head % 8 || pb.v_head % 8) {
    return "strides are not multiples of 8 elements";
  }
  if (pb.head_dim != 64 && pb.head_dim != 128) return "head dim is neither 64 nor 128";
  if (pb.consumers != 2 && !(pb.consumers == 3 && pb.head_dim == 64)) {
    return "3 consumer warpgroups are built for head dim 64 only";
  }
  CUtensorMap mq, mk, mv;
  const int d = pb.head_dim, rows = rows_per_cta(pb);
  if (const char* e = make_map(&mq, pb.q, pb.s_q, pb.hq, pb.q_row, pb.q_head, pb.f16, rows, d))
    return e;
  if (const char* e = make_map(&mk, pb.k, pb.s_kv, pb.hkv, pb.k_row, pb.k_head, pb.f16, kKeysPerTile, d)) return e;
  if (const char* e = make_map(&mv, pb.v, pb.s_kv, pb.hkv, pb.v_row, pb.v_head, pb.f16, kKeysPerTile, d)) return e;
  KernelArgs a{};
  a.o = pb.o;
  a.o_row = pb.o_row;
  a.o_head = pb.o_head;
  a.s_q = pb.s_q;
  a.s_kv = pb.s_kv;
  a.group = pb.hq / pb.hkv;
  a.scale_log2 = pb.scale_log2;
  a.tiles = pb.tiles;
  a.causal = pb.causal ? 1 : 0;
  const unsigned gx = pb.tiles ? static_cast<unsigned>(pb.n_tiles)
                               : static_cast<unsigned>((pb.s_q + rows - 1) / rows);
  if (gx == 0) return nullptr;
  const dim3 grid(gx, static_cast<unsigned>(pb.hq));
  auto run = [&](auto kernel, int smem, int threads) -> const char* {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
      return "cudaFuncSetAttribute (shared memory) failed";
    }
    kernel<<<grid, threads, smem, stream>>>(mq, mk, mv, a);
    return nullptr;
  };
  if (d == 64 && pb.consumers == 3) {
    using G = Geometry<64, 3>;
    return pb.f16 ? run(attention_hopper_kernel<__half, 64, 3>, G::kSmemBytes, G::kThreads)
                  : run(attention_hopper_kernel<__nv_bfloat16, 64, 3>, G::kSmemBytes, G::kThreads);
  }
  if (d == 64) {
    return pb.f16 ? run(attention_hopper_kernel<__half, 64>, Geometry<64>::kSmemBytes, kThreads)
                  : run(attention_hopper_kernel<__nv_bfloat16, 64>, Geometry<64>::kSmemBytes,
                        kThreads);
  }
  return pb.f16 ? run(attention_hopper_kernel<__half, 128>, Geometry<128>::kSmemBytes, kThreads)
                : run(attention_hopper_kernel<__nv_bfloat16, 128>, Geometry<128>::kSmemBytes,
                      kThreads);
}

}  // namespace h3::ops::cuda::hopper
