// Backend-ops cases for conv1d / conv_transpose1d with Conv1dParams::f64_accumulate (the audio VAE's
// convolutions). On the CPU the result must be the float64 reference rounded once to float32, so
// the bounds are a float32 rounding (1e-7), far below what float32 accumulation over these long
// reductions (up to 2816 terms) reaches; other backends ignore the flag and are held to the usual
// float32 bound against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backend_ops.h"
#include "ops/ops.h"

namespace h3::test::ops {
namespace {

constexpr Bounds kRoundedOnce{1e-7, 1e-7};

struct Conv {
  int64_t n, cin, l, cout, k;
  int stride = 1, padding = 0, dilation = 1, groups = 1;
};

std::string geometry(const Conv& a) {
  return "_n" + std::to_string(a.n) + "_c" + std::to_string(a.cin) + "to" + std::to_string(a.cout) + "_l" +
         std::to_string(a.l) + "_k" + std::to_string(a.k) + "_s" + std::to_string(a.stride) + "_p" +
         std::to_string(a.padding) + "_d" + std::to_string(a.dilation) + "_g" + std::to_string(a.groups);
}

void add_conv1d_f64(const Conv& a) {
  OpCase c;
  c.op = "conv1d";
  c.name = "conv1d_f64acc" + geometry(a);
  c.cpu_bounds = kRoundedOnce;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.uniform_tensor({a.n, a.cin, a.l}, DType::kF32),
                               r.uniform_tensor({a.cout, a.cin / a.groups, a.k}, DType::kF32, -0.5f, 0.5f),
                               r.uniform_tensor({a.cout}, DType::kF32)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    h3::ops::Conv1dParams p;
    p.stride = a.stride;
    p.padding = a.padding;
    p.dilation = a.dilation;
    p.groups = a.groups;
    p.f64_accumulate = true;
    return h3::ops::conv1d(in[0], in[1], &in[2], p);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), w = f64(in[1]), b = f64(in[2]);
    const int64_t lout = (a.l + 2 * a.padding - a.dilation * (a.k - 1) - 1) / a.stride + 1;
    const int64_t cig = a.cin / a.groups, cog = a.cout / a.groups;
    std::vector<double> y;
    for (int64_t ni = 0; ni < a.n; ++ni)
      for (int64_t co = 0; co < a.cout; ++co)
        for (int64_t lo = 0; lo < lout; ++lo) {
          double acc = b[co];
          const int64_t g = co / cog;
          for (int64_t ci = 0; ci < cig; ++ci)
            for (int64_t kk = 0; kk < a.k; ++kk) {
              const int64_t li = lo * a.stride - a.padding + kk * a.dilation;
              if (li >= 0 && li < a.l) acc += x[(ni * a.cin + g * cig + ci) * a.l + li] * w[(co * cig + ci) * a.k + kk];
            }
          y.push_back(acc);
        }
    return y;
  };
  register_case(std::move(c));
}

void add_convt1d_f64(const Conv& a) {
  OpCase c;
  c.op = "conv_transpose1d";
  c.name = "conv_transpose1d_f64acc" + geometry(a);
  c.cpu_bounds = kRoundedOnce;
  c.make_inputs = [=](Rng& r) {
    return std::vector<Tensor>{r.uniform_tensor({a.n, a.cin, a.l}, DType::kF32),
                               r.uniform_tensor({a.cin, a.cout / a.groups, a.k}, DType::kF32, -0.5f, 0.5f),
                               r.uniform_tensor({a.cout}, DType::kF32)};
  };
  c.run = [=](const std::vector<Tensor>& in) {
    h3::ops::ConvTranspose1dParams p;
    p.stride = a.stride;
    p.padding = a.padding;
    p.dilation = a.dilation;
    p.groups = a.groups;
    p.f64_accumulate = true;
    return h3::ops::conv_transpose1d(in[0], in[1], &in[2], p);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), w = f64(in[1]), b = f64(in[2]);
    const int64_t lout = (a.l - 1) * a.stride - 2 * a.padding + a.dilation * (a.k - 1) + 1;
    const int64_t cig = a.cin / a.groups, cog = a.cout / a.groups;
    std::vector<double> y(static_cast<size_t>(a.n * a.cout * lout));
    for (int64_t ni = 0; ni < a.n; ++ni)
      for (int64_t co = 0; co < a.cout; ++co) {
        const int64_t g = co / cog;
        for (int64_t lo = 0; lo < lout; ++lo) y[(ni * a.cout + co) * lout + lo] = b[co];
        for (int64_t ci = g * cig; ci < (g + 1) * cig; ++ci)
          for (int64_t li = 0; li < a.l; ++li)
            for (int64_t kk = 0; kk < a.k; ++kk) {
              const int64_t lo = li * a.stride - a.padding + kk * a.dilation;
              if (lo >= 0 && lo < lout)
                y[(ni * a.cout + co) * lout + lo] += x[(ni * a.cin + ci) * a.l + li] * w[(ci * cog + co - g * cog) * a.k + kk];
            }
      }
    return y;
  };
  register_case(std::move(c));
}

struct AntiAlias {
  int64_t n, c, l, k;
  int ratio;
};

std::string aa_name(const AntiAlias& a) {
  return "anti_aliased_snake_beta_n" + std::to_string(a.n) + "_c" + std::to_string(a.c) + "_l" +
         std::to_string(a.l) + "_k" + std::to_string(a.k) + "_r" + std::to_string(a.ratio);
}

// x, log_alpha, log_beta, up_filter (times the ratio, as the weights hold it), down_filter.
std::vector<Tensor> aa_inputs(const AntiAlias& a, Rng& r) {
  return {r.normal_tensor({a.n, a.c, a.l}, DType::kF32, 0.0f, 1.0f),
          r.normal_tensor({a.c}, DType::kF32, 0.0f, 0.5f),
          r.normal_tensor({a.c}, DType::kF32, 0.0f, 0.5f),
          r.uniform_tensor({a.c, 1, a.k}, DType::kF32, -0.3f, 0.6f),
          r.uniform_tensor({a.c, 1, a.k}, DType::kF32, -0.15f, 0.3f)};
}

// The composition ops.h defines the op by, from the public ops with float64 accumulation.
Tensor aa_composed(const std::vector<Tensor>& in, int ratio) {
  const int64_t l = in[0].size(2), k = in[3].size(2), r = ratio;
  const int pad = static_cast<int>(k / r - 1);
  const int64_t crop = pad * r + (k - r) / 2;
  const int groups = static_cast<int>(in[0].size(1));
  const int pads_up[6] = {0, 0, 0, 0, pad, pad};
  h3::ops::ConvTranspose1dParams up;
  up.stride = ratio;
  up.groups = groups;
  up.f64_accumulate = true;
  Tensor h = h3::ops::conv_transpose1d(h3::ops::pad3d(in[0], pads_up, h3::ops::PadMode::kReplicate),
                                       in[3], nullptr, up);
  h = h3::ops::snake_beta(h3::ops::copy(h.slice(2, crop, crop + r * l)), in[1], in[2]);
  const int pads_down[6] = {
      0, 0, 0, 0, static_cast<int>(k / 2 - (k % 2 == 0 ? 1 : 0)), static_cast<int>(k / 2)};
  return h3::ops::conv1d(
      h3::ops::pad3d(h, pads_down, h3::ops::PadMode::kReplicate), in[4], nullptr,
      {.stride = ratio, .padding = 0, .dilation = 1, .groups = groups, .f64_accumulate = true});
}

void add_anti_aliased_snake_beta(const AntiAlias& a, bool large = false) {
  OpCase c;
  c.op = "anti_aliased_snake_beta";
  c.name = aa_name(a);
  c.large = large;
  // The CPU keeps the 2x signal and its SnakeBeta in float32, as the composition does: float32
  // roundings inside, which SnakeBeta's slope 1 + (alpha/beta) sin(2 alpha u) (up to about 10 with
  // these parameters) amplifies before the 12-term sums. Measured against this all-float64
  // reference: rel_l2 up to 1.0e-7, rel_max up to 2.7e-7 at these shapes (float32 rounding is
  // 6e-8).
  c.cpu_bounds = Bounds{5e-7, 1e-6};
  c.make_inputs = [=](Rng& r) { return aa_inputs(a, r); };
  c.run = [=](const std::vector<Tensor>& in) {
    return h3::ops::anti_aliased_snake_beta(in[0], in[1], in[2], in[3], in[4], a.ratio);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), la = f64(in[1]), lb = f64(in[2]), fu = f64(in[3]),
                              fd = f64(in[4]);
    const int64_t r = a.ratio, pad = a.k / r - 1, crop = pad * r + (a.k - r) / 2;
    const int64_t left = a.k / 2 - (a.k % 2 == 0 ? 1 : 0), lu = r * a.l;
    std::vector<double> y;
    for (int64_t row = 0; row < a.n * a.c; ++row) {
      const int64_t ch = row % a.c;
      // Zero-stuffed, replicate-padded input through the up-filter, cropped; then SnakeBeta.
      std::vector<double> s(static_cast<size_t>(lu), 0.0);
      for (int64_t m = 0; m < lu; ++m) {
        double u = 0.0;
        const int64_t t = m + crop;  // i from t/r down while the tap t - r*i stays below K
        for (int64_t i = std::min(t / r, a.l + 2 * pad - 1); i >= 0 && t - r * i < a.k; --i) {
          const int64_t kk = t - r * i;
          const int64_t src = std::min(std::max<int64_t>(i - pad, 0), a.l - 1);
          u += x[row * a.l + src] * fu[ch * a.k + kk];
        }
        const double sn = std::sin(std::exp(la[ch]) * u);
        s[m] = u + sn * sn / (std::exp(lb[ch]) + 1e-9);
      }
      for (int64_t j = 0; j < a.l; ++j) {
        double acc = 0.0;
        for (int64_t kk = 0; kk < a.k; ++kk) {
          const int64_t src = std::min(std::max<int64_t>(j * r + kk - left, 0), lu - 1);
          acc += s[src] * fd[ch * a.k + kk];
        }
        y.push_back(acc);
      }
    }
    return y;
  };
  register_case(std::move(c));
}

void add_cases() {
  add_conv1d_f64({2, 256, 40, 8, 11, 1, 5});             // AMP conv, k11: 2816-term sums
  add_conv1d_f64({1, 64, 50, 16, 7, 1, 9, 3});           // dilated, as convs1 with d = 3
  add_conv1d_f64({2, 32, 41, 64, 10, 5, 3});             // DAC downsample: k = 2s, stride s
  add_conv1d_f64({1, 4, 30, 4, 12, 2, 0, 1, 4});         // depthwise low-pass, stride 2
  add_convt1d_f64({2, 128, 9, 64, 9, 5, 2});             // decoder upsample x5 (k9)
  add_convt1d_f64({1, 3, 10, 3, 12, 2, 0, 1, 3});        // depthwise anti-alias upsampler
  add_anti_aliased_snake_beta({2, 3, 37, 12, 2});        // the decoder's filters (K 12, ratio 2)
  add_anti_aliased_snake_beta({1, 2, 1, 12, 2});         // one sample: every tap is padding
  add_anti_aliased_snake_beta({1, 2, 9, 7, 3});          // odd K, ratio 3
  add_anti_aliased_snake_beta({1, 3, 700, 12, 2});       // three CUDA blocks of 256 outputs
  add_anti_aliased_snake_beta({1, 64, 41400, 12, 2}, /*large=*/true);  // a released level's width
}
H3_OPS_CASES(add_cases);

// On the CPU the one-pass form is the composition it replaces, bit for bit (the audio VAE's golden
// parity was measured on the composition).
TEST(AntiAliasedSnakeBeta, CpuEqualsTheCompositionBitForBit) {
  for (const AntiAlias& a :
       {AntiAlias{2, 3, 37, 12, 2}, AntiAlias{1, 2, 1, 12, 2}, AntiAlias{1, 2, 5, 12, 2},
        AntiAlias{1, 2, 9, 7, 3}, AntiAlias{1, 3, 16, 2, 2}}) {
    Rng r(17);
    const std::vector<Tensor> in = aa_inputs(a, r);
    const std::vector<float> fused =
        h3::ops::anti_aliased_snake_beta(in[0], in[1], in[2], in[3], in[4], a.ratio)
            .to_f32_vector();
    const std::vector<float> composed = aa_composed(in, a.ratio).to_f32_vector();
    ASSERT_EQ(fused.size(), composed.size()) << aa_name(a);
    EXPECT_EQ(std::memcmp(fused.data(), composed.data(), fused.size() * sizeof(float)), 0)
        << aa_name(a);
  }
}

}  // namespace
}  // namespace h3::test::ops
