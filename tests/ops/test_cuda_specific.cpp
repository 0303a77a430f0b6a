// Backend-ops cases aimed at the CUDA kernels: the flash-attention shapes (each head dim the
// tensor-core kernels handle, causal, grouped-query, block-diagonal, ragged tails; the Hopper and
// mma.sync kernels each by name where both apply) and the generic attention kernel (head dims 72
// and 256, float32, additive masks), the fused ops of ops.h, and GEMMs whose bias goes through
// cuBLASLt's epilogue. On the CPU each case also checks the oracle
// against a naive float64 reference.
#include <cmath>
#include <limits>
#include <string>

#include "backend_ops.h"
#include "ops/ops.h"

namespace h3::test::ops {
namespace {

struct AttnShape {
  int64_t s, s_kv, hq, hkv, d;
  bool causal = false;
  std::vector<int64_t> cu = {};
  bool mask = false;
  h3::ops::AttentionKernel kernel = h3::ops::AttentionKernel::kAuto;  // CUDA only
};

// Naive float64 attention: exact softmax per (row, head); causal is top-left aligned (key j is
// visible to query i when j <= i, within the segment for block-diagonal batches).
std::vector<double> ref_attention(const std::vector<Tensor>& in, const AttnShape& a) {
  const std::vector<double> q = f64(in[0]), k = f64(in[1]), v = f64(in[2]);
  const std::vector<double> m = a.mask ? f64(in[3]) : std::vector<double>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.d));
  const int64_t group = a.hq / a.hkv;
  std::vector<double> out(static_cast<size_t>(a.s * a.hq * a.d), 0.0);
  std::vector<double> sc(static_cast<size_t>(a.s_kv));
  for (int64_t i = 0; i < a.s; ++i) {
    int64_t lo = 0, hi = a.s_kv;
    for (size_t t = 0; t + 1 < a.cu.size(); ++t) {
      if (i >= a.cu[t] && i < a.cu[t + 1]) {
        lo = a.cu[t];
        hi = a.cu[t + 1];
      }
    }
    for (int64_t h = 0; h < a.hq; ++h) {
      const int64_t hk = h / group;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = lo; j < hi; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < a.d; ++c) dot += q[(i * a.hq + h) * a.d + c] * k[(j * a.hkv + hk) * a.d + c];
        dot *= scale;
        if (a.mask) dot += m[i * a.s_kv + j];
        if (a.causal && j - lo > i - lo) dot = -std::numeric_limits<double>::infinity();
        sc[j] = dot;
        mx = std::max(mx, dot);
      }
      double sum = 0;
      for (int64_t j = lo; j < hi; ++j) {
        sc[j] = std::isinf(sc[j]) ? 0.0 : std::exp(sc[j] - mx);
        sum += sc[j];
      }
      for (int64_t j = lo; j < hi; ++j) {
        const double pj = sc[j] / sum;
        for (int64_t c = 0; c < a.d; ++c) out[(i * a.hq + h) * a.d + c] += pj * v[(j * a.hkv + hk) * a.d + c];
      }
    }
  }
  return out;
}

void add_attention(const std::string& tag, DType t, const AttnShape& a, bool large = false) {
  OpCase c;
  c.op = "attention";
  c.name = "attention_" + tag + "_" + dtype_tag(t) + "_s" + std::to_string(a.s) + "_h" + std::to_string(a.hq) +
           "x" + std::to_string(a.hkv) + "_d" + std::to_string(a.d);
  c.dtype = t;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    std::vector<Tensor> in = {r.normal_tensor({a.s, a.hq, a.d}, t), r.normal_tensor({a.s_kv, a.hkv, a.d}, t),
                              r.normal_tensor({a.s_kv, a.hkv, a.d}, t)};
    if (a.mask) {
      // A mask that blocks about a quarter of the keys (never a whole row) and biases the rest.
      std::vector<float> m = r.uniform(a.s * a.s_kv, -2.0f, 2.0f);
      for (int64_t i = 0; i < a.s; ++i)
        for (int64_t j = 1; j < a.s_kv; ++j)
          if ((i * 7 + j * 3) % 4 == 0) m[i * a.s_kv + j] = -std::numeric_limits<float>::infinity();
      in.push_back(Tensor::from_f32(m, {a.s, a.s_kv}));
    }
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    h3::ops::AttentionParams p;
    p.causal = a.causal;
    p.cu_seqlens = a.cu;
    p.kernel = a.kernel;
    return h3::ops::attention(in[0], in[1], in[2], p, a.mask ? &in[3] : nullptr);
  };
  c.reference = [=](const std::vector<Tensor>& in) { return ref_attention(in, a); };
  register_case(std::move(c));
}

// rms_norm over the last dim (weight may be absent), in float64.
std::vector<double> ref_rms(const std::vector<double>& x, const std::vector<double>* w, int64_t cols, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += x[r * cols + c] * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(ss / cols + eps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] * inv * (w ? (*w)[c] : 1.0);
  }
  return y;
}

void add_rms_norm_modulate(DType t, int64_t s, int64_t cdim, int64_t tables, bool weight) {
  OpCase c;
  c.op = "rms_norm_modulate";
  c.name = "rms_norm_modulate_" + dtype_tag(t) + "_s" + std::to_string(s) + "_c" + std::to_string(cdim) +
           (weight ? "_w" : "");
  c.dtype = t;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.normal_tensor({s, cdim}, t), r.uniform_tensor({tables, cdim}, t, -0.5f, 0.5f),
                               r.uniform_tensor({tables, cdim}, t, -0.5f, 0.5f), r.indices(s, tables),
                               r.uniform_tensor({cdim}, t, 0.5f, 1.5f)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return h3::ops::rms_norm_modulate(in[0], weight ? &in[4] : nullptr, 1e-5f, in[1], in[2], in[3]);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> w = f64(in[4]), sc = f64(in[1]), sh = f64(in[2]);
    const std::vector<int64_t> idx = in[3].to_i64_vector();
    std::vector<double> y = ref_rms(f64(in[0]), weight ? &w : nullptr, cdim, 1e-5);
    for (int64_t r = 0; r < s; ++r)
      for (int64_t k = 0; k < cdim; ++k) {
        double& v = y[r * cdim + k];
        v = v * (1.0 + sc[idx[r] * cdim + k]) + sh[idx[r] * cdim + k];
      }
    return y;
  };
  register_case(std::move(c));
}

void add_qk_norm_rope(DType t, int64_t s, int64_t h, int64_t d, int rot) {
  OpCase c;
  c.op = "qk_norm_rope";
  c.name = "qk_norm_rope_" + dtype_tag(t) + "_s" + std::to_string(s) + "_h" + std::to_string(h) + "_d" +
           std::to_string(d) + "_r" + std::to_string(rot);
  c.dtype = t;
  c.make_inputs = [=](Rng& r) {
    std::vector<float> ang = r.uniform(s * rot / 2, -3.0f, 3.0f);
    std::vector<float> cs(s * rot), sn(s * rot);
    for (int64_t i = 0; i < s; ++i)
      for (int k = 0; k < rot; ++k) {
        const float a = ang[i * (rot / 2) + k % (rot / 2)];
        cs[i * rot + k] = std::cos(a);
        sn[i * rot + k] = std::sin(a);
      }
    return std::vector<Tensor>{r.normal_tensor({s, h, d}, t), r.uniform_tensor({d}, t, 0.5f, 1.5f),
                               Tensor::from_f32(cs, {s, rot}), Tensor::from_f32(sn, {s, rot})};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    return h3::ops::qk_norm_rope(in[0], &in[1], 1e-5f, in[2], in[3], rot);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> w = f64(in[1]), cs = f64(in[2]), sn = f64(in[3]);
    const std::vector<double> y = ref_rms(f64(in[0]), &w, d, 1e-5);
    std::vector<double> out = y;
    const int half = rot / 2;
    for (int64_t i = 0; i < s; ++i)
      for (int64_t hh = 0; hh < h; ++hh) {
        const int64_t base = (i * h + hh) * d;
        for (int k = 0; k < half; ++k) {
          out[base + k] = y[base + k] * cs[i * rot + k] - y[base + k + half] * sn[i * rot + k];
          out[base + k + half] = y[base + k + half] * cs[i * rot + k + half] + y[base + k] * sn[i * rot + k + half];
        }
      }
    return out;
  };
  register_case(std::move(c));
}

// layerscale_residual_rms_norm: both outputs, x' (float32) then the norm (widened to float32),
// flattened into one tensor.
void add_residual_norm(DType branch_t, DType norm_t, int64_t s, int64_t cdim, bool weight) {
  OpCase c;
  c.op = "layerscale_residual_rms_norm";
  c.name = "layerscale_residual_rms_norm_" + dtype_tag(branch_t) + "_to_" + dtype_tag(norm_t) + "_s" +
           std::to_string(s) + "_c" + std::to_string(cdim) + (weight ? "_w" : "");
  // The output is float32 (both results widened); the norm's rounding sets the bounds.
  c.dtype = DType::kF32;
  c.cpu_bounds = c.device_bounds = default_bounds(norm_t);
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.normal_tensor({s, cdim}, DType::kF32), r.normal_tensor({s, cdim}, branch_t),
                               r.uniform_tensor({cdim}, DType::kF32, -0.5f, 0.5f),
                               r.uniform_tensor({cdim}, DType::kF32, 0.5f, 1.5f)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    const h3::ops::ResidualNorm rn =
        h3::ops::layerscale_residual_rms_norm(in[0], in[1], in[2], weight ? &in[3] : nullptr, 1e-5f, norm_t);
    return h3::ops::concat({rn.x.view({-1}), h3::ops::cast(rn.normed, DType::kF32).view({-1})}, 0);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), b = f64(in[1]), sc = f64(in[2]), w = f64(in[3]);
    std::vector<double> xo(x.size());
    for (int64_t r = 0; r < s; ++r)
      for (int64_t k = 0; k < cdim; ++k) xo[r * cdim + k] = x[r * cdim + k] + b[r * cdim + k] * sc[k];
    std::vector<double> out = xo;
    const std::vector<double> n = ref_rms(xo, weight ? &w : nullptr, cdim, 1e-5);
    out.insert(out.end(), n.begin(), n.end());
    return out;
  };
  register_case(std::move(c));
}

// The DiT block's attention residual and the feed-forward's norm in one op: both results (the
// sum x, then the modulated rows) side by side. The reference keeps the sum unrounded; the bf16
// bounds cover the sum's rounding before the norm.
void add_gated_norm(DType t, int64_t s, int64_t cdim, int64_t tables, bool weight) {
  OpCase c;
  c.op = "gated_residual_rms_norm_modulate";
  c.name = "gated_residual_rms_norm_modulate_" + dtype_tag(t) + "_s" + std::to_string(s) + "_c" +
           std::to_string(cdim) + (weight ? "_w" : "");
  c.dtype = t;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.normal_tensor({s, cdim}, t),
                               r.normal_tensor({s, cdim}, t),
                               r.uniform_tensor({tables, cdim}, t, -1.0f, 1.0f),
                               r.uniform_tensor({tables, cdim}, t, -0.5f, 0.5f),
                               r.uniform_tensor({tables, cdim}, t, -0.5f, 0.5f),
                               r.indices(s, tables),
                               r.uniform_tensor({cdim}, t, 0.5f, 1.5f)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    const h3::ops::GatedNorm g = h3::ops::gated_residual_rms_norm_modulate(
        in[0], in[1], in[2], in[5], weight ? &in[6] : nullptr, 1e-6f, in[3], in[4]);
    return h3::ops::concat({g.x, g.modulated}, 1);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> res = f64(in[0]), br = f64(in[1]), g = f64(in[2]), sc = f64(in[3]),
                              sh = f64(in[4]), w = f64(in[6]);
    const std::vector<int64_t> idx = in[5].to_i64_vector();
    std::vector<double> x(res.size());
    for (int64_t r = 0; r < s; ++r)
      for (int64_t k = 0; k < cdim; ++k)
        x[r * cdim + k] = res[r * cdim + k] + g[idx[r] * cdim + k] * br[r * cdim + k];
    std::vector<double> y = ref_rms(x, weight ? &w : nullptr, cdim, 1e-6);
    std::vector<double> out(static_cast<size_t>(s * 2 * cdim));
    for (int64_t r = 0; r < s; ++r)
      for (int64_t k = 0; k < cdim; ++k) {
        const double m = y[r * cdim + k] * (1.0 + sc[idx[r] * cdim + k]) + sh[idx[r] * cdim + k];
        out[r * 2 * cdim + k] = x[r * cdim + k];
        out[r * 2 * cdim + cdim + k] = m;
      }
    return out;
  };
  register_case(std::move(c));
}

void add_linear_bias(DType t, int64_t m, int64_t k, int64_t n) {
  OpCase c;
  c.op = "linear";
  c.name = "linear_epilogue_" + dtype_tag(t) + "_m" + std::to_string(m) + "_k" + std::to_string(k) + "_n" +
           std::to_string(n);
  c.dtype = t;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.uniform_tensor({m, k}, t), r.uniform_tensor({n, k}, t, -0.5f, 0.5f),
                               r.uniform_tensor({n}, t)};
  };
  c.run = [](const std::vector<Tensor>& in) { return h3::ops::linear(in[0], in[1], &in[2]); };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), w = f64(in[1]), b = f64(in[2]);
    std::vector<double> y(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = b[j];
        for (int64_t kk = 0; kk < k; ++kk) acc += x[i * k + kk] * w[j * k + kk];
        y[i * n + j] = acc;
      }
    return y;
  };
  register_case(std::move(c));
}

void add_cases() {
  // Flash kernel: every head dim, ragged tails (S not a multiple of the 128-row tile or 64-key tile).
  add_attention("full", DType::kBF16, {200, 200, 4, 4, 128});
  add_attention("full", DType::kBF16, {77, 150, 2, 2, 64});
  add_attention("full", DType::kF16, {130, 130, 2, 2, 64});
  add_attention("full", DType::kBF16, {65, 65, 4, 4, 32});
  add_attention("full", DType::kF16, {33, 97, 4, 4, 16});
  add_attention("causal_gqa", DType::kBF16, {150, 150, 8, 2, 128, true});
  add_attention("causal_gqa", DType::kF16, {70, 70, 4, 2, 16, true});
  add_attention("varlen", DType::kBF16, {260, 260, 2, 2, 64, false, {0, 64, 64, 193, 260}});
  add_attention("varlen_causal", DType::kBF16, {200, 200, 4, 2, 32, true, {0, 129, 200}});
  // Hopper kernel (compute capability 9.0; head dim 128 or 64, no mask): lengths ragged against
  // its 128-row and 128-key tiles, grouped-query heads, S_q != S_kv, block-diagonal tiles with an
  // empty segment, f16, causal (the Qwen language model's grouped-query prefill; top-left aligned
  // where S_q != S_kv; per segment in block-diagonal batches, whose tiles run in reverse). On
  // other devices these run the flash kernel.
  add_attention("hopper_gqa", DType::kBF16, {333, 333, 8, 2, 128});
  add_attention("hopper_cross", DType::kBF16, {77, 290, 2, 1, 128});
  add_attention("hopper_varlen", DType::kBF16, {300, 300, 4, 4, 128, false, {0, 50, 50, 211, 300}});
  add_attention("hopper", DType::kF16, {150, 150, 2, 2, 128});
  add_attention("hopper_causal_gqa", DType::kBF16, {333, 333, 8, 2, 128, true});
  add_attention("hopper_causal_cross", DType::kBF16, {77, 290, 2, 1, 128, true});
  add_attention("hopper_causal_cross", DType::kF16, {300, 140, 2, 2, 128, true});
  add_attention("hopper_causal_varlen", DType::kBF16,
                {300, 300, 4, 2, 128, true, {0, 50, 50, 211, 300}});
  add_attention("hopper_causal", DType::kF16, {261, 261, 4, 2, 64, true});
  add_attention("hopper_causal_varlen", DType::kF16,
                {400, 400, 2, 2, 64, true, {0, 137, 137, 274, 400}});
  // Head dim 64 (the video VAE decoder's): one 64-column half per tile, 4 stages, m64n64 P V.
  add_attention("hopper", DType::kF16, {200, 200, 2, 2, 64});
  add_attention("hopper_gqa", DType::kBF16, {261, 261, 4, 2, 64});
  add_attention("hopper_cross", DType::kF16, {70, 333, 2, 2, 64});
  add_attention("hopper_varlen", DType::kF16, {400, 400, 2, 2, 64, false, {0, 137, 137, 274, 400}});
  // The mma.sync kernel at head dims the Hopper one also takes, asked for by name (on a Hopper
  // GPU the automatic choice would never reach it).
  add_attention("mma", DType::kF16, {130, 130, 2, 2, 64, false, {}, false, h3::ops::AttentionKernel::kMma});
  add_attention("mma_varlen", DType::kBF16,
                {260, 260, 2, 2, 64, false, {0, 64, 64, 193, 260}, false, h3::ops::AttentionKernel::kMma});
  add_attention("mma", DType::kBF16, {200, 200, 2, 2, 128, false, {}, false, h3::ops::AttentionKernel::kMma});
  // Generic kernel: head dims 72 and 256, float32, masks.
  add_attention("vision", DType::kBF16, {96, 96, 2, 2, 72, false, {0, 40, 96}});
  add_attention("audio", DType::kF32, {50, 50, 1, 1, 256, true});
  add_attention("mask", DType::kF32, {40, 45, 2, 1, 32, false, {}, true});
  add_attention("mask", DType::kBF16, {40, 40, 2, 2, 64, false, {}, true});
  add_attention("full", DType::kF32, {70, 70, 2, 2, 128});
  if (large_enabled()) {
    add_attention("dit_slice", DType::kBF16, {1500, 1500, 8, 8, 128}, true);
    add_attention("qwen", DType::kBF16, {700, 700, 16, 2, 128, true}, true);
    add_attention("vae", DType::kF16, {1024, 1024, 1, 1, 64}, true);
    // Two 1,797-row tiles of the decoder (7 x 16 x 16 latents plus 5 suffix tokens), 4 heads.
    add_attention("vae_tiles", DType::kF16, {3594, 3594, 4, 4, 64, false, {0, 1797, 3594}}, true);
  }

  add_rms_norm_modulate(DType::kF32, 37, 96, 6, true);
  add_rms_norm_modulate(DType::kBF16, 64, 200, 9, true);
  add_rms_norm_modulate(DType::kBF16, 10, 64, 3, false);
  add_qk_norm_rope(DType::kF32, 19, 4, 32, 24);
  add_qk_norm_rope(DType::kBF16, 33, 3, 128, 96);
  add_qk_norm_rope(DType::kF16, 8, 2, 64, 64);
  // The DiT's widths (eight values per thread) and widths that take the one-value kernels: rows
  // not a multiple of 8, a rotary width whose half is not, head rows wider than a warp of 8s.
  add_rms_norm_modulate(DType::kBF16, 20, 5376, 6, true);
  add_rms_norm_modulate(DType::kBF16, 9, 100, 3, true);
  // Rows held in registers: a warp per row up to 2,048 values, a CTA of four warps above (the DiT's
  // 5,376; 8,192 the widest); 1,000 is not a multiple of 8 and takes the two ops.
  add_rms_norm_modulate(DType::kBF16, 13, 1536, 4, true);
  add_rms_norm_modulate(DType::kF16, 6, 8192, 2, false);
  add_gated_norm(DType::kBF16, 20, 5376, 6, true);
  add_gated_norm(DType::kF16, 17, 1024, 3, true);
  add_gated_norm(DType::kBF16, 9, 1000, 3, false);
  add_gated_norm(DType::kF32, 7, 256, 2, true);
  add_qk_norm_rope(DType::kBF16, 21, 2, 256, 128);
  add_qk_norm_rope(DType::kBF16, 11, 3, 128, 120);
  add_qk_norm_rope(DType::kBF16, 5, 2, 512, 128);
  // Heads in fours and twos: a lane group takes four (two) rows of one token.
  add_qk_norm_rope(DType::kBF16, 37, 8, 128, 96);
  add_qk_norm_rope(DType::kF16, 9, 4, 64, 48);
  add_qk_norm_rope(DType::kBF16, 7, 6, 128, 128);

  // The video VAE decoder's width (fused, eight values per lane) and widths that take the
  // composition: wider than the kernel's 2,048, not a multiple of 8.
  add_residual_norm(DType::kF16, DType::kF16, 37, 2048, true);
  add_residual_norm(DType::kBF16, DType::kBF16, 20, 96, false);
  add_residual_norm(DType::kF32, DType::kF32, 9, 136, true);
  add_residual_norm(DType::kF16, DType::kF16, 5, 2304, true);
  add_residual_norm(DType::kF16, DType::kF16, 6, 36, true);

  add_linear_bias(DType::kBF16, 70, 96, 130);
  add_linear_bias(DType::kF16, 33, 64, 48);
  add_linear_bias(DType::kF32, 17, 40, 24);
}

H3_OPS_CASES(add_cases);

}  // namespace
}  // namespace h3::test::ops
