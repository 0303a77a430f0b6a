// Backend-ops cases: conv1d, conv_transpose1d, conv3d and pad3d against direct float64 loops.
#include <array>
#include <string>

#include "backend_ops.h"
#include "ops/ops.h"

namespace h3::test::ops {
namespace {

using h3::ops::PadMode;

std::string mode_tag(PadMode m) {
  return m == PadMode::kZeros ? "zeros" : m == PadMode::kReflect ? "reflect" : "replicate";
}

// Padded coordinate -> source coordinate, -1 for a zero (written independently of the ops code).
int64_t src_index(int64_t i, int64_t n, PadMode m) {
  if (i >= 0 && i < n) return i;
  if (m == PadMode::kZeros) return -1;
  if (m == PadMode::kReplicate) return i < 0 ? 0 : n - 1;
  return i < 0 ? -i : 2 * (n - 1) - i;  // single reflection: pads are smaller than n
}

struct C1 {
  int64_t n, cin, l, cout, k;
  int stride = 1, padding = 0, dilation = 1, groups = 1;
};

void add_conv1d(const C1& a, DType t, bool bias, bool large = false) {
  OpCase c;
  c.op = "conv1d";
  c.name = "conv1d_" + dtype_tag(t) + "_n" + std::to_string(a.n) + "_c" + std::to_string(a.cin) + "to" +
           std::to_string(a.cout) + "_l" + std::to_string(a.l) + "_k" + std::to_string(a.k) + "_s" +
           std::to_string(a.stride) + "_p" + std::to_string(a.padding) + "_d" + std::to_string(a.dilation) +
           "_g" + std::to_string(a.groups) + (bias ? "_bias" : "");
  c.dtype = t;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    std::vector<Tensor> in = {r.uniform_tensor({a.n, a.cin, a.l}, t),
                              r.uniform_tensor({a.cout, a.cin / a.groups, a.k}, t, -0.5f, 0.5f)};
    if (bias) in.push_back(r.uniform_tensor({a.cout}, t));
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    h3::ops::Conv1dParams p;
    p.stride = a.stride;
    p.padding = a.padding;
    p.dilation = a.dilation;
    p.groups = a.groups;
    return h3::ops::conv1d(in[0], in[1], bias ? &in[2] : nullptr, p);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), w = f64(in[1]);
    const std::vector<double> b = bias ? f64(in[2]) : std::vector<double>();
    const int64_t lout = (a.l + 2 * a.padding - a.dilation * (a.k - 1) - 1) / a.stride + 1;
    const int64_t cig = a.cin / a.groups, cog = a.cout / a.groups;
    std::vector<double> y(static_cast<size_t>(a.n * a.cout * lout));
    for (int64_t ni = 0; ni < a.n; ++ni)
      for (int64_t co = 0; co < a.cout; ++co)
        for (int64_t lo = 0; lo < lout; ++lo) {
          double acc = bias ? b[co] : 0.0;
          const int64_t g = co / cog;
          for (int64_t ci = 0; ci < cig; ++ci)
            for (int64_t kk = 0; kk < a.k; ++kk) {
              const int64_t li = lo * a.stride - a.padding + kk * a.dilation;
              if (li < 0 || li >= a.l) continue;
              acc += x[(ni * a.cin + g * cig + ci) * a.l + li] * w[(co * cig + ci) * a.k + kk];
            }
          y[(ni * a.cout + co) * lout + lo] = acc;
        }
    return y;
  };
  register_case(std::move(c));
}

struct CT1 {
  int64_t n, cin, l, cout, k;
  int stride = 1, padding = 0, output_padding = 0, dilation = 1, groups = 1;
};

void add_convt1d(const CT1& a, DType t, bool bias, bool legacy = false) {
  OpCase c;
  c.op = "conv_transpose1d";
  c.name = "conv_transpose1d_" + dtype_tag(t) + "_n" + std::to_string(a.n) + "_c" + std::to_string(a.cin) +
           "to" + std::to_string(a.cout) + "_l" + std::to_string(a.l) + "_k" + std::to_string(a.k) +
           "_s" + std::to_string(a.stride) + "_p" + std::to_string(a.padding) + "_op" +
           std::to_string(a.output_padding) + "_d" + std::to_string(a.dilation) + "_g" +
           std::to_string(a.groups) + (bias ? "_bias" : "") + (legacy ? "_legacy" : "");
  c.dtype = t;
  c.make_inputs = [=](Rng& r) {
    std::vector<Tensor> in = {r.uniform_tensor({a.n, a.cin, a.l}, t),
                              r.uniform_tensor({a.cin, a.cout / a.groups, a.k}, t, -0.5f, 0.5f)};
    if (bias) in.push_back(r.uniform_tensor({a.cout}, t));
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    if (legacy) return h3::ops::conv_transpose1d(in[0], in[1], bias ? &in[2] : nullptr, a.stride, a.padding);
    h3::ops::ConvTranspose1dParams p;
    p.stride = a.stride;
    p.padding = a.padding;
    p.output_padding = a.output_padding;
    p.dilation = a.dilation;
    p.groups = a.groups;
    return h3::ops::conv_transpose1d(in[0], in[1], bias ? &in[2] : nullptr, p);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), w = f64(in[1]);
    const std::vector<double> b = bias ? f64(in[2]) : std::vector<double>();
    const int64_t lout =
        (a.l - 1) * a.stride - 2 * a.padding + a.dilation * (a.k - 1) + a.output_padding + 1;
    const int64_t cig = a.cin / a.groups, cog = a.cout / a.groups;
    std::vector<double> y(static_cast<size_t>(a.n * a.cout * lout));
    // Gather form: out[lo] = sum over (li, kk) with li*stride - pad + kk*dil == lo.
    for (int64_t ni = 0; ni < a.n; ++ni)
      for (int64_t co = 0; co < a.cout; ++co)
        for (int64_t lo = 0; lo < lout; ++lo) {
          double acc = bias ? b[co] : 0.0;
          const int64_t g = co / cog;
          for (int64_t ci = g * cig; ci < (g + 1) * cig; ++ci)
            for (int64_t kk = 0; kk < a.k; ++kk) {
              const int64_t num = lo + a.padding - kk * a.dilation;
              if (num < 0 || num % a.stride) continue;
              const int64_t li = num / a.stride;
              if (li >= a.l) continue;
              acc += x[(ni * a.cin + ci) * a.l + li] * w[(ci * cog + (co - g * cog)) * a.k + kk];
            }
          y[(ni * a.cout + co) * lout + lo] = acc;
        }
    return y;
  };
  register_case(std::move(c));
}

struct C3 {
  Shape x;  // N, Cin, T, H, W
  int64_t cout;
  int64_t k[3];
  int stride[3] = {1, 1, 1};
  int padding[3] = {0, 0, 0};
  PadMode mode = PadMode::kZeros;
};

void add_conv3d(const C3& a, DType t, bool bias, bool large = false) {
  OpCase c;
  c.op = "conv3d";
  std::string dims;
  for (int64_t d : a.x) dims += std::to_string(d) + "x";
  c.name = "conv3d_" + dtype_tag(t) + "_x" + dims + "co" + std::to_string(a.cout) + "_k" +
           std::to_string(a.k[0]) + std::to_string(a.k[1]) + std::to_string(a.k[2]) + "_s" +
           std::to_string(a.stride[0]) + std::to_string(a.stride[1]) + std::to_string(a.stride[2]) + "_p" +
           std::to_string(a.padding[0]) + std::to_string(a.padding[1]) + std::to_string(a.padding[2]) + "_" +
           mode_tag(a.mode) + (bias ? "_bias" : "");
  c.dtype = t;
  c.large = large;
  c.make_inputs = [=](Rng& r) {
    std::vector<Tensor> in = {r.uniform_tensor(a.x, t),
                              r.uniform_tensor({a.cout, a.x[1], a.k[0], a.k[1], a.k[2]}, t, -0.3f, 0.3f)};
    if (bias) in.push_back(r.uniform_tensor({a.cout}, t));
    return in;
  };
  c.run = [=](const std::vector<Tensor>& in) {
    h3::ops::Conv3dParams p;
    for (int d = 0; d < 3; ++d) {
      p.stride[d] = a.stride[d];
      p.padding[d] = a.padding[d];
    }
    p.pad_mode = a.mode;
    return h3::ops::conv3d(in[0], in[1], bias ? &in[2] : nullptr, p);
  };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]), w = f64(in[1]);
    const std::vector<double> b = bias ? f64(in[2]) : std::vector<double>();
    const int64_t n = a.x[0], cin = a.x[1], is[3] = {a.x[2], a.x[3], a.x[4]};
    int64_t os[3];
    for (int d = 0; d < 3; ++d) os[d] = (is[d] + 2 * a.padding[d] - a.k[d]) / a.stride[d] + 1;
    std::vector<double> y(static_cast<size_t>(n * a.cout * os[0] * os[1] * os[2]));
    size_t o = 0;
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t co = 0; co < a.cout; ++co)
        for (int64_t t0 = 0; t0 < os[0]; ++t0)
          for (int64_t h0 = 0; h0 < os[1]; ++h0)
            for (int64_t w0 = 0; w0 < os[2]; ++w0) {
              double acc = bias ? b[co] : 0.0;
              for (int64_t ci = 0; ci < cin; ++ci)
                for (int64_t kt = 0; kt < a.k[0]; ++kt)
                  for (int64_t kh = 0; kh < a.k[1]; ++kh)
                    for (int64_t kw = 0; kw < a.k[2]; ++kw) {
                      const int64_t ti = src_index(t0 * a.stride[0] - a.padding[0] + kt, is[0], a.mode);
                      const int64_t hi = src_index(h0 * a.stride[1] - a.padding[1] + kh, is[1], a.mode);
                      const int64_t wi = src_index(w0 * a.stride[2] - a.padding[2] + kw, is[2], a.mode);
                      if (ti < 0 || hi < 0 || wi < 0) continue;
                      acc += x[(((ni * cin + ci) * is[0] + ti) * is[1] + hi) * is[2] + wi] *
                             w[(((co * cin + ci) * a.k[0] + kt) * a.k[1] + kh) * a.k[2] + kw];
                    }
              y[o++] = acc;
            }
    return y;
  };
  register_case(std::move(c));
}

void add_pad3d(const Shape& shape, std::array<int, 6> pads, PadMode mode, DType t) {
  OpCase c;
  c.op = "pad3d";
  std::string dims, ps;
  for (int64_t d : shape) dims += std::to_string(d) + "x";
  for (int p : pads) {
    if (p < 0) ps += "m";
    ps += std::to_string(p < 0 ? -p : p);
  }
  c.name = "pad3d_" + dtype_tag(t) + "_" + mode_tag(mode) + "_x" + dims + "p" + ps;
  c.dtype = t;
  c.cpu_bounds = Bounds{0, 0};  // a pure copy
  c.device_bounds = Bounds{0, 0};
  c.make_inputs = [=](Rng& r) { return std::vector<Tensor>{r.normal_tensor(shape, t)}; };
  c.run = [=](const std::vector<Tensor>& in) { return h3::ops::pad3d(in[0], pads.data(), mode); };
  c.reference = [=](const std::vector<Tensor>& in) {
    const std::vector<double> x = f64(in[0]);
    const int nd = static_cast<int>(shape.size());
    const int64_t is[3] = {shape[nd - 3], shape[nd - 2], shape[nd - 1]};
    int64_t outer = 1;
    for (int d = 0; d < nd - 3; ++d) outer *= shape[d];
    std::vector<double> y;
    for (int64_t b = 0; b < outer; ++b)
      for (int64_t t0 = 0; t0 < is[0] + pads[0] + pads[1]; ++t0)
        for (int64_t h0 = 0; h0 < is[1] + pads[2] + pads[3]; ++h0)
          for (int64_t w0 = 0; w0 < is[2] + pads[4] + pads[5]; ++w0) {
            const int64_t ti = src_index(t0 - pads[0], is[0], mode);
            const int64_t hi = src_index(h0 - pads[2], is[1], mode);
            const int64_t wi = src_index(w0 - pads[4], is[2], mode);
            y.push_back(ti < 0 || hi < 0 || wi < 0
                            ? 0.0
                            : x[((b * is[0] + ti) * is[1] + hi) * is[2] + wi]);
          }
    return y;
  };
  register_case(std::move(c));
}

void add_cases() {
  for (DType t : {DType::kF32, DType::kBF16}) {
    add_conv1d({2, 4, 37, 6, 7, 1, 3}, t, true);
    add_conv1d({1, 5, 40, 5, 7, 1, 9, 3}, t, true);          // AMP dilated conv (k7, d3)
    add_conv1d({2, 4, 33, 8, 10, 5, 3}, t, true);            // DAC downsample: k = 2s, stride s
    add_conv1d({1, 6, 20, 4, 3, 1, 1, 1, 2}, t, false);      // groups 2
    add_conv1d({2, 3, 30, 3, 12, 2, 0, 1, 3}, t, false);     // depthwise low-pass, stride 2
    add_conv1d({1, 8, 9, 1, 1}, t, false);                   // 1x1
    // An AMP block convolution at a width where the dense path's im2col and GEMM do the work.
    add_conv1d({2, 64, 1200, 64, 11, 1, 15, 3}, t, true, /*large=*/true);
    add_convt1d({2, 8, 11, 4, 9, 5, 2}, t, true);            // decoder upsample x5 (k9)
    add_convt1d({1, 6, 13, 3, 4, 2, 1}, t, true);            // decoder upsample x2 (k4)
    add_convt1d({2, 3, 10, 3, 12, 2, 0, 0, 1, 3}, t, false); // depthwise anti-alias upsampler
    add_convt1d({1, 4, 7, 6, 3, 2, 1, 1, 2, 2}, t, true);    // output_padding, dilation, groups
    add_convt1d({1, 4, 6, 2, 4, 2, 1}, t, false, /*legacy=*/true);
    add_conv3d({{1, 3, 5, 6, 7}, 4, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, PadMode::kZeros}, t, true);
    add_conv3d({{2, 3, 4, 5, 6}, 5, {3, 3, 3}, {1, 1, 1}, {0, 1, 1}, PadMode::kReflect}, t, true);
    add_conv3d({{1, 2, 4, 5, 5}, 3, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, PadMode::kReplicate}, t, false);
    add_conv3d({{1, 4, 5, 9, 8}, 4, {3, 3, 3}, {2, 2, 2}, {0, 0, 0}}, t, true);  // downsample
    add_conv3d({{1, 6, 3, 4, 5}, 7, {1, 1, 1}}, t, true);                        // pointwise
    add_conv3d({{1, 3, 4, 8, 8}, 5, {2, 4, 4}, {2, 4, 4}}, t, true);             // patch embed
    add_conv3d({{1, 16, 5, 24, 40}, 16, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, PadMode::kReflect}, t, true,
               /*large=*/true);
    add_pad3d({1, 2, 3, 4, 5}, {2, 0, 1, 1, 1, 1}, PadMode::kZeros, t);  // causal time pad
    add_pad3d({2, 3, 4, 5}, {1, 2, 2, 1, 3, 0}, PadMode::kReflect, t);
    add_pad3d({3, 3, 2, 4}, {0, 3, 1, 2, 0, 1}, PadMode::kReplicate, t);
    add_pad3d({1, 1, 4, 6}, {0, 0, -1, 0, 0, -2}, PadMode::kZeros, t);  // negative: crop
  }
  add_conv3d({{1, 3, 3, 5, 5}, 4, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, PadMode::kReflect}, DType::kF16, true);
  add_pad3d({1, 6, 1, 2, 8}, {0, 0, 0, 1, 5, 6}, PadMode::kReplicate, DType::kF32);  // 1-D via views
}
H3_OPS_CASES(add_cases);

}  // namespace
}  // namespace h3::test::ops
