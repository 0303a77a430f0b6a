// Standalone harness for the Hopper attention kernel (src/ops/cuda/attention_hopper_kernel.cuh):
// checks it against a float64 CPU reference on small shapes (ragged lengths, grouped-query heads,
// interleaved [S, H, D] strides, block-diagonal tiles) and on sampled rows of the DiT shape, then
// times the DiT shape (37,966 rows, 56 heads x 128, bidirectional).
//
// Build (no GPU needed to build):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc \
//        bench/kernels/attn_hopper_bench.cu -o .device-attn/attn_bench
// Run on an H200: .device-attn/attn_bench [iterations]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "ops/cuda/attention_hopper_kernel.cuh"

namespace hp = h3::ops::cuda::hopper;

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

struct Case {
  const char* name;
  int s, hq, hkv;
  std::vector<int> cu;  // empty: one segment
  bool f16 = false;
  bool fused = false;   // q, k, v as views of one [S, 3, H, 128] buffer (a fused QKV projection)
};

static float to_float(uint16_t b, bool f16) {
  if (f16) {
    __half h;
    std::memcpy(&h, &b, 2);
    return __half2float(h);
  }
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
static uint16_t from_float(float f, bool f16) {
  uint16_t b;
  if (f16) {
    __half h = __float2half_rn(f);
    std::memcpy(&b, &h, 2);
  } else {
    __nv_bfloat16 h = __float2bfloat16_rn(f);
    std::memcpy(&b, &h, 2);
  }
  return b;
}

// Reference for rows `rows` of head `h`; layout [S, H, 128] contiguous for q/k/v.
static double check_rows(const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                         const std::vector<uint16_t>& v, const std::vector<uint16_t>& o, int s, int hq, int hkv,
                         const std::vector<int>& cu, const std::vector<int>& rows, int h, bool f16,
                         double* max_abs) {
  const int d = 128, group = hq / hkv, kh = h / group;
  const double scale = 1.0 / std::sqrt(128.0);
  double err2 = 0, ref2 = 0;
  std::vector<double> sc(s);
  for (int r : rows) {
    int lo = 0, hi = s;
    for (size_t i = 0; i + 1 < cu.size(); ++i) {
      if (r >= cu[i] && r < cu[i + 1]) lo = cu[i], hi = cu[i + 1];
    }
    double mx = -1e300;
    for (int j = lo; j < hi; ++j) {
      double a = 0;
      for (int c = 0; c < d; ++c) {
        a += static_cast<double>(to_float(q[(static_cast<size_t>(r) * hq + h) * d + c], f16)) *
             to_float(k[(static_cast<size_t>(j) * hkv + kh) * d + c], f16);
      }
      sc[j] = a * scale;
      mx = std::max(mx, sc[j]);
    }
    double sum = 0;
    for (int j = lo; j < hi; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
    for (int c = 0; c < d; ++c) {
      double a = 0;
      for (int j = lo; j < hi; ++j) a += sc[j] * to_float(v[(static_cast<size_t>(j) * hkv + kh) * d + c], f16);
      a /= sum;
      const double got = to_float(o[(static_cast<size_t>(r) * hq + h) * d + c], f16);
      err2 += (got - a) * (got - a);
      ref2 += a * a;
      *max_abs = std::max(*max_abs, std::fabs(got - a));
    }
  }
  return std::sqrt(err2 / std::max(ref2, 1e-30));
}

struct Dev {
  uint16_t *q, *k, *v, *o;
  uint16_t* qkv = nullptr;
  hp::TileDesc* tiles = nullptr;
  int n_tiles = 0;
};

static Dev upload(const Case& c, const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                  const std::vector<uint16_t>& v) {
  Dev d;
  if (c.fused) {
    const size_t row = static_cast<size_t>(c.hq) * 128;
    CK(cudaMalloc(&d.qkv, q.size() * 2 * 3));
    CK(cudaMalloc(&d.o, q.size() * 2));
    d.q = d.qkv;
    d.k = d.qkv + row;
    d.v = d.qkv + 2 * row;
    CK(cudaMemcpy2D(d.q, row * 6, q.data(), row * 2, row * 2, c.s, cudaMemcpyHostToDevice));
    CK(cudaMemcpy2D(d.k, row * 6, k.data(), row * 2, row * 2, c.s, cudaMemcpyHostToDevice));
    CK(cudaMemcpy2D(d.v, row * 6, v.data(), row * 2, row * 2, c.s, cudaMemcpyHostToDevice));
    CK(cudaMemset(d.o, 0xff, q.size() * 2));
    return d;
  }
  CK(cudaMalloc(&d.q, q.size() * 2));
  CK(cudaMalloc(&d.k, k.size() * 2));
  CK(cudaMalloc(&d.v, v.size() * 2));
  CK(cudaMalloc(&d.o, q.size() * 2));
  CK(cudaMemcpy(d.q, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.k, k.data(), k.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.v, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(d.o, 0xff, q.size() * 2));  // NaN pattern: unwritten output shows up
  if (!c.cu.empty()) {
    std::vector<hp::TileDesc> t;
    for (size_t i = 0; i + 1 < c.cu.size(); ++i) {
      for (int r = c.cu[i]; r < c.cu[i + 1]; r += hp::kRowsPerCta) {
        t.push_back({r, std::min(r + hp::kRowsPerCta, c.cu[i + 1]), c.cu[i], c.cu[i + 1]});
      }
    }
    d.n_tiles = static_cast<int>(t.size());
    CK(cudaMalloc(&d.tiles, t.size() * sizeof(hp::TileDesc)));
    CK(cudaMemcpy(d.tiles, t.data(), t.size() * sizeof(hp::TileDesc), cudaMemcpyHostToDevice));
  }
  return d;
}

static hp::Problem problem(const Case& c, const Dev& d) {
  hp::Problem p{};
  p.q = d.q;
  p.k = d.k;
  p.v = d.v;
  p.o = d.o;
  p.q_row = p.o_row = static_cast<int64_t>(c.hq) * 128;
  p.q_head = p.k_head = p.v_head = p.o_head = 128;
  p.k_row = p.v_row = static_cast<int64_t>(c.hkv) * 128;
  if (c.fused) p.q_row = p.k_row = p.v_row = static_cast<int64_t>(c.hq) * 128 * 3;
  p.s_q = p.s_kv = c.s;
  p.hq = c.hq;
  p.hkv = c.hkv;
  p.scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(128.0));
  p.f16 = c.f16;
  p.tiles = d.tiles;
  p.n_tiles = d.n_tiles;
  return p;
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 5;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; kernel: %d stages\n", prop.name, prop.multiProcessorCount, hp::kStages);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::vector<Case> cases = {
      {"s200_h2", 200, 2, 2, {}},
      {"s128_h1", 128, 1, 1, {}},
      {"s1_h1", 1, 1, 1, {}},
      {"s777_gqa8x2", 777, 8, 2, {}},
      {"s1000_h4_f16", 1000, 4, 4, {}, true},
      {"varlen_s600", 600, 4, 2, {0, 64, 64, 193, 460, 600}},
      {"fused_s300", 300, 4, 4, {}, false, true},
      {"dit_37966x56", 37966, 56, 56, {}},
  };
  int failures = 0;
  for (const Case& c : cases) {
    const bool big = c.s > 10000;
    std::vector<uint16_t> q(static_cast<size_t>(c.s) * c.hq * 128), k(static_cast<size_t>(c.s) * c.hkv * 128),
        v(k.size()), o(q.size());
    if (big) {
      // A sum of four uniforms (variance 1 after scaling): close enough to normal, much faster.
      uint64_t st = 0x9E3779B97F4A7C15ull;
      auto fill = [&](std::vector<uint16_t>& a) {
        for (auto& x : a) {
          float acc = 0;
          for (int i = 0; i < 4; ++i) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            acc += static_cast<float>(st >> 40) * (1.0f / 16777216.0f) - 0.5f;
          }
          x = from_float(acc * 1.7320508f, c.f16);
        }
      };
      fill(q);
      fill(k);
      fill(v);
    } else {
      for (auto& x : q) x = from_float(nd(rng), c.f16);
      for (auto& x : k) x = from_float(nd(rng), c.f16);
      for (auto& x : v) x = from_float(nd(rng), c.f16);
    }
    Dev d = upload(c, q, k, v);
    const hp::Problem p = problem(c, d);
    if (const char* e = hp::launch(p, nullptr)) {
      std::printf("%s: launch failed: %s\n", c.name, e);
      return 2;
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(o.data(), d.o, o.size() * 2, cudaMemcpyDeviceToHost));
    double worst = 0, max_abs = 0;
    for (int h : {0, c.hq - 1, c.hq / 2}) {
      std::vector<int> rows;
      if (big) {
        for (int r = 0; r < 24; ++r) rows.push_back(r);
        for (int r = c.s - 24; r < c.s; ++r) rows.push_back(r);
        for (int r = 0; r < 16; ++r) rows.push_back((r * 7919) % c.s);
      } else {
        for (int r = 0; r < c.s; ++r) rows.push_back(r);
      }
      worst = std::max(worst, check_rows(q, k, v, o, c.s, c.hq, c.hkv, c.cu, rows, h, c.f16, &max_abs));
      if (big) break;
    }
    const bool ok = worst < 1e-2 && std::isfinite(worst);
    failures += ok ? 0 : 1;
    std::printf("%-16s rel_l2=%.3e max_abs=%.3e (bound rel_l2 1e-2) %s\n", c.name, worst, max_abs,
                ok ? "OK" : "FAIL");
    if (big) {
      cudaEvent_t a, b;
      CK(cudaEventCreate(&a));
      CK(cudaEventCreate(&b));
      CK(cudaEventRecord(a));
      for (int i = 0; i < iters; ++i) hp::launch(p, nullptr);
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, a, b));
      ms /= iters;
      const double flops = 4.0 * c.s * static_cast<double>(c.s) * c.hq * 128;
      std::printf("%-16s %.2f ms  %.1f TFLOP/s (reference SDPA: 72 ms, 575 TFLOP/s)\n", c.name, ms,
                  flops / (ms * 1e-3) / 1e12);
    }
    if (d.qkv) {
      cudaFree(d.qkv);
    } else {
      cudaFree(d.q);
      cudaFree(d.k);
      cudaFree(d.v);
    }
    cudaFree(d.o);
    cudaFree(d.tiles);
  }
  std::printf("%s (%d failing)\n", failures ? "FAILED" : "ALL OK", failures);
  return failures ? 1 : 0;
}
