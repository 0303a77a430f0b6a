// The VSA fine branch (h3_dit_spec.md §5.5-5.6) on Hopper tensor cores, built from the dense
// Hopper kernel's pieces (attention_hopper_kernel.cuh: mbarriers, TMA copies, wgmma wrappers and
// descriptors, the P V chain).
//
// Shape of one CTA (384 threads = 3 warpgroups, one CTA per SM):
// - warpgroups 1 and 2 are consumers; each owns one job, (head, 64-row query block), query block
//   fastest, so a CTA takes two neighbouring query blocks of one head and the CTAs in flight share
//   that head's K and V in L2 (H3_VSA_HOPPER_ORDER=head restores the mma.sync grid's order, head
//   fastest). Two jobs have two different key tile lists, so each consumer has its own ring of
//   64-key stages (K and V, 3 stages) and its own Q buffer.
// - warpgroup 0 is the producer: warp c serves consumer c. Lane 0 issues the bulk tensor copies
//   (128-byte swizzle) of the job's Q block once, then of the listed key tiles in list order, one
//   64-row block at a time (a 256-row tile is up to four blocks); the warp reads the list 32
//   entries at a time so the copies never wait on a dependent global load. Before each block's
//   copies it stores the block's real key count into a per-stage slot; the consumer reads it after
//   the "full" mbarrier (whose arrive releases that store).
// - A consumer computes S = Q K^T with 8 wgmma m64n64k16 (both operands in shared memory), masks
//   key slots past the tile's real rows (pad slots, as the mma.sync kernel), runs the online
//   softmax in float32 with exp2, rounds P to the activation dtype for P V (4 wgmma m64n128k16
//   from registers) and sums the unrounded P for the denominator (the reference kernel's rounding
//   points, §5.5). S of block j overlaps P V of block j - 1 as in the dense kernel.
// - The store divides by the row sum, rounds (the fine branch), and with a gate adds
//   round(round(out_c) * g) and rounds again (§5.6), writing only real query rows through the
//   partition.
#include "ops/cuda/vsa_hopper.cuh"

#include <cstdlib>
#include <cstring>
#include <tuple>

#include "core/status.h"
#include "ops/cuda/attention_hopper.cuh"
#include "ops/cuda/attention_hopper_kernel.cuh"
#include "ops/cuda/cuda_util.h"

namespace h3::ops::cuda {

namespace {

namespace hp = hopper;

constexpr int kVsaRows = 64;      // query rows per consumer (one job)
constexpr int kVsaKeys = 64;      // keys per stage (the reference kernel's BLOCK_N)
constexpr int kVsaStages = 3;
constexpr int kVsaConsumers = 2;
constexpr int kVsaThreads = 128 * (1 + kVsaConsumers);
constexpr int kVsaQBytes = kVsaRows * hp::kHeadDim * 2;   // 16 KiB
constexpr int kVsaTileBytes = kVsaKeys * hp::kHeadDim * 2;  // 16 KiB
constexpr int kVsaConsumerBytes = kVsaQBytes + 2 * kVsaStages * kVsaTileBytes;  // 112 KiB
// Per consumer: q, k[s], v[s], empty[s] mbarriers (8 bytes each) and the row counts of the stages.
constexpr int kVsaBarBytes = 8 * (1 + 3 * kVsaStages);
constexpr int kVsaMetaBytes = kVsaConsumers * (kVsaBarBytes + 4 * kVsaStages);
constexpr int kVsaSmemBytes = kVsaConsumers * kVsaConsumerBytes + 256 + 1024;
static_assert(kVsaMetaBytes <= 256, "mbarrier area");
static_assert(kVsaSmemBytes <= 227 * 1024, "shared memory of the VSA Hopper kernel");

struct VsaKernelArgs {
  const void* g;
  const float* out_c;
  void* o;
  void* fine;
  int heads, n, E, sub;  // sub: 64-row query blocks per tile
  int64_t jobs;          // heads * n * sub
  int head_fastest;      // job order: 1 head fastest (H3_VSA_HOPPER_ORDER=head), 0 query block fastest
  const int* starts;
  const int* sizes;
  const int* part;
  const int* lists;
  const int* counts;
  const int* blocks;  // [H, n] 64-row key blocks of each list
  float scale_log2;
};

#ifdef H3_HOPPER_ATTN_DEVICE

__device__ __forceinline__ void wgmma_ss_m64n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d,
                                                __nv_bfloat16*) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_ss_m64n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d,
                                                __half*) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// S = Q K^T of one job and one 64-key block: Q and K are [half][64 rows][64], 128-byte rows,
// swizzled; a k-step inside a half moves 32 bytes, the next half is 8 KiB on.
template <typename T>
__device__ __forceinline__ void issue_qk64(float (&s)[32], uint32_t q_base, uint32_t k_base) {
#pragma unroll
  for (int ks = 0; ks < hp::kHeadDim / 16; ++ks) {
    const uint32_t off = (ks >> 2) * (kVsaKeys * 128) + (ks & 3) * 32;
    wgmma_ss_m64n64(s, hp::detail::make_desc(q_base + off, 16, 1024), hp::detail::make_desc(k_base + off, 16, 1024),
                    ks > 0 ? 1 : 0, static_cast<T*>(nullptr));
  }
}

// The job of consumer c of this CTA; false when past the end or a query block without real rows
// (a 256-row tile smaller than the block's offset). Both the producer warp and the consumer
// evaluate it, so they agree on whether the job runs.
struct Job {
  int head, tile, q_local, q_rows, count;
  int64_t lrow;
};
__device__ __forceinline__ bool job_of(const VsaKernelArgs& a, int c, Job& job) {
  const int64_t id = static_cast<int64_t>(blockIdx.x) * kVsaConsumers + c;
  if (id >= a.jobs) return false;
  int qb;
  if (a.head_fastest) {
    job.head = static_cast<int>(id % a.heads);
    qb = static_cast<int>(id / a.heads);
  } else {
    const int64_t per_head = static_cast<int64_t>(a.n) * a.sub;
    job.head = static_cast<int>(id / per_head);
    qb = static_cast<int>(id % per_head);
  }
  job.tile = qb / a.sub;
  job.q_local = (qb % a.sub) * kVsaRows;
  job.q_rows = min(kVsaRows, a.sizes[job.tile] - job.q_local);
  job.lrow = static_cast<int64_t>(job.head) * a.n + job.tile;
  job.count = a.lists ? a.counts[job.lrow] : a.n;
  return job.q_rows > 0;
}

// Consumer c (a compile-time constant, so its buffers are fixed offsets and its control flow
// depends on blockIdx only, as in the dense kernel).
template <typename T, int c>
__device__ __forceinline__ void vsa_consume(const VsaKernelArgs& a, uint32_t base, uint32_t meta,
                                            volatile int* rows_slot) {
  using namespace hp::detail;
  auto sQ = [&](int cc) { return base + cc * kVsaConsumerBytes; };
  auto sK = [&](int cc, int s) { return sQ(cc) + kVsaQBytes + s * kVsaTileBytes; };
  auto sV = [&](int cc, int s) { return sQ(cc) + kVsaQBytes + (kVsaStages + s) * kVsaTileBytes; };
  auto bar_q = [&](int cc) { return meta + cc * kVsaBarBytes; };
  auto bar_k = [&](int cc, int s) { return bar_q(cc) + 8u * (1 + s); };
  auto bar_v = [&](int cc, int s) { return bar_q(cc) + 8u * (1 + kVsaStages + s); };
  auto bar_empty = [&](int cc, int s) { return bar_q(cc) + 8u * (1 + 2 * kVsaStages + s); };
  Job job;
  if (!job_of(a, c, job)) return;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
  const int g = lane >> 2, tq = lane & 3;
  const float sl2 = a.scale_log2;

  // Blocks of the stream (precomputed, so the loop's trip count is uniform over the warpgroup and
  // the wgmma chains are not serialized by a divergent path).
  const int n_blocks = a.blocks[job.lrow];

  float o[64], s[32];
  uint32_t pa[16];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m_row[2] = {-INFINITY, -INFINITY};
  float l_row[2] = {0.0f, 0.0f};

  // Masks the pad slots of block j (keys at or past the tile's real rows), then turns the scores
  // into probabilities: new running max, correction factor for the old sums, exp2.
  auto softmax = [&](int j, float (&corr)[2]) {
    const int rows = rows_slot[c * kVsaStages + j % kVsaStages];
#pragma unroll
    for (int i = 0; i < 32; ++i) {  // a select, not a branch (the value is not provably uniform)
      const int key = (i / 4) * 8 + tq * 2 + (i & 1);
      s[i] = key >= rows ? -INFINITY : s[i];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) mx = fmaxf(mx, fmaxf(s[4 * nb + 2 * r], s[4 * nb + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_row[r], mx * sl2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      corr[r] = fast_exp2(m_row[r] - m_use);
      m_row[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
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
    for (int i = 0; i < 16; ++i) pa[i] = Wgmma<T>::pack(s[2 * i], s[2 * i + 1]);
  };

  const uint32_t q_base = sQ(c);
  mbar_wait(bar_q(c), 0);
  float corr[2];
  if (n_blocks > 0) {
    mbar_wait(bar_k(c, 0), 0);
    wgmma_fence();
    issue_qk64<T>(s, q_base, sK(c, 0));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);
    softmax(0, corr);
    to_operand();
  }
  for (int j = 1; j < n_blocks; ++j) {
    const int st = j % kVsaStages, prev = (j - 1) % kVsaStages;
    // Both waits before the first wgmma: a wait (a spin loop) between the two chains puts the
    // second on a path the compiler cannot prove uniform, and it then serializes them (C7520).
    // V of block j - 1 came with K of block j - 1, so waiting for it here costs nothing.
    mbar_wait(bar_k(c, st), (j / kVsaStages) & 1);
    mbar_wait(bar_v(c, prev), ((j - 1) / kVsaStages) & 1);
    fence_regs(o);
    fence_regs(pa);
    wgmma_fence();
    issue_qk64<T>(s, q_base, sK(c, st));
    wgmma_commit();
    issue_pv<T, kVsaKeys>(o, pa, sV(c, prev));
    wgmma_commit();
    wgmma_wait<1>();
    fence_regs(s);
    softmax(j, corr);
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pa);
    mbar_arrive(bar_empty(c, prev));
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] *= corr[(i >> 1) & 1];
    to_operand();
  }
  if (n_blocks > 0) {
    const int last = (n_blocks - 1) % kVsaStages;
    mbar_wait(bar_v(c, last), ((n_blocks - 1) / kVsaStages) & 1);
    fence_regs(o);
    fence_regs(pa);
    wgmma_fence();
    issue_pv<T, kVsaKeys>(o, pa, sV(c, last));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pa);
    mbar_arrive(bar_empty(c, last));
  }

  // Store: fine = round(o / l); with a gate, out = round(fine + round(round(out_c) * g)).
  const int64_t row_stride = static_cast<int64_t>(a.heads) * hp::kHeadDim;
  const int64_t head_off = static_cast<int64_t>(job.head) * hp::kHeadDim;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_row[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int local = warp * 16 + g + 8 * r;
    if (local >= job.q_rows) continue;
    const int64_t off =
        static_cast<int64_t>(a.part[a.starts[job.tile] + job.q_local + local]) * row_stride + head_off;
    T* ob = static_cast<T*>(a.o) + off;
#pragma unroll
    for (int nb = 0; nb < 16; ++nb) {
      const int col = nb * 8 + tq * 2;
      float f0 = l > 0.0f ? o[4 * nb + 2 * r] / l : 0.0f;
      float f1 = l > 0.0f ? o[4 * nb + 2 * r + 1] / l : 0.0f;
      const uint32_t fine_bits = Wgmma<T>::pack(f0, f1);
      if (a.fine) *reinterpret_cast<uint32_t*>(static_cast<T*>(a.fine) + off + col) = fine_bits;
      uint32_t out_bits = fine_bits;
      if (a.out_c) {
        T fr[2];
        memcpy(fr, &fine_bits, 4);
        f0 = static_cast<float>(fr[0]);
        f1 = static_cast<float>(fr[1]);
        const float* oc = a.out_c + (static_cast<int64_t>(job.head) * a.n + job.tile) * hp::kHeadDim + col;
        const T* gp = static_cast<const T*>(a.g) + off + col;
        const float c0 = static_cast<float>(static_cast<T>(oc[0])), c1 = static_cast<float>(static_cast<T>(oc[1]));
        const float g0 = static_cast<float>(gp[0]), g1 = static_cast<float>(gp[1]);
        const float t0 = static_cast<float>(static_cast<T>(c0 * g0)), t1 = static_cast<float>(static_cast<T>(c1 * g1));
        out_bits = Wgmma<T>::pack(f0 + t0, f1 + t1);
      }
      *reinterpret_cast<uint32_t*>(ob + col) = out_bits;
    }
  }
}

#endif  // H3_HOPPER_ATTN_DEVICE

template <typename T>
__global__ void __launch_bounds__(kVsaThreads, 1)
    vsa_hopper_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_v, const VsaKernelArgs a) {
#ifdef H3_HOPPER_ATTN_DEVICE
  using namespace hp::detail;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t meta = base + kVsaConsumers * kVsaConsumerBytes;
  unsigned char* meta_ptr = smem_raw + (meta - raw);

  // Consumer c's buffers and barriers.
  auto sQ = [&](int c) { return base + c * kVsaConsumerBytes; };
  auto sK = [&](int c, int s) { return sQ(c) + kVsaQBytes + s * kVsaTileBytes; };
  auto sV = [&](int c, int s) { return sQ(c) + kVsaQBytes + (kVsaStages + s) * kVsaTileBytes; };
  auto bar_q = [&](int c) { return meta + c * kVsaBarBytes; };
  auto bar_k = [&](int c, int s) { return bar_q(c) + 8u * (1 + s); };
  auto bar_v = [&](int c, int s) { return bar_q(c) + 8u * (1 + kVsaStages + s); };
  auto bar_empty = [&](int c, int s) { return bar_q(c) + 8u * (1 + 2 * kVsaStages + s); };
  volatile int* rows_slot = reinterpret_cast<volatile int*>(meta_ptr + kVsaConsumers * kVsaBarBytes);

  if (threadIdx.x == 0) {
    for (int c = 0; c < kVsaConsumers; ++c) {
      mbar_init(bar_q(c), 1);
      for (int s = 0; s < kVsaStages; ++s) {
        mbar_init(bar_k(c, s), 1);
        mbar_init(bar_v(c, s), 1);
        mbar_init(bar_empty(c, s), 128);
      }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    const int c = threadIdx.x / 32;  // warp c serves consumer c
    // A lambda, so that its early returns end this warp's work but leave the kernel one exit.
    auto produce = [&]() {
      Job job;
      if (!job_of(a, c, job)) return;
      const int lane = threadIdx.x & 31;
      const int E = a.E;
      if (lane == 0) {
        mbar_expect_tx(bar_q(c), kVsaQBytes);
        const int qrow = job.tile * E + job.q_local;
        tma_load_3d(sQ(c), &map_q, 0, qrow, job.head, bar_q(c));
        tma_load_3d(sQ(c) + kVsaQBytes / 2, &map_q, 64, qrow, job.head, bar_q(c));
      }
      int j = 0;  // block counter of the stream
      for (int x0 = 0; x0 < job.count; x0 += 32) {
        int my_tile = 0, my_size = 0;
        if (x0 + lane < job.count) {
          my_tile = a.lists ? a.lists[job.lrow * a.n + x0 + lane] : x0 + lane;
          my_size = a.sizes[my_tile];
        }
        const int m = min(32, job.count - x0);
        for (int e = 0; e < m; ++e) {
          const int tile = __shfl_sync(0xffffffffu, my_tile, e);
          const int size = __shfl_sync(0xffffffffu, my_size, e);
          for (int b = 0; b < size; b += kVsaKeys, ++j) {
            const int st = j % kVsaStages;
            if (j >= kVsaStages) mbar_wait(bar_empty(c, st), ((j / kVsaStages) - 1) & 1);
            if (lane == 0) {
              rows_slot[c * kVsaStages + st] = min(kVsaKeys, size - b);
              const int row = tile * E + b;
              mbar_expect_tx(bar_k(c, st), kVsaTileBytes);
              tma_load_3d(sK(c, st), &map_k, 0, row, job.head, bar_k(c, st));
              tma_load_3d(sK(c, st) + kVsaTileBytes / 2, &map_k, 64, row, job.head, bar_k(c, st));
              mbar_expect_tx(bar_v(c, st), kVsaTileBytes);
              tma_load_3d(sV(c, st), &map_v, 0, row, job.head, bar_v(c, st));
              tma_load_3d(sV(c, st) + kVsaTileBytes / 2, &map_v, 64, row, job.head, bar_v(c, st));
            }
            __syncwarp();
          }
        }
      }
    };
    if (c < kVsaConsumers) produce();
  } else if (warpgroup == 1) {
    vsa_consume<T, 0>(a, base, meta, rows_slot);
  } else {
    vsa_consume<T, 1>(a, base, meta, rows_slot);
  }
#else
  (void)map_q;
  (void)map_k;
  (void)map_v;
  (void)a;
#endif
}

// grid (n, 3: q/k/v), block 256: zeroes rows [size, E) of each tile of the tiled buffers.
__global__ void vsa_zero_pads_kernel(uint4* tq, uint4* tk, uint4* tv, const int* sizes, int E, int64_t row_chunks) {
  const int t = blockIdx.x;
  uint4* x = blockIdx.y == 0 ? tq : (blockIdx.y == 1 ? tk : tv);
  const int size = sizes[t];
  if (size >= E) return;
  const int64_t first = (static_cast<int64_t>(t) * E + size) * row_chunks;
  const int64_t total = static_cast<int64_t>(E - size) * row_chunks;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) x[first + i] = make_uint4(0u, 0u, 0u, 0u);
}

// grid ceil(H n / 8), block 256, a warp per (head, query tile): blocks[row] = sum over the row's
// key tile list of ceil(size / 64), the consumer's trip count.
__global__ void vsa_block_counts_kernel(const int* lists, const int* counts, const int* sizes, int n,
                                        int64_t rows, int* blocks) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // warp-uniform
  const int count = lists ? counts[row] : n;
  int total = 0;
  for (int x = lane; x < count; x += 32) {
    const int t = lists ? lists[row * n + x] : x;
    total += (sizes[t] + kVsaKeys - 1) / kVsaKeys;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
  if (lane == 0) blocks[row] = total;
}

}  // namespace

bool vsa_hopper_eligible(int device, int64_t head_dim, int tile_size, int64_t tiled_rows, int64_t heads) {
  const char* env = std::getenv("H3_VSA_HOPPER");
  if (env && std::strcmp(env, "0") == 0) return false;
  if (head_dim != hp::kHeadDim || (tile_size != 64 && tile_size != 256)) return false;
  // Tensor map coordinates are 32-bit; heads * 128 elements per row must fit its stride field.
  if (tiled_rows <= 0 || tiled_rows >= (1LL << 31) || heads <= 0 || heads > 65535) return false;
  // Same library, same sm_90a build: the dense kernel's probe answers for this one too.
  return hopper_kernels_available(device);
}

void vsa_hopper_fine(const VsaHopperParams& p, cudaStream_t stream) {
  const int64_t D = hp::kHeadDim;
  const int64_t rows = static_cast<int64_t>(p.n) * p.E;
  const int64_t row_stride = static_cast<int64_t>(p.heads) * D;
  vsa_zero_pads_kernel<<<dim3(static_cast<unsigned>(p.n), 3), 256, 0, stream>>>(
      static_cast<uint4*>(p.tq), static_cast<uint4*>(p.tk), static_cast<uint4*>(p.tv), p.sizes, p.E,
      row_stride * 2 / 16);
  check_launch("vsa_zero_pads");
  const int64_t list_rows = static_cast<int64_t>(p.heads) * p.n;
  vsa_block_counts_kernel<<<static_cast<unsigned>((list_rows + 7) / 8), 256, 0, stream>>>(
      p.lists, p.counts, p.sizes, p.n, list_rows, p.blocks);
  check_launch("vsa_block_counts");

  CUtensorMap mq, mk, mv;
  for (auto [map, ptr, name] : {std::tuple{&mq, p.tq, "q"}, std::tuple{&mk, p.tk, "k"}, std::tuple{&mv, p.tv, "v"}}) {
    const char* e = hp::make_map(map, ptr, rows, p.heads, row_stride, D, p.f16, kVsaKeys);
    H3_CHECK(e == nullptr, ErrorCode::kInternal, "vsa_attention (Hopper fine kernel), tiled ", name, ": ", e);
  }
  VsaKernelArgs a{};
  a.g = p.g;
  a.out_c = p.out_c;
  a.o = p.o;
  a.fine = p.fine;
  a.heads = p.heads;
  a.n = p.n;
  a.E = p.E;
  a.sub = p.E / kVsaRows;
  a.jobs = static_cast<int64_t>(p.heads) * p.n * a.sub;
  // Query block fastest by default: the CTAs in flight then work on one head (two at a head
  // boundary), whose K and V (n E rows x 2 x 256 bytes, about 19 MiB at the production shape) stay
  // in L2 while every query block of the head reads its listed tiles. Head fastest spreads the
  // CTAs in flight over all heads, so each listed tile comes from HBM again for nearly every job,
  // and the kernel is bound by HBM bandwidth (issue #7).
  const char* order = std::getenv("H3_VSA_HOPPER_ORDER");
  a.head_fastest = order && std::strcmp(order, "head") == 0 ? 1 : 0;
  a.starts = p.starts;
  a.sizes = p.sizes;
  a.part = p.part;
  a.lists = p.lists;
  a.counts = p.counts;
  a.blocks = p.blocks;
  a.scale_log2 = p.scale_log2;
  const int64_t ctas = (a.jobs + kVsaConsumers - 1) / kVsaConsumers;
  H3_CHECK(ctas < (1LL << 31), ErrorCode::kUnsupported, "vsa_attention (Hopper fine kernel): ", a.jobs,
           " query blocks");
  if (ctas == 0) return;
  auto kernel = p.f16 ? vsa_hopper_kernel<__half> : vsa_hopper_kernel<__nv_bfloat16>;
  H3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kVsaSmemBytes));
  kernel<<<static_cast<unsigned>(ctas), kVsaThreads, kVsaSmemBytes, stream>>>(mq, mk, mv, a);
  check_launch("vsa_hopper_fine");
}

}  // namespace h3::ops::cuda
