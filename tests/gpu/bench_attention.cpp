// Attention micro-benchmark, a mode of the gpu test binary: runs only with H3_BENCH_ATTENTION=1
// (otherwise a visible skip), so CI never pays for it. Prints one table row per shape and kernel
// variant: milliseconds (median of the timed runs, CUDA events) and TFLOP/s counting
// 4 * S_q * S_kv * H * D for bidirectional attention (half that when causal), the convention of
// FlashAttention's and PyTorch's reports. The DiT shape (37,966 rows, 56 heads x 128, bf16) is the
// one that matters: PyTorch SDPA does it in 72 ms (575 TFLOP/s) on the H200.
// H3_BENCH_CHECK=1 also compares the flash result at the DiT shape with the float32 generic kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/ops.h"

#ifdef H3_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace h3 {
namespace {

#ifdef H3_WITH_CUDA

Tensor gpu_randn(const Shape& shape, DType t, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = nd(gen);
  return Tensor::from_f32(v, shape, t).to(Device::cuda(0));
}

struct Shape4 {
  const char* name;
  int64_t s, hq, hkv, d;
  bool causal;
  DType dtype;
  int reps;
  int segments =
      1;  // > 1: a block-diagonal batch of equal segments (cu_seqlens), as the VAE's tiles
};

double time_ms(const Tensor& q, const Tensor& k, const Tensor& v, const ops::AttentionParams& p, int reps) {
  (void)ops::attention(q, k, v, p);  // warm-up (and first-launch attribute setup)
  cudaDeviceSynchronize();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    (void)ops::attention(q, k, v, p);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

TEST(AttentionBench, Shapes) {
  const char* on = std::getenv("H3_BENCH_ATTENTION");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set H3_BENCH_ATTENTION=1 to run the attention benchmark";
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<Shape4> shapes = {
      {"dit_768p_124f", 37966, 56, 56, 128, false, DType::kBF16, 5},
      {"dit_half", 18983, 56, 56, 128, false, DType::kBF16, 5},
      {"qwen3_lm_causal_gqa", 4096, 64, 8, 128, true, DType::kBF16, 10},
      {"vae_decoder_fp16", 16384, 2, 2, 64, false, DType::kF16, 10},
      // The video VAE decoder's call: 4 tiles of 1,797 rows, 32 heads of 64 (1,764 such calls per
      // 1344x768x124 decode), and the same head dim on long sequences, which tells the per-tile
      // rate apart from what short segments cost (prologue, epilogue, the ragged last tiles).
      {"vae_tiles_4x1797", 4 * 1797, 32, 32, 64, false, DType::kF16, 20, 4},
      {"d64_long_fp16", 16384, 16, 16, 64, false, DType::kF16, 10},
      {"vision_d72_generic", 4096, 16, 16, 72, false, DType::kBF16, 3},
      {"audio_d256_f32_causal", 2048, 1, 1, 256, true, DType::kF32, 3},
  };
  std::printf("\n%-24s %8s %5s %5s %4s %7s %-8s %10s %10s\n", "shape", "S", "Hq", "Hkv", "D", "variant", "kernel",
              "ms", "TFLOP/s");
  for (const Shape4& sh : shapes) {
    const Tensor q = gpu_randn({sh.s, sh.hq, sh.d}, sh.dtype, 1);
    const Tensor k = gpu_randn({sh.s, sh.hkv, sh.d}, sh.dtype, 2);
    const Tensor v = gpu_randn({sh.s, sh.hkv, sh.d}, sh.dtype, 3);
    ops::AttentionParams p;
    p.causal = sh.causal;
    if (sh.segments > 1) {
      for (int i = 0; i <= sh.segments; ++i) p.cu_seqlens.push_back(sh.s * i / sh.segments);
    }
    const double seg = static_cast<double>(sh.s) / sh.segments;
    const double flop = 4.0 * sh.segments * seg * seg * sh.hq * sh.d * (sh.causal ? 0.5 : 1.0);
    const bool flash = ops::cuda::attention_path(q, k, v, nullptr) == ops::cuda::AttentionPath::kFlash;
    const int variants = (flash && sh.d == 128 && sh.dtype == DType::kBF16) ? 3 : 1;
    // Head dim 64 on the Hopper kernel: two consumer warpgroups per CTA, then three (variant 1).
    const bool d64 = sh.d == 64 && p.kernel == ops::AttentionKernel::kAuto &&
                     ops::attention_kernel_for(q, k, v, p) == ops::AttentionKernel::kHopper;
    for (int wg = 0; wg < (d64 ? 2 : 1); ++wg) {
      if (d64) setenv("H3_ATTN_HOPPER_D64_WARPGROUPS", wg ? "3" : "2", 1);
      for (int var = 0; var < variants; ++var) {
        setenv("H3_ATTN_VARIANT", std::to_string(var).c_str(), 1);
        const double ms = time_ms(q, k, v, p, sh.reps);
        std::printf("%-24s %8lld %5lld %5lld %4lld %7d %-8s %10.3f %10.1f\n", sh.name,
                    static_cast<long long>(sh.s), static_cast<long long>(sh.hq),
                    static_cast<long long>(sh.hkv), static_cast<long long>(sh.d), var + wg,
                    d64 ? (wg ? "hopper3" : "hopper2") : (flash ? "flash" : "generic"), ms,
                    flop / (ms * 1e-3) / 1e12);
        std::fflush(stdout);
      }
    }
    unsetenv("H3_ATTN_VARIANT");
    unsetenv("H3_ATTN_HOPPER_D64_WARPGROUPS");
    const char* check = std::getenv("H3_BENCH_CHECK");
    if (flash && check && std::string(check) == "1" && sh.s > 30000) {
      const Tensor a = ops::attention(q, k, v, p);
      setenv("H3_ATTN_GENERIC", "1", 1);
      const Tensor g = ops::attention(q, k, v, p);
      unsetenv("H3_ATTN_GENERIC");
      const std::vector<float> x = a.to(Device::cpu()).to_f32_vector(), y = g.to(Device::cpu()).to_f32_vector();
      double num = 0, den = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
        den += static_cast<double>(y[i]) * y[i];
      }
      const double rel = std::sqrt(num / den);
      std::printf("%-24s flash vs generic (f32 math, bf16 output) rel_l2=%.3e (bound 1e-2)\n", sh.name, rel);
      EXPECT_LE(rel, 1e-2);
    }
  }
}

#else

TEST(AttentionBench, Shapes) { GTEST_SKIP() << "this build has no CUDA"; }

#endif

}  // namespace
}  // namespace h3
