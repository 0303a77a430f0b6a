// The VSA fine branch (h3_dit_spec.md §5.5-5.6) on Hopper tensor cores, built from the dense
// Hopper kernel's pieces (attention_hopper_kernel.cuh: mbarriers, TMA copies, wgmma descriptors,
// the 64-key P V chain).
//
// Shape of one CTA (384 threads = 3 warpgroups, one CTA per SM):
// - warpgroups 1 and 2 are consumers; each owns one job, (head, 64-row query block), query block
//   fastest, so a CTA takes two neighbouring query blocks of one head and the CTAs in flight share
//   that head's K and V in L2 (H3_VSA_HOPPER_ORDER=head restores the mma.sync grid's order, head
//   fastest). Two jobs have two different key tile lists, so each consumer has its own rings.
// - warpgroup 0 is the producer: warps 2c and 2c + 1 serve consumer c, one streaming K and one V,
//   each in list order, one 64-row key block per bulk tensor copy pair (128-byte swizzle; a
//   256-row tile is up to four blocks). Lane 0 issues; the warp reads the list 32 entries at a time
//   so the copies never wait on a dependent global load. The K warp stores each block's real key
//   count into its stage's slot before the stage's "full" arrive, which releases it.
// - A consumer holds its 64 query rows in registers, in the wgmma A-fragment layout (loaded once
//   per job), and works in stages of 128 keys, two 64-key blocks a and b, S = Q [K_a K_b]^T being
//   one chain of 8 wgmma m64n128k16 (K from shared memory). With S_j computed and P_b V_b of
//   stage j - 1 in flight, it runs the softmax of both blocks (masks, running max, exp2, row sums
//   in float32; block b's running max includes block a's), rescales O by block a's factor once
//   P_b V_b has landed, issues P_a V_a and S_{j+1} back to back, rescales O by block b's factor
//   once P_a V_a has landed, and issues P_b V_b, which runs under the next softmax. That is the
//   reference kernel's recurrence block for block (§5.5: a running max and a rounding of P to the
//   activation dtype per 64-key block, the unrounded P summed for the denominator), so it follows
//   the reference's roundings; on every backend-ops case its output equals the mma.sync kernel's
//   bit for bit.
//   Measured at the production shape (issue #7, bench/RESULTS.md): with 64-key S chains and Q in
//   shared memory the fine branch took 16.1 ms, this shape 14.6 - 15.3 ms; with the copies of K
//   and V removed it ran only 3 % faster, so what bounds it is the consumers' dependency chains
//   (two warps per scheduler), not memory.
// - Shared memory per consumer: K in 4 slots of 64 keys laid out so that the two slots of a stage
//   form one 128-key operand ([dim half][4 slots][64 keys][64]), V in 3 slots of 64 keys. Q in
//   registers leaves room for the fourth K slot.
// - A stream of odd length gets a second block in its last stage that repeats the first with a
//   real key count of 0: fully masked, P = 0, and finite values, so it adds nothing.
// - The store divides by the row sum, rounds (the fine branch), and with a gate adds
//   round(round(out_c) * g) and rounds again (§5.6), writing only real query rows through the
//   partition.
#include "ops/cuda/vsa_hopper.cuh"

#include <cstdlib>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "core/status.h"
#include "ops/cuda/attention_hopper.cuh"
#include "ops/cuda/attention_hopper_kernel.cuh"
#include "ops/cuda/cuda_util.h"

namespace h3::ops::cuda {

namespace {

namespace hp = hopper;

constexpr int kVsaRows = 64;   // query rows per consumer (one job)
constexpr int kVsaBlock = 64;  // keys per block (the reference kernel's BLOCK_N)
constexpr int kVsaKSlots = 4;  // two 128-key stages
constexpr int kVsaVSlots = 3;
constexpr int kVsaConsumers = 2;
constexpr int kVsaThreads = 128 * (1 + kVsaConsumers);
constexpr int kVsaBoxBytes = kVsaBlock * 128;                 // 64 rows x 64 columns: 8 KiB
constexpr int kVsaKHalfBytes = kVsaKSlots * kVsaBoxBytes;     // one dim half of the K ring: 32 KiB
constexpr int kVsaKBytes = 2 * kVsaKHalfBytes;                // 64 KiB
constexpr int kVsaVSlotBytes = 2 * kVsaBoxBytes;              // one V block: 16 KiB
constexpr int kVsaConsumerBytes = kVsaKBytes + kVsaVSlots * kVsaVSlotBytes;  // 112 KiB
// Per consumer: k_full[2], k_empty[2], v_full[3], v_empty[3] mbarriers, then the real key counts
// of the K stages' blocks.
constexpr int kVsaBarCount = 2 * (kVsaKSlots / 2) + 2 * kVsaVSlots;
constexpr int kVsaMetaPerConsumer = 8 * kVsaBarCount + 4 * kVsaKSlots;
constexpr int kVsaSmemBytes = kVsaConsumers * kVsaConsumerBytes + 1024 + 1024;
static_assert(kVsaConsumers * kVsaMetaPerConsumer <= 1024, "mbarrier area");
static_assert(kVsaSmemBytes <= 227 * 1024, "shared memory of the VSA Hopper kernel");

struct VsaKernelArgs {
  const void* tq;  // tile-ordered q [n E, H, 128]
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

// Consumer c's part of shared memory.
struct Ring {
  uint32_t k, v, bars;  // K ring, V ring, mbarriers
  int* rows;            // real key counts of the K slots (generic pointer)
  __device__ uint32_t k_full(int st) const { return bars + 8u * st; }
  __device__ uint32_t k_empty(int st) const { return bars + 8u * (2 + st); }
  __device__ uint32_t v_full(int s) const { return bars + 8u * (4 + s); }
  __device__ uint32_t v_empty(int s) const { return bars + 8u * (4 + kVsaVSlots + s); }
  // Dim half 0 of K stage st (slots 2 st and 2 st + 1); dim half 1 is kVsaKHalfBytes on.
  __device__ uint32_t k_stage(int st) const { return k + st * 2 * kVsaBoxBytes; }
  __device__ uint32_t v_slot(int s) const { return v + s * kVsaVSlotBytes; }
};

#ifdef H3_HOPPER_ATTN_DEVICE

// S = Q K^T over the 128 keys of a K stage. qa holds Q in the A-fragment layout, 4 registers per
// k-step; a k-step inside a dim half moves 32 bytes, the next dim half is kVsaKHalfBytes on, the
// next 8 keys 1024 bytes on (two slots in a row are one 128-row operand).
template <typename T>
__device__ __forceinline__ void issue_qk(float (&s)[64], const uint32_t (&qa)[32], uint32_t k_base) {
#pragma unroll
  for (int ks = 0; ks < hp::kHeadDim / 16; ++ks) {
    const uint32_t off = (ks >> 2) * kVsaKHalfBytes + (ks & 3) * 32;
    const uint32_t a[4] = {qa[4 * ks], qa[4 * ks + 1], qa[4 * ks + 2], qa[4 * ks + 3]};
    hp::detail::Wgmma<T>::rs_k(s, a, hp::detail::make_desc(k_base + off, 16, 1024), ks > 0 ? 1 : 0);
  }
}

#endif  // H3_HOPPER_ATTN_DEVICE

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
    // Not the prefix query blocks first (they see every key tile, about ten times a video
    // block's work): starting them together measured 4 % slower than this order (issue #7).
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

#ifdef H3_HOPPER_ATTN_DEVICE

// One producer warp: the K stream (kind 0) or the V stream (kind 1) of consumer c's job.
template <int kind>
__device__ __forceinline__ void vsa_produce(const VsaKernelArgs& a, int c, const Ring& ring, const CUtensorMap* map) {
  using namespace hp::detail;
  Job job;
  if (!job_of(a, c, job)) return;
  const int lane = threadIdx.x & 31;
  const int E = a.E;
  int j = 0;         // block counter of the stream
  int last_row = 0;  // first row of the previous block
  // Block j (64 rows from `row`, `rows` of them real) into its slot.
  auto block = [&](int row, int rows) {
    if (kind == 0) {
      const int st = (j >> 1) & 1, half = j & 1;
      if (half == 0 && j >= kVsaKSlots) mbar_wait(ring.k_empty(st), ((j >> 2) - 1) & 1);
      if (lane == 0) {
        ring.rows[2 * st + half] = rows;
        const uint32_t dst = ring.k_stage(st) + half * kVsaBoxBytes;
        asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(ring.k_full(st)),
                     "r"(2 * kVsaBoxBytes)
                     : "memory");
        tma_load_3d(dst, map, 0, row, job.head, ring.k_full(st));
        tma_load_3d(dst + kVsaKHalfBytes, map, 64, row, job.head, ring.k_full(st));
        // The stage's one arrive, after both blocks' counts are stored: it releases them.
        if (half == 1) mbar_arrive(ring.k_full(st));
      }
    } else {
      const int s = j % kVsaVSlots;
      if (j >= kVsaVSlots) mbar_wait(ring.v_empty(s), ((j / kVsaVSlots) - 1) & 1);
      if (lane == 0) {
        mbar_expect_tx(ring.v_full(s), 2 * kVsaBoxBytes);
        tma_load_3d(ring.v_slot(s), map, 0, row, job.head, ring.v_full(s));
        tma_load_3d(ring.v_slot(s) + kVsaBoxBytes, map, 64, row, job.head, ring.v_full(s));
      }
    }
    __syncwarp();
    last_row = row;
    ++j;
  };
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
      for (int b = 0; b < size; b += kVsaBlock) block(tile * E + b, min(kVsaBlock, size - b));
    }
  }
  if (j & 1) block(last_row, 0);
}

// Consumer c (a compile-time constant, so its buffers are fixed offsets and its control flow
// depends on blockIdx only, as in the dense kernel).
template <typename T, int c>
__device__ __forceinline__ void vsa_consume(const VsaKernelArgs& a, const Ring& ring) {
  using namespace hp::detail;
  Job job;
  if (!job_of(a, c, job)) return;
  const int lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
  const int g = lane >> 2, tq = lane & 3;
  const float sl2 = a.scale_log2;
  // Stages of the stream (precomputed, so the loop's trip count is uniform over the warpgroup and
  // the wgmma chains are not serialized by a divergent path).
  const int n_stages = (a.blocks[job.lrow] + 1) / 2;
  const volatile int* rows_slot = ring.rows;

  // Q rows warp * 16 + g (+ 8) of the job, columns 16 ks + 2 tq (+ 8), pairs packed as the A
  // fragment of k-step ks wants them. Pad rows of the tiled buffer are zeros.
  uint32_t qa[32];
  {
    const int64_t row_stride = static_cast<int64_t>(a.heads) * hp::kHeadDim;
    const T* qb = static_cast<const T*>(a.tq) +
                  (static_cast<int64_t>(job.tile) * a.E + job.q_local + warp * 16 + g) * row_stride +
                  static_cast<int64_t>(job.head) * hp::kHeadDim + tq * 2;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int ks = i / 4, r = i & 1, hi = (i >> 1) & 1;
      qa[i] = *reinterpret_cast<const uint32_t*>(qb + r * 8 * row_stride + ks * 16 + hi * 8);
    }
  }

  float o[64], s[64];
  uint32_t pa[16], pb[16];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m_row[2] = {-INFINITY, -INFINITY};
  float l_row[2] = {0.0f, 0.0f};
  float corr_a[2], corr_b[2];

  // The reference's step for blocks a and b of the stage in S (ra, rb of their keys real): masks
  // key slots past the real rows, then per block a new running max, the correction factor for the
  // old sums and exp2, in that order; block b's max includes block a's. The two blocks' maxima
  // and exponentials are independent work, interleaved here.
  auto softmax = [&](int ra, int rb) {
    if (ra < kVsaBlock || rb < kVsaBlock) {  // the same values in every thread: only pad blocks pay
#pragma unroll
      for (int i = 0; i < 64; ++i) {
        const int key = ((i & 31) / 4) * 8 + tq * 2 + (i & 1);
        s[i] = key >= (i < 32 ? ra : rb) ? -INFINITY : s[i];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          mx[h] = fmaxf(mx[h], fmaxf(s[32 * h + 4 * nb + 2 * r], s[32 * h + 4 * nb + 2 * r + 1]));
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      }
      const float m_a = fmaxf(m_row[r], mx[0] * sl2);
      const float m_b = fmaxf(m_a, mx[1] * sl2);
      const float use_a = m_a == -INFINITY ? 0.0f : m_a;
      const float use_b = m_b == -INFINITY ? 0.0f : m_b;
      corr_a[r] = fast_exp2(m_row[r] - use_a);
      corr_b[r] = fast_exp2(m_a - use_b);
      m_row[r] = m_b;
      float sum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float m_use = h == 0 ? use_a : use_b;
          const float p0 = fast_exp2(fmaf(s[32 * h + 4 * nb + 2 * r], sl2, -m_use));
          const float p1 = fast_exp2(fmaf(s[32 * h + 4 * nb + 2 * r + 1], sl2, -m_use));
          s[32 * h + 4 * nb + 2 * r] = p0;
          s[32 * h + 4 * nb + 2 * r + 1] = p1;
          sum[h] += p0 + p1;
        }
      }
      l_row[r] = (l_row[r] * corr_a[r] + sum[0]) * corr_b[r] + sum[1];
    }
  };
  auto pack = [&](int h, uint32_t(&p)[16]) {
#pragma unroll
    for (int i = 0; i < 16; ++i) p[i] = Wgmma<T>::pack(s[32 * h + 2 * i], s[32 * h + 2 * i + 1]);
  };
  // O = O * corr. Once a row's running max settles its factor is exactly 1; skipping the
  // multiplications when a whole warp's are changes no bit.
  auto rescale = [&](const float(&corr)[2]) {
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] *= corr[(i >> 1) & 1];
    }
  };
  // Waits for V block vb of the stream.
  auto v_wait = [&](int vb) { mbar_wait(ring.v_full(vb % kVsaVSlots), (vb / kVsaVSlots) & 1); };

  // Stage j, with S_j computed and P_b V_b of stage j - 1 in flight. The tensor pipe gets
  // P_a V_a (j), S_{j+1} and P_b V_b (j) back to back, while this warpgroup rescales O between
  // them and then runs the next softmax under P_b V_b (j).
  int ra = 0, rb = 0;  // real key counts of the current stage's blocks
  auto stage = [&](int j, auto last_tag) {
    constexpr bool last = decltype(last_tag)::value;
    softmax(ra, rb);
    pack(0, pa);
    wgmma_wait<0>();  // P_b V_b of stage j - 1: pb is free again
    fence_regs(o);
    fence_regs(pb);
    pack(1, pb);
    // Every wait before the next wgmma group: a wait (a spin loop) between chains puts the later
    // ones on a path the compiler cannot prove uniform, and it then serializes them (C7520).
    v_wait(2 * j);
    v_wait(2 * j + 1);
    int ra_next = 0, rb_next = 0;
    if constexpr (!last) {
      const int st = (j + 1) & 1;
      mbar_wait(ring.k_full(st), ((j + 1) >> 1) & 1);
      // The counts are read before the stage is released (the producer then reuses the slots).
      ra_next = rows_slot[2 * st];
      rb_next = rows_slot[2 * st + 1];
    }
    if (j > 0) mbar_arrive(ring.v_empty((2 * j - 1) % kVsaVSlots));
    rescale(corr_a);
    fence_regs(o);
    fence_regs(pa);
    fence_regs(pb);
    fence_regs(s);
    fence_regs(qa);
    wgmma_fence();
    issue_pv<T, kVsaBlock>(o, pa, ring.v_slot((2 * j) % kVsaVSlots));
    wgmma_commit();
    if constexpr (!last) {
      issue_qk<T>(s, qa, ring.k_stage((j + 1) & 1));
      wgmma_commit();
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    fence_regs(o);
    fence_regs(pa);
    mbar_arrive(ring.v_empty((2 * j) % kVsaVSlots));
    rescale(corr_b);
    fence_regs(o);
    wgmma_fence();
    issue_pv<T, kVsaBlock>(o, pb, ring.v_slot((2 * j + 1) % kVsaVSlots));
    wgmma_commit();
    if constexpr (!last) {
      wgmma_wait<1>();  // S_{j+1}
      fence_regs(s);
      mbar_arrive(ring.k_empty((j + 1) & 1));
      ra = ra_next;
      rb = rb_next;
    } else {
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(pb);
      mbar_arrive(ring.v_empty((2 * j + 1) % kVsaVSlots));
    }
  };

  if (n_stages > 0) {
    mbar_wait(ring.k_full(0), 0);
    ra = rows_slot[0];
    rb = rows_slot[1];
    fence_regs(qa);
    wgmma_fence();
    issue_qk<T>(s, qa, ring.k_stage(0));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);
    mbar_arrive(ring.k_empty(0));
    for (int j = 0; j + 1 < n_stages; ++j) stage(j, std::false_type{});
    stage(n_stages - 1, std::true_type{});
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
    vsa_hopper_kernel(const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                      const VsaKernelArgs a) {
#ifdef H3_HOPPER_ATTN_DEVICE
  using namespace hp::detail;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t meta = base + kVsaConsumers * kVsaConsumerBytes;
  auto ring_of = [&](int c) {
    Ring r;
    r.k = base + c * kVsaConsumerBytes;
    r.v = r.k + kVsaKBytes;
    r.bars = meta + c * kVsaMetaPerConsumer;
    r.rows = reinterpret_cast<int*>(smem_raw + (r.bars + 8 * kVsaBarCount - raw));
    return r;
  };

  if (threadIdx.x == 0) {
    for (int c = 0; c < kVsaConsumers; ++c) {
      const Ring r = ring_of(c);
      for (int st = 0; st < 2; ++st) {
        mbar_init(r.k_full(st), 1);
        mbar_init(r.k_empty(st), 128);
      }
      for (int s = 0; s < kVsaVSlots; ++s) {
        mbar_init(r.v_full(s), 1);
        mbar_init(r.v_empty(s), 128);
      }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    // The producer needs few registers; the consumers' Q fragments, O, S and P need more than an
    // even split of the register file leaves them (168).
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    const int w = threadIdx.x / 32, c = w >> 1;
    if (w & 1) {
      vsa_produce<1>(a, c, ring_of(c), &map_v);
    } else {
      vsa_produce<0>(a, c, ring_of(c), &map_k);
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    if (warpgroup == 1) {
      vsa_consume<T, 0>(a, ring_of(0));
    } else {
      vsa_consume<T, 1>(a, ring_of(1));
    }
  }
#else
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
    total += (sizes[t] + kVsaBlock - 1) / kVsaBlock;
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

  CUtensorMap mk, mv;
  for (auto [map, ptr, name] : {std::tuple{&mk, p.tk, "k"}, std::tuple{&mv, p.tv, "v"}}) {
    const char* e = hp::make_map(map, ptr, rows, p.heads, row_stride, D, p.f16, kVsaBlock);
    H3_CHECK(e == nullptr, ErrorCode::kInternal, "vsa_attention (Hopper fine kernel), tiled ", name, ": ", e);
  }
  VsaKernelArgs a{};
  a.tq = p.tq;
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
  kernel<<<static_cast<unsigned>(ctas), kVsaThreads, kVsaSmemBytes, stream>>>(mk, mv, a);
  check_launch("vsa_hopper_fine");
}

}  // namespace h3::ops::cuda
