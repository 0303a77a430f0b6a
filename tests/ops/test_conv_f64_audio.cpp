// Backend-ops cases for conv1d / conv_transpose1d with Conv1dParams::f64_accumulate (the audio VAE's
// convolutions). On the CPU the result must be the float64 reference rounded once to float32, so
// the bounds are a float32 rounding (1e-7), far below what float32 accumulation over these long
// reductions (up to 2816 terms) reaches; other backends ignore the flag and are held to the usual
// float32 bound against the CPU.
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

void add_cases() {
  add_conv1d_f64({2, 256, 40, 8, 11, 1, 5});             // AMP conv, k11: 2816-term sums
  add_conv1d_f64({1, 64, 50, 16, 7, 1, 9, 3});           // dilated, as convs1 with d = 3
  add_conv1d_f64({2, 32, 41, 64, 10, 5, 3});             // DAC downsample: k = 2s, stride s
  add_conv1d_f64({1, 4, 30, 4, 12, 2, 0, 1, 4});         // depthwise low-pass, stride 2
  add_convt1d_f64({2, 128, 9, 64, 9, 5, 2});             // decoder upsample x5 (k9)
  add_convt1d_f64({1, 3, 10, 3, 12, 2, 0, 1, 3});        // depthwise anti-alias upsampler
}
H3_OPS_CASES(add_cases);

}  // namespace
}  // namespace h3::test::ops
