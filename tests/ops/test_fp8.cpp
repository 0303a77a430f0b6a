// FP8 (E4M3) weights and GEMMs: backend-ops cases against a float64 reference that applies the
// scaling rules of ops/fp8.h on its own (the E4M3 rounding itself is core's f8e4m3_from_f32,
// checked against torch's values in the dtype tests), and unit tests of the quantizer's guarantees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend_ops.h"
#include "core/status.h"
#include "ops/fp8.h"
#include "ops/ops.h"

namespace h3::test::ops {
namespace {

using h3::ops::Fp8ActScaling;
using h3::ops::Fp8WeightScaling;

constexpr int64_t kBlock = h3::ops::kFp8BlockSize;

// One group's values rounded to E4M3 under the amax / 448 scale and multiplied back, in float64.
void ref_fake_quant(std::vector<double>& v, const std::vector<size_t>& idx) {
  float amax = 0.0f;
  for (size_t i : idx) amax = std::max(amax, static_cast<float>(std::fabs(v[i])));
  const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
  for (size_t i : idx)
    v[i] = static_cast<double>(f8e4m3_to_f32(f8e4m3_from_f32(static_cast<float>(v[i]) / s))) * s;
}

std::vector<double> ref_weight(const Tensor& w, Fp8WeightScaling scaling) {
  std::vector<double> v = f64(w);
  const int64_t n = w.size(0), k = w.size(1);
  if (scaling == Fp8WeightScaling::kPerChannel) {
    for (int64_t r = 0; r < n; ++r) {
      std::vector<size_t> idx;
      for (int64_t c = 0; c < k; ++c) idx.push_back(static_cast<size_t>(r * k + c));
      ref_fake_quant(v, idx);
    }
  } else {
    for (int64_t r0 = 0; r0 < n; r0 += kBlock)
      for (int64_t c0 = 0; c0 < k; c0 += kBlock) {
        std::vector<size_t> idx;
        for (int64_t r = r0; r < std::min(n, r0 + kBlock); ++r)
          for (int64_t c = c0; c < std::min(k, c0 + kBlock); ++c)
            idx.push_back(static_cast<size_t>(r * k + c));
        ref_fake_quant(v, idx);
      }
  }
  return v;
}

std::vector<double> ref_activation(const Tensor& x, Fp8ActScaling act) {
  std::vector<double> v = f64(x);
  const int64_t k = x.size(-1), rows = k ? x.numel() / k : 0;  // no values: nothing to round
  if (act == Fp8ActScaling::kPerTensor) {
    std::vector<size_t> idx(v.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    ref_fake_quant(v, idx);
  } else if (act == Fp8ActScaling::kPerGroup) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c0 = 0; c0 < k; c0 += kBlock) {
        std::vector<size_t> idx;
        for (int64_t c = c0; c < std::min(k, c0 + kBlock); ++c)
          idx.push_back(static_cast<size_t>(r * k + c));
        ref_fake_quant(v, idx);
      }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<size_t> idx;
      for (int64_t c = 0; c < k; ++c) idx.push_back(static_cast<size_t>(r * k + c));
      ref_fake_quant(v, idx);
    }
  }
  return v;
}

// y = x w^T (+ b) in float64: x [m, k], w [n, k], b [n] or empty.
std::vector<double> ref_gemm(const std::vector<double>& x, const std::vector<double>& w,
                             const std::vector<double>& b, int64_t m, int64_t k, int64_t n) {
  std::vector<double> y(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = b.empty() ? 0.0 : b[static_cast<size_t>(j)];
      for (int64_t kk = 0; kk < k; ++kk)
        acc += x[static_cast<size_t>(i * k + kk)] * w[static_cast<size_t>(j * k + kk)];
      y[static_cast<size_t>(i * n + j)] = acc;
    }
  return y;
}

std::string tag(Fp8WeightScaling w, Fp8ActScaling a) {
  return std::string("w") + h3::ops::fp8_weight_scaling_name(w) + "_a" +
         h3::ops::fp8_act_scaling_name(a);
}

// A float32 output from the FP8 tensor cores (K % 16 == 0, N % 8 == 0, a pairing they take)
// carries Hopper's FP8 accumulator, which keeps fewer bits than float32 between cuBLASLt's
// promotions: measured against the CPU's float32 sums, per channel on the H200 rel_l2 1.9e-4 and
// rel_max 5.7e-4 (64 x 256 -> 96, per token), per block on the H100 1.9e-4 / 5.9e-4 (linear) and
// 1.4e-4 / 2.3e-4 (the norm-modulate case, 41 x 1024 -> 48). Bounds 2.6x and 3.5x of the largest;
// the float32 fallbacks stay at the default 1e-5 (measured 1e-7), and 16-bit outputs are bounded
// by their own rounding.
void set_f32_tensor_core_bounds(OpCase& c, DType xt, Fp8WeightScaling ws, Fp8ActScaling as,
                                int64_t k, int64_t n) {
  const bool tensor_cores = ws == Fp8WeightScaling::kPerChannel ? as != Fp8ActScaling::kPerGroup
                                                                : as == Fp8ActScaling::kPerGroup;
  if (xt == DType::kF32 && tensor_cores && k > 0 && k % 16 == 0 && n % 8 == 0)
    c.device_bounds = Bounds{5e-4, 2e-3};
}

// `prequantized`: the activations quantized first (quantize_activation_fp8), then the GEMM over
// them, as a DiT block's q, k, v and gate projections share one quantized input.
// `bias_t`: the bias's dtype (the DiT's are bf16; on CUDA the tensor-core path adds it in the
// GEMM's epilogue).
void add_linear_fp8(const Shape& xshape, int64_t n, DType xt, Fp8WeightScaling ws, Fp8ActScaling as,
                    bool bias, bool large = false, bool prequantized = false,
                    DType bias_t = DType::kF32) {
  OpCase c;
  c.op = "linear_fp8";
  std::string dims;
  for (int64_t d : xshape) dims += std::to_string(d) + "x";
  c.name = std::string(prequantized ? "Fp8_linear_prequantized_" : "Fp8_linear_") + tag(ws, as) +
           "_" + dtype_tag(xt) + "_x" + dims + "n" + std::to_string(n) + (bias ? "_bias" : "") +
           (bias && bias_t != DType::kF32 ? "_" + dtype_tag(bias_t) : "");
  c.dtype = xt;
  c.large = large;
  const int64_t k = xshape.back();
  set_f32_tensor_core_bounds(c, xt, ws, as, k, n);
  c.make_inputs = [=](Rng& r) {
    // Normal activations with a few outlier tokens and channels, as a DiT's are: per-token
    // scaling has to keep the quiet rows' resolution.
    Tensor x = r.normal_tensor(xshape, DType::kF32);
    std::vector<float> xv = x.to_f32_vector();
    for (size_t i = 0; i < xv.size(); i += 97) xv[i] *= 20.0f;
    std::vector<Tensor> in = {Tensor::from_f32(xv, xshape, xt),
                              r.normal_tensor({n, k}, DType::kBF16, 0.0f, 0.02f)};
    if (bias) in.push_back(r.uniform_tensor({n}, bias_t, -0.1f, 0.1f));
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    const h3::ops::Fp8Weight w = h3::ops::quantize_weight_fp8(in[1], ws);
    if (prequantized)
      return h3::ops::linear_fp8(h3::ops::quantize_activation_fp8(in[0], as), w,
                                 bias ? &in[2] : nullptr);
    return h3::ops::linear_fp8(in[0], w, bias ? &in[2] : nullptr, as);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = ref_activation(in[0], as), w = ref_weight(in[1], ws);
    const std::vector<double> b = bias ? f64(in[2]) : std::vector<double>();
    int64_t m = 1;
    for (size_t d = 0; d + 1 < xshape.size(); ++d) m *= xshape[d];
    return ref_gemm(x, w, b, m, k, n);
  };
  register_case(std::move(c));
}

// A feed-forward's FP8 output projection over swiglu_fp8: the product of u [M, 2F] = [value |
// gate] in u's dtype, quantized, then the GEMM (no bias, as the DiT's and the VAE's). The
// reference rounds as the CPU does and the model's reference runs (silu(gate) in u's dtype, then
// the product); CUDA's SwiGLU kernels round once. A product one 16-bit ulp away lands on the other
// side of an E4M3 rounding boundary about once in 2^(8-3) = 32 (bf16), which moves that value by
// one E4M3 step (up to 1/8 of it). Measured on the CPU against a reference that rounds once:
// rel_l2 / rel_max 1.2e-2 / 1.9e-2 (bf16, per token), 3.1e-3 / 5.8e-3 (f16), 1.7e-2 / 4.7e-2 (bf16,
// per tensor); the device bounds are about twice those.
void add_swiglu_linear_fp8(int64_t m, int64_t f, int64_t n, DType ut, Fp8ActScaling as,
                           bool large = false) {
  OpCase c;
  if (ut != DType::kF32) c.device_bounds = Bounds{3e-2, 1e-1};
  c.op = "swiglu_fp8";
  c.name = std::string("Fp8_swiglu_linear_a") + h3::ops::fp8_act_scaling_name(as) + "_" +
           dtype_tag(ut) + "_" + std::to_string(m) + "x" + std::to_string(2 * f) + "n" +
           std::to_string(n);
  c.dtype = ut;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.normal_tensor({m, 2 * f}, ut),
                               r.normal_tensor({n, f}, DType::kBF16, 0.0f, 0.02f)};
  };
  // Per-group activations pair with 128 x 128 weight blocks on the tensor cores.
  const Fp8WeightScaling ws =
      as == Fp8ActScaling::kPerGroup ? Fp8WeightScaling::kPerBlock : Fp8WeightScaling::kPerChannel;
  set_f32_tensor_core_bounds(c, ut, ws, as, f, n);
  c.run = [=](const std::vector<Tensor>& in) {
    const h3::ops::Fp8Weight w = h3::ops::quantize_weight_fp8(in[1], ws);
    return h3::ops::linear_fp8(h3::ops::swiglu_fp8(in[0], as), w, nullptr);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> u = f64(in[0]);
    // Rounds float32 values to u's dtype (exact for float32).
    auto round_all = [&](const std::vector<float>& v) {
      return Tensor::from_f32(v, {static_cast<int64_t>(v.size())}, ut).to_f32_vector();
    };
    std::vector<float> s(static_cast<size_t>(m * f)), h(s.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < f; ++j) {
        const float g = static_cast<float>(u[static_cast<size_t>(i * 2 * f + f + j)]);
        s[static_cast<size_t>(i * f + j)] = g / (1.0f + std::exp(-g));
      }
    s = round_all(s);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < f; ++j)
        h[static_cast<size_t>(i * f + j)] =
            static_cast<float>(u[static_cast<size_t>(i * 2 * f + j)]) *
            s[static_cast<size_t>(i * f + j)];
    const std::vector<double> x = ref_activation(Tensor::from_f32(h, {m, f}, ut), as);
    const std::vector<double> w = ref_weight(in[1], ws);
    return ref_gemm(x, w, {}, m, f, n);
  };
  register_case(std::move(c));
}

// The FP8 projections over a DiT block's modulated rows (rms_norm_modulate_fp8): RMSNorm with a
// weight, modulation by table rows, quantization, then the GEMM. The reference rounds to x's dtype
// where the model's reference does (h3_dit_spec.md §2.9: the norm's output, then
// a = R(R(x * R(1 + scale)) + shift)), as the CPU's composition does; CUDA's fused kernel
// rounds once, and a value one 16-bit ulp away crosses an E4M3 rounding boundary about once in 32
// (bf16). Measured on the CPU against a reference that rounds once: rel_l2 / rel_max 1.9e-2 /
// 2.2e-2 (bf16), 6.1e-3 / 9.1e-3 (f16); the device bounds are about twice those.
void add_norm_modulate_linear_fp8(int64_t m, int64_t cols, int64_t tables, int64_t n, DType xt,
                                  Fp8ActScaling as) {
  OpCase c;
  const Fp8WeightScaling ws =
      as == Fp8ActScaling::kPerGroup ? Fp8WeightScaling::kPerBlock : Fp8WeightScaling::kPerChannel;
  if (xt != DType::kF32) c.device_bounds = Bounds{4e-2, 1e-1};
  set_f32_tensor_core_bounds(c, xt, ws, as, cols, n);
  c.op = "rms_norm_modulate_fp8";
  c.name = std::string("Fp8_norm_modulate_linear_a") + h3::ops::fp8_act_scaling_name(as) + "_" +
           dtype_tag(xt) + "_" + std::to_string(m) + "x" + std::to_string(cols) + "n" +
           std::to_string(n);
  c.dtype = xt;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.normal_tensor({m, cols}, xt),
                               r.uniform_tensor({tables, cols}, xt, -0.5f, 0.5f),
                               r.uniform_tensor({tables, cols}, xt, -0.5f, 0.5f),
                               r.indices(m, tables),
                               r.uniform_tensor({cols}, xt, 0.5f, 1.5f),
                               r.normal_tensor({n, cols}, DType::kBF16, 0.0f, 0.02f)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    const h3::ops::Fp8Weight w = h3::ops::quantize_weight_fp8(in[5], ws);
    return h3::ops::linear_fp8(
        h3::ops::rms_norm_modulate_fp8(in[0], &in[4], 1e-6f, in[1], in[2], in[3], as), w, nullptr);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), sc = f64(in[1]), sh = f64(in[2]), nw = f64(in[4]);
    const std::vector<int64_t> idx = in[3].to_i64_vector();
    // Float32 values rounded to x's dtype (exact for float32).
    auto round_all = [&](const std::vector<float>& v) {
      return Tensor::from_f32(v, {static_cast<int64_t>(v.size())}, xt).to_f32_vector();
    };
    std::vector<float> a(static_cast<size_t>(m * cols));
    for (int64_t r = 0; r < m; ++r) {
      double ss = 0.0;
      for (int64_t k = 0; k < cols; ++k)
        ss += x[static_cast<size_t>(r * cols + k)] * x[static_cast<size_t>(r * cols + k)];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + 1e-6);
      for (int64_t k = 0; k < cols; ++k)
        a[static_cast<size_t>(r * cols + k)] = static_cast<float>(
            x[static_cast<size_t>(r * cols + k)] * inv * nw[static_cast<size_t>(k)]);
    }
    a = round_all(a);
    std::vector<float> one_plus(sc.size());
    for (size_t i = 0; i < sc.size(); ++i) one_plus[i] = static_cast<float>(1.0 + sc[i]);
    one_plus = round_all(one_plus);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const size_t t = static_cast<size_t>(idx[static_cast<size_t>(r)] * cols + k);
        float& v = a[static_cast<size_t>(r * cols + k)];
        v *= one_plus[t];
      }
    a = round_all(a);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const size_t t = static_cast<size_t>(idx[static_cast<size_t>(r)] * cols + k);
        a[static_cast<size_t>(r * cols + k)] += static_cast<float>(sh[t]);
      }
    const std::vector<double> q = ref_activation(Tensor::from_f32(a, {m, cols}, xt), as);
    const std::vector<double> w = ref_weight(in[5], ws);
    return ref_gemm(q, w, {}, m, cols, n);
  };
  register_case(std::move(c));
}

// gated_residual_rms_norm_modulate_fp8 into the FP8 GEMM: the residual sum and the projection of
// the modulated rows side by side, CUDA's one pass against the CPU's composition (the norm's own
// float64 reference is add_norm_modulate_linear_fp8's; the bounds are its device bounds).
void add_gated_norm_linear_fp8(int64_t m, int64_t cols, int64_t tables, int64_t n, DType xt,
                               Fp8ActScaling as) {
  OpCase c;
  const Fp8WeightScaling ws =
      as == Fp8ActScaling::kPerGroup ? Fp8WeightScaling::kPerBlock : Fp8WeightScaling::kPerChannel;
  c.device_bounds = Bounds{4e-2, 1e-1};
  c.op = "gated_residual_rms_norm_modulate_fp8";
  c.name = std::string("Fp8_gated_norm_linear_a") + h3::ops::fp8_act_scaling_name(as) + "_" +
           dtype_tag(xt) + "_" + std::to_string(m) + "x" + std::to_string(cols) + "n" +
           std::to_string(n);
  c.dtype = xt;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.normal_tensor({m, cols}, xt),
                               r.normal_tensor({m, cols}, xt),
                               r.uniform_tensor({tables, cols}, xt, -1.0f, 1.0f),
                               r.uniform_tensor({tables, cols}, xt, -0.5f, 0.5f),
                               r.uniform_tensor({tables, cols}, xt, -0.5f, 0.5f),
                               r.indices(m, tables),
                               r.uniform_tensor({cols}, xt, 0.5f, 1.5f),
                               r.normal_tensor({n, cols}, DType::kBF16, 0.0f, 0.02f)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    const h3::ops::Fp8Weight w = h3::ops::quantize_weight_fp8(in[7], ws);
    const h3::ops::GatedNormFp8 g = h3::ops::gated_residual_rms_norm_modulate_fp8(
        in[0], in[1], in[2], in[5], &in[6], 1e-6f, in[3], in[4], as);
    return h3::ops::concat({g.x, h3::ops::linear_fp8(g.modulated, w, nullptr)}, 1);
  };
  register_case(std::move(c));
}

void add_weight_roundtrip(int64_t n, int64_t k, Fp8WeightScaling ws) {
  OpCase c;
  c.op = "quantize_weight_fp8";
  c.name = std::string("Fp8_weight_roundtrip_") + h3::ops::fp8_weight_scaling_name(ws) + "_" +
           std::to_string(n) + "x" + std::to_string(k);
  c.dtype = DType::kF32;
  // The float32 product of an E4M3 value and its scale against the exact product: one rounding.
  c.cpu_bounds = Bounds{1e-7, 1e-7};
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.normal_tensor({n, k}, DType::kBF16, 0.0f, 0.05f)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return h3::ops::dequantize_weight_fp8(h3::ops::quantize_weight_fp8(in[0], ws), DType::kF32);
  };
  c.reference = [=](const std::vector<Tensor>& in) { return ref_weight(in[0], ws); };
  register_case(std::move(c));
}

void add_cases() {
  for (Fp8WeightScaling ws : {Fp8WeightScaling::kPerChannel, Fp8WeightScaling::kPerBlock}) {
    for (Fp8ActScaling as :
         {Fp8ActScaling::kPerToken, Fp8ActScaling::kPerTensor, Fp8ActScaling::kPerGroup}) {
      add_linear_fp8({7, 33}, 13, DType::kF32, ws, as, true);
      add_linear_fp8({2, 9, 300}, 200, DType::kBF16, ws, as, false);  // ragged 128-blocks
    }
    add_weight_roundtrip(130, 257, ws);
  }
  add_linear_fp8({64, 256}, 96, DType::kBF16, Fp8WeightScaling::kPerChannel,
                 Fp8ActScaling::kPerToken, true);
  add_linear_fp8({1024, 3072}, 3072, DType::kBF16, Fp8WeightScaling::kPerChannel,
                 Fp8ActScaling::kPerToken, false, /*large=*/true);
  // The float32 fallbacks (per-block weights; K not a multiple of 16) and the tensor cores.
  add_linear_fp8({7, 33}, 13, DType::kF32, Fp8WeightScaling::kPerBlock, Fp8ActScaling::kPerTensor,
                 true, false, /*prequantized=*/true);
  add_linear_fp8({2, 9, 300}, 200, DType::kBF16, Fp8WeightScaling::kPerChannel,
                 Fp8ActScaling::kPerToken, false, false, /*prequantized=*/true);
  add_linear_fp8({64, 256}, 96, DType::kBF16, Fp8WeightScaling::kPerChannel,
                 Fp8ActScaling::kPerTensor, true, false, /*prequantized=*/true);
  add_linear_fp8({3, 64, 256}, 96, DType::kF32, Fp8WeightScaling::kPerChannel,
                 Fp8ActScaling::kPerToken, false, false, /*prequantized=*/true);
  // Biases on the tensor cores: a float32 output with a float32 bias, and bf16 with a bf16 bias
  // (the DiT's projections).
  add_linear_fp8({3, 64, 256}, 96, DType::kF32, Fp8WeightScaling::kPerChannel,
                 Fp8ActScaling::kPerToken, true, false, /*prequantized=*/true);
  add_linear_fp8({200, 512}, 384, DType::kBF16, Fp8WeightScaling::kPerChannel,
                 Fp8ActScaling::kPerToken, true, false, /*prequantized=*/true, DType::kBF16);
  add_linear_fp8({200, 512}, 384, DType::kBF16, Fp8WeightScaling::kPerChannel,
                 Fp8ActScaling::kPerToken, true, false, /*prequantized=*/false, DType::kBF16);
  // 128 x 128 weight blocks with per-group activations on the tensor cores: rows not a multiple
  // of 4 (cuBLASLt's block scaling takes padded rows), ceil(K / 128) = 2 and 5 (weight scales
  // padded to a multiple of 4 per block row) and 8 (not), a ragged last block row and column
  // (K = 560, N = 200), biases in bf16 and float32, float32 outputs.
  add_linear_fp8({130, 256}, 96, DType::kBF16, Fp8WeightScaling::kPerBlock,
                 Fp8ActScaling::kPerGroup, false, false, /*prequantized=*/true);
  add_linear_fp8({2, 33, 640}, 136, DType::kBF16, Fp8WeightScaling::kPerBlock,
                 Fp8ActScaling::kPerGroup, true, false, /*prequantized=*/false, DType::kBF16);
  add_linear_fp8({64, 1024}, 256, DType::kF32, Fp8WeightScaling::kPerBlock,
                 Fp8ActScaling::kPerGroup, true, false, /*prequantized=*/true);
  add_linear_fp8({61, 560}, 200, DType::kBF16, Fp8WeightScaling::kPerBlock,
                 Fp8ActScaling::kPerGroup, false, false, /*prequantized=*/true);
  add_linear_fp8({1024, 3072}, 3072, DType::kBF16, Fp8WeightScaling::kPerBlock,
                 Fp8ActScaling::kPerGroup, false, /*large=*/true);
  // SwiGLU into the FP8 GEMM: the fused kernel (16-bit, per token; F a multiple of 8 but not of
  // 2,048, the kernel's 256 threads x 8), and the two ops it stands for (per tensor; float32).
  for (DType ut : {DType::kBF16, DType::kF16})
    add_swiglu_linear_fp8(37, 264, 48, ut, Fp8ActScaling::kPerToken);
  add_swiglu_linear_fp8(37, 264, 48, DType::kBF16, Fp8ActScaling::kPerTensor);
  add_swiglu_linear_fp8(5, 24, 16, DType::kF32, Fp8ActScaling::kPerToken);
  add_swiglu_linear_fp8(300, 2056, 256, DType::kBF16, Fp8ActScaling::kPerToken, /*large=*/true);
  // Per group with 128 x 128 weight blocks: the fused kernel (F a multiple of 128; 37 rows padded
  // to 40) and the two ops (F = 264).
  for (DType ut : {DType::kBF16, DType::kF16})
    add_swiglu_linear_fp8(37, 256, 48, ut, Fp8ActScaling::kPerGroup);
  add_swiglu_linear_fp8(37, 264, 48, DType::kBF16, Fp8ActScaling::kPerGroup);
  // Modulated rows into the FP8 GEMM: the fused kernel (16-bit and float32 rows, per token; 1,032
  // columns: not a multiple of a warp's 256), and the two ops it stands for (per tensor).
  for (DType xt : {DType::kBF16, DType::kF16, DType::kF32})
    add_norm_modulate_linear_fp8(40, 1032, 3, 48, xt, Fp8ActScaling::kPerToken);
  add_norm_modulate_linear_fp8(40, 1032, 3, 48, DType::kBF16, Fp8ActScaling::kPerTensor);
  // Per group: the fused kernel (1,024 columns; 41 rows padded to 44) and the two ops (1,032).
  for (DType xt : {DType::kBF16, DType::kF16, DType::kF32})
    add_norm_modulate_linear_fp8(41, 1024, 3, 48, xt, Fp8ActScaling::kPerGroup);
  add_norm_modulate_linear_fp8(41, 1032, 3, 48, DType::kBF16, Fp8ActScaling::kPerGroup);
  // Rows over 2,048 columns: a CTA of four warps holds each row in registers.
  add_norm_modulate_linear_fp8(12, 2056, 3, 32, DType::kBF16, Fp8ActScaling::kPerToken);
  add_norm_modulate_linear_fp8(13, 3072, 3, 32, DType::kBF16, Fp8ActScaling::kPerGroup);
  // The residual in front (the DiT block's feed-forward input): one pass, per token and per group,
  // narrow and wide rows; 1,032 per group takes the two ops.
  add_gated_norm_linear_fp8(20, 1032, 3, 32, DType::kBF16, Fp8ActScaling::kPerToken);
  add_gated_norm_linear_fp8(21, 3072, 4, 32, DType::kBF16, Fp8ActScaling::kPerGroup);
  add_gated_norm_linear_fp8(9, 1032, 2, 32, DType::kF16, Fp8ActScaling::kPerGroup);
  // K = 0: an empty sum, so every row is the bias.
  for (bool pre : {false, true})
    add_linear_fp8({3, 0}, 8, DType::kF32, Fp8WeightScaling::kPerChannel, Fp8ActScaling::kPerToken,
                   true, false, pre);
}
H3_OPS_CASES(add_cases);

Tensor normal(const Shape& shape, uint64_t seed, float stddev) {
  Rng r(seed);
  return r.normal_tensor(shape, DType::kF32, 0.0f, stddev);
}

TEST(Fp8Quantize, LargestMagnitudeOfEachGroupLandsOn448AndErrorsStayWithinHalfAStep) {
  const Tensor w = normal({70, 300}, 1, 0.03f);
  const std::vector<float> v = w.to_f32_vector();
  for (Fp8WeightScaling ws : {Fp8WeightScaling::kPerChannel, Fp8WeightScaling::kPerBlock}) {
    const h3::ops::Fp8Weight q = h3::ops::quantize_weight_fp8(w, ws);
    const std::vector<float> d = h3::ops::dequantize_weight_fp8(q, DType::kF32).to_f32_vector();
    const uint8_t* raw = q.data.data<uint8_t>();
    if (ws == Fp8WeightScaling::kPerChannel) {
      ASSERT_EQ(q.scale.shape(), Shape({70}));
      for (int64_t r = 0; r < 70; ++r) {
        float m = 0.0f;
        for (int64_t c = 0; c < 300; ++c)
          m = std::max(m, std::fabs(f8e4m3_to_f32(raw[r * 300 + c])));
        EXPECT_EQ(m, 448.0f) << "channel " << r;
      }
    } else {
      ASSERT_EQ(q.scale.shape(), Shape({1, 3}));
    }
    // Round to nearest with 3 mantissa bits: at most 1/16 of the value for normal E4M3 numbers,
    // and at most half the subnormal step (2^-10 x scale) below them.
    const std::vector<float> s = q.scale.to_f32_vector();
    for (size_t i = 0; i < v.size(); ++i) {
      const int64_t r = static_cast<int64_t>(i) / 300, c = static_cast<int64_t>(i) % 300;
      const float sc = ws == Fp8WeightScaling::kPerChannel ? s[static_cast<size_t>(r)]
                                                           : s[static_cast<size_t>(c / kBlock)];
      const double bound = std::max(std::fabs(v[i]) / 16.0, std::ldexp(1.0, -10) * sc) * (1 + 1e-6);
      ASSERT_LE(std::fabs(d[i] - v[i]), bound) << "element " << i;
    }
  }
}

TEST(Fp8Quantize, ZeroGroupsGetScaleOneAndStayZero) {
  std::vector<float> v(4 * 8, 0.0f);
  const float row1[8] = {-2.0f, -1.0f, -0.5f, 0.0f, 0.25f, 0.5f, 1.0f, 2.0f};
  for (int c = 0; c < 8; ++c) v[static_cast<size_t>(8 + c)] = row1[c];
  const Tensor w = Tensor::from_f32(v, {4, 8});
  const h3::ops::Fp8Weight q = h3::ops::quantize_weight_fp8(w, Fp8WeightScaling::kPerChannel);
  const std::vector<float> s = q.scale.to_f32_vector();
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 2.0f / 448.0f);
  const std::vector<float> d = h3::ops::dequantize_weight_fp8(q, DType::kF32).to_f32_vector();
  for (int c = 0; c < 8; ++c) EXPECT_EQ(d[static_cast<size_t>(c)], 0.0f);
  // 224 x these (0, 56, 112, 224, 448) are E4M3 numbers: exact after the round trip. (1.5 would
  // not be: 336 lies half-way between 320 and 352 and rounds to even, 320.)
  for (int c = 0; c < 8; ++c)
    EXPECT_FLOAT_EQ(d[static_cast<size_t>(8 + c)], v[static_cast<size_t>(8 + c)]);
}

TEST(Fp8Quantize, RefusesNonFiniteWeightsAndInconsistentScales) {
  std::vector<float> v(3 * 5, 0.1f);
  v[7] = NAN;
  try {
    h3::ops::quantize_weight_fp8(Tensor::from_f32(v, {3, 5}), Fp8WeightScaling::kPerChannel);
    FAIL() << "a NaN weight was quantized";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("[1, 2]"), std::string::npos) << e.what();
  }
  h3::ops::Fp8Weight q =
      h3::ops::quantize_weight_fp8(normal({6, 4}, 2, 1.0f), Fp8WeightScaling::kPerChannel);
  q.scaling = Fp8WeightScaling::kPerBlock;  // a [6] scale read as per-block
  try {
    h3::ops::check_fp8_weight(q, "blocks.0.attn.to_q.weight");
    FAIL() << "a per-channel scale passed as per-block";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.0.attn.to_q.weight"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("[1, 1]"), std::string::npos) << e.what();
  }
  q.scaling = Fp8WeightScaling::kPerChannel;
  q.scale.data<float>()[2] = 0.0f;
  EXPECT_THROW(h3::ops::check_fp8_weight(q, "w"), Error);
  EXPECT_THROW(h3::ops::linear_fp8(normal({2, 5}, 3, 1.0f), q, nullptr, Fp8ActScaling::kPerToken),
               Error);
  EXPECT_THROW(h3::ops::parse_fp8_weight_scaling("row"), Error);
  EXPECT_EQ(h3::ops::parse_fp8_act_scaling("tensor"), Fp8ActScaling::kPerTensor);
}

// A quantized activation reused by several GEMMs gives each of them the bits the on-the-fly
// path gives (shape, dtype and values), K = 0 included (the output is then the bias).
TEST(Fp8Quantize, PrequantizedActivationMatchesOnTheFlyBitForBit) {
  Rng r(5);
  for (Fp8ActScaling as :
       {Fp8ActScaling::kPerToken, Fp8ActScaling::kPerTensor, Fp8ActScaling::kPerGroup}) {
    for (DType xt : {DType::kF32, DType::kBF16}) {
      const Tensor x = r.normal_tensor({2, 5, 48}, DType::kF32).to(xt);
      const h3::ops::Fp8Activation xq = h3::ops::quantize_activation_fp8(x, as);
      for (int64_t n : {16, 24}) {
        const h3::ops::Fp8Weight w = h3::ops::quantize_weight_fp8(
            r.normal_tensor({n, 48}, DType::kF32, 0.0f, 0.02f), Fp8WeightScaling::kPerChannel);
        const Tensor bias = r.uniform_tensor({n}, DType::kF32, -0.1f, 0.1f);
        const Tensor a = h3::ops::linear_fp8(xq, w, &bias);
        const Tensor b = h3::ops::linear_fp8(x, w, &bias, as);
        ASSERT_EQ(a.shape(), b.shape());
        ASSERT_EQ(a.dtype(), xt);
        EXPECT_EQ(a.to_f32_vector(), b.to_f32_vector()) << n;
      }
    }
  }
  const Tensor empty = Tensor::from_f32({}, {3, 0});
  const h3::ops::Fp8Weight w0 = h3::ops::quantize_weight_fp8(Tensor::from_f32({}, {4, 0}),
                                                             Fp8WeightScaling::kPerChannel);
  const Tensor bias = Tensor::from_f32({1, 2, 3, 4}, {4});
  const Tensor y = h3::ops::linear_fp8(
      h3::ops::quantize_activation_fp8(empty, Fp8ActScaling::kPerToken), w0, &bias);
  ASSERT_EQ(y.shape(), (Shape{3, 4}));
  EXPECT_EQ(y.to_f32_vector(), (std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
}

// Per group, an outlier (or a NaN) costs resolution (or values) only in its own token's run of
// 128 columns; the last run of a row may be shorter.
TEST(Fp8Quantize, PerGroupScalesCoverOneTokensRunOf128Columns) {
  const int64_t k = 300;
  std::vector<float> v(3 * k);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>(i % 7 + 1);
  v[static_cast<size_t>(1 * k + 130)] = 1e6f;  // row 1, run 1 (columns 128-255)
  v[static_cast<size_t>(2 * k + 260)] = NAN;   // row 2, run 2 (columns 256-299)
  const Tensor x = Tensor::from_f32(v, {3, k});
  EXPECT_EQ(h3::ops::parse_fp8_act_scaling("group"), Fp8ActScaling::kPerGroup);
  const std::vector<float> t =
      h3::ops::fake_quantize_activation_fp8(x, Fp8ActScaling::kPerGroup).to_f32_vector();
  const std::vector<float> tok =
      h3::ops::fake_quantize_activation_fp8(x, Fp8ActScaling::kPerToken).to_f32_vector();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const size_t i = static_cast<size_t>(r * k + c);
      const bool outlier_run = r == 1 && c / kBlock == 1, nan_run = r == 2 && c / kBlock == 2;
      if (nan_run) {
        EXPECT_TRUE(std::isnan(t[i])) << r << ", " << c;
      } else if (!outlier_run) {
        // Within E4M3's relative step of the value: the run's own small amax sets the scale.
        EXPECT_NEAR(t[i], v[i], std::fabs(v[i]) / 16.0f) << r << ", " << c;
      }
    }
  // Per token, the outlier's whole row loses the small values (they fall below E4M3's range).
  EXPECT_EQ(tok[static_cast<size_t>(1 * k + 0)], 0.0f);
  EXPECT_NE(t[static_cast<size_t>(1 * k + 0)], 0.0f);
  EXPECT_NEAR(t[static_cast<size_t>(1 * k + 130)], 1e6f, 1.0f);
}

TEST(Fp8Quantize, ABadTokenPoisonsOnlyItsOwnRowPerToken) {
  std::vector<float> v(3 * 4, 0.25f);
  v[5] = INFINITY;
  const Tensor x = Tensor::from_f32(v, {3, 4});
  const std::vector<float> t =
      h3::ops::fake_quantize_activation_fp8(x, Fp8ActScaling::kPerToken).to_f32_vector();
  for (int i = 0; i < 12; ++i) {
    if (i / 4 == 1)
      EXPECT_TRUE(std::isnan(t[static_cast<size_t>(i)])) << i;
    else
      EXPECT_EQ(t[static_cast<size_t>(i)], 0.25f) << i;
  }
  const std::vector<float> all =
      h3::ops::fake_quantize_activation_fp8(x, Fp8ActScaling::kPerTensor).to_f32_vector();
  for (float e : all) EXPECT_TRUE(std::isnan(e));
}

// What FP8 costs against the float GEMM at DiT-like statistics (normal weights of std 0.02, unit
// activations with outliers). Measured on this data: rel_l2 0.033 per token and 0.036 per tensor
// with either weight scaling; the bound leaves 1.4x of that and fails if the scaling or rounding
// breaks (a wrong scale gives O(1) errors, a lost mantissa bit about twice the error).
TEST(Fp8Quantize, LinearErrorAgainstFloatIsThatOfE4M3Rounding) {
  Rng r(11);
  Tensor x = r.normal_tensor({64, 512}, DType::kF32);
  std::vector<float> xv = x.to_f32_vector();
  for (size_t i = 0; i < xv.size(); i += 97) xv[i] *= 20.0f;
  x = Tensor::from_f32(xv, {64, 512});
  const Tensor w = r.normal_tensor({256, 512}, DType::kF32, 0.0f, 0.02f);
  const std::vector<double> exact = f64(h3::ops::linear(x, w));
  for (Fp8WeightScaling ws : {Fp8WeightScaling::kPerChannel, Fp8WeightScaling::kPerBlock}) {
    for (Fp8ActScaling as : {Fp8ActScaling::kPerToken, Fp8ActScaling::kPerTensor}) {
      const h3::ops::Fp8Weight q = h3::ops::quantize_weight_fp8(w, ws);
      const Metrics m = measure(f64(h3::ops::linear_fp8(x, q, nullptr, as)), exact);
      std::printf("linear_fp8 %s: rel_l2 %.4f rel_max %.4f\n", tag(ws, as).c_str(), m.rel_l2,
                  m.rel_max);
      EXPECT_GT(m.rel_l2, 0.005) << "FP8 changed nothing: the rounding is not applied";
      EXPECT_LT(m.rel_l2, 0.05) << tag(ws, as);
    }
  }
}

}  // namespace
}  // namespace h3::test::ops
