#include "ops/fp8.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status.h"
#include "ops/cuda/fp8_cuda.h"
#include "ops/ops.h"

namespace h3::ops {

namespace {

int64_t blocks(int64_t n) { return (n + kFp8BlockSize - 1) / kFp8BlockSize; }

// The scale that puts a group's largest magnitude on E4M3's largest finite value. The division is
// float32 on every backend, so the same inputs round to the same E4M3 values everywhere.
float scale_for(float amax) { return amax > 0.0f ? amax / kFp8E4M3Max : 1.0f; }

// Operands on two devices are refused by name (CUDA operands go to ops/cuda/fp8.cu).
void require_cpu(const char* op, const Tensor& t) {
  H3_CHECK(t.device().is_cpu(), ErrorCode::kInvalidArgument, "ops::", op, ": an operand on ",
           t.device().str(), " next to CPU operands (expected all on one device)");
}

Shape expected_scale_shape(Fp8WeightScaling s, int64_t n, int64_t k) {
  return s == Fp8WeightScaling::kPerChannel ? Shape{n} : Shape{blocks(n), blocks(k)};
}

}  // namespace

Fp8WeightScaling parse_fp8_weight_scaling(const std::string& text) {
  if (text == "channel") return Fp8WeightScaling::kPerChannel;
  if (text == "block") return Fp8WeightScaling::kPerBlock;
  fail(ErrorCode::kInvalidArgument, "FP8 weight scaling '", text,
       "' is not known (expected channel or block)");
}

Fp8ActScaling parse_fp8_act_scaling(const std::string& text) {
  if (text == "token") return Fp8ActScaling::kPerToken;
  if (text == "tensor") return Fp8ActScaling::kPerTensor;
  if (text == "group") return Fp8ActScaling::kPerGroup;
  fail(ErrorCode::kInvalidArgument, "FP8 activation scaling '", text,
       "' is not known (expected token, tensor or group)");
}

const char* fp8_weight_scaling_name(Fp8WeightScaling s) {
  return s == Fp8WeightScaling::kPerChannel ? "channel" : "block";
}

const char* fp8_act_scaling_name(Fp8ActScaling s) {
  switch (s) {
    case Fp8ActScaling::kPerToken:
      return "token";
    case Fp8ActScaling::kPerTensor:
      return "tensor";
    case Fp8ActScaling::kPerGroup:
      return "group";
  }
  return "?";
}

Fp8Weight quantize_weight_fp8(const Tensor& w, Fp8WeightScaling scaling) {
  H3_CHECK(w.defined() && dtype_is_float(w.dtype()) && w.dim() == 2, ErrorCode::kInvalidArgument,
           "ops::quantize_weight_fp8: w must be a float [N, K] tensor, got ",
           w.defined() ? w.desc() : std::string("<undefined>"));
  if (w.device().is_cuda()) return cuda::quantize_weight_fp8(w, scaling);
  const int64_t n = w.size(0), k = w.size(1);
  const std::vector<float> v = w.to_f32_vector();
  for (size_t i = 0; i < v.size(); ++i) {
    H3_CHECK(std::isfinite(v[i]), ErrorCode::kInvalidArgument, "ops::quantize_weight_fp8: w ",
             w.desc(), " holds ", v[i], " at [", static_cast<int64_t>(i) / std::max<int64_t>(k, 1),
             ", ", static_cast<int64_t>(i) % std::max<int64_t>(k, 1),
             "] (FP8 weights need finite values)");
  }
  Fp8Weight out;
  out.scaling = scaling;
  out.data = Tensor::empty({n, k}, DType::kF8E4M3);
  out.scale = Tensor::empty(expected_scale_shape(scaling, n, k), DType::kF32);
  uint8_t* q = out.data.data<uint8_t>();
  float* s = out.scale.data<float>();
  // The group of element (r, c): its channel r, or its block (r / 128, c / 128).
  const int64_t kb = blocks(k);
  auto group = [&](int64_t r, int64_t c) {
    return scaling == Fp8WeightScaling::kPerChannel ? r
                                                    : (r / kFp8BlockSize) * kb + c / kFp8BlockSize;
  };
  std::vector<float> amax(static_cast<size_t>(out.scale.numel()), 0.0f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      float& a = amax[static_cast<size_t>(group(r, c))];
      a = std::max(a, std::fabs(v[static_cast<size_t>(r * k + c)]));
    }
  for (size_t g = 0; g < amax.size(); ++g) s[g] = scale_for(amax[g]);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const size_t i = static_cast<size_t>(r * k + c);
      q[i] = f8e4m3_from_f32(v[i] / s[group(r, c)]);
    }
  return out;
}

void check_fp8_weight(const Fp8Weight& w, const std::string& what) {
  H3_CHECK(w.data.defined() && w.data.dtype() == DType::kF8E4M3 && w.data.dim() == 2,
           ErrorCode::kInvalidArgument, what, ": FP8 weight data must be F8_E4M3 [N, K], got ",
           w.data.defined() ? w.data.desc() : std::string("<undefined>"));
  const Shape want = expected_scale_shape(w.scaling, w.data.size(0), w.data.size(1));
  H3_CHECK(w.scale.defined() && w.scale.dtype() == DType::kF32 && w.scale.shape() == want,
           ErrorCode::kInvalidArgument, what, ": the per-", fp8_weight_scaling_name(w.scaling),
           " scale of an FP8 weight ", w.data.desc(), " must be f32 ", shape_str(want), ", got ",
           w.scale.defined() ? w.scale.desc() : std::string("<undefined>"));
  if (w.scale.device().is_cpu()) {
    const std::vector<float> s = w.scale.to_f32_vector();
    for (size_t i = 0; i < s.size(); ++i)
      H3_CHECK(std::isfinite(s[i]) && s[i] > 0.0f, ErrorCode::kInvalidArgument, what,
               ": FP8 scale ", i, " is ", s[i], " (expected a finite positive number)");
  }
}

Tensor dequantize_weight_fp8(const Fp8Weight& w, DType dtype) {
  check_fp8_weight(w, "ops::dequantize_weight_fp8");
  H3_CHECK(dtype_is_float(dtype) && dtype != DType::kF8E4M3, ErrorCode::kInvalidArgument,
           "ops::dequantize_weight_fp8: output dtype ", dtype_name(dtype),
           " (expected f32, bf16, f16 or f64)");
  if (w.data.device().is_cuda()) return cuda::dequantize_weight_fp8(w, dtype);
  require_cpu("dequantize_weight_fp8", w.scale);
  const int64_t n = w.data.size(0), k = w.data.size(1), kb = blocks(k);
  const uint8_t* q = w.data.data<uint8_t>();
  const float* s = w.scale.data<float>();
  std::vector<float> out(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const float sc = w.scaling == Fp8WeightScaling::kPerChannel
                           ? s[r]
                           : s[(r / kFp8BlockSize) * kb + c / kFp8BlockSize];
      out[static_cast<size_t>(r * k + c)] = f8e4m3_to_f32(q[r * k + c]) * sc;
    }
  return Tensor::from_f32(out, {n, k}, dtype);
}

Tensor fake_quantize_activation_fp8(const Tensor& x, Fp8ActScaling act) {
  H3_CHECK(x.defined() && dtype_is_float(x.dtype()) && x.dim() >= 1, ErrorCode::kInvalidArgument,
           "ops::fake_quantize_activation_fp8: x must be a float [..., K] tensor, got ",
           x.defined() ? x.desc() : std::string("<undefined>"));
  if (x.device().is_cuda()) return cuda::fake_quantize_activation_fp8(x, act);
  const int64_t k = x.size(-1);
  const int64_t rows = k ? x.numel() / k : 0;
  std::vector<float> v = x.to_f32_vector();
  // amax propagates NaN (a NaN compares false with max), so a bad token poisons its own scale.
  // Both work on the flat values [i0, i1): a whole tensor, a row, or a row's run of 128 columns.
  auto amax_of = [&](int64_t i0, int64_t i1) {
    float a = 0.0f;
    for (int64_t i = i0; i < i1; ++i) {
      const float m = std::fabs(v[static_cast<size_t>(i)]);
      a = (std::isnan(m) || std::isnan(a)) ? NAN : std::max(a, m);
    }
    return a;
  };
  auto apply = [&](int64_t i0, int64_t i1) {
    const float amax = amax_of(i0, i1);
    const float s = std::isfinite(amax) ? scale_for(amax) : NAN;
    for (int64_t i = i0; i < i1; ++i) {
      float& e = v[static_cast<size_t>(i)];
      e = std::isfinite(s) ? f8e4m3_to_f32(f8e4m3_from_f32(e / s)) * s : NAN;
    }
  };
  if (act == Fp8ActScaling::kPerTensor) {
    apply(0, rows * k);
  } else if (act == Fp8ActScaling::kPerGroup) {
    // The last run of a row is shorter when K is not a multiple of 128.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c0 = 0; c0 < k; c0 += kFp8BlockSize)
        apply(r * k + c0, r * k + std::min(k, c0 + kFp8BlockSize));
  } else {
    for (int64_t r = 0; r < rows; ++r) apply(r * k, (r + 1) * k);
  }
  return Tensor::from_f32(v, x.shape(), DType::kF32);
}

Tensor linear_fp8(const Tensor& x, const Fp8Weight& w, const Tensor* bias, Fp8ActScaling act) {
  check_fp8_weight(w, "ops::linear_fp8");
  H3_CHECK(x.defined() && dtype_is_float(x.dtype()) && x.dtype() != DType::kF8E4M3 &&
               x.dim() >= 1 && x.size(-1) == w.in_features(),
           ErrorCode::kInvalidArgument, "ops::linear_fp8: x ",
           x.defined() ? x.desc() : std::string("<undefined>"), " and FP8 w ", w.data.desc(),
           ": expected a float x [..., K] and w [N, K]");
  H3_CHECK(!bias || (bias->defined() && bias->dim() == 1 && bias->size(0) == w.out_features()),
           ErrorCode::kInvalidArgument, "ops::linear_fp8: bias must be [", w.out_features(),
           "], got ", bias && bias->defined() ? bias->desc() : std::string("<undefined>"));
  if (x.device().is_cuda()) return cuda::linear_fp8(x, w, bias, act);
  require_cpu("linear_fp8", w.data);
  require_cpu("linear_fp8", w.scale);
  if (bias) require_cpu("linear_fp8", *bias);
  // The float32 GEMM over dequantized operands; bias added in float32, one rounding to x's dtype.
  const Tensor xq = fake_quantize_activation_fp8(x, act);
  const Tensor wd = dequantize_weight_fp8(w, DType::kF32);
  const Tensor bf = bias ? bias->to(DType::kF32) : Tensor();
  const Tensor y = linear(xq, wd, bias ? &bf : nullptr);
  return x.dtype() == DType::kF32 ? y : y.to(x.dtype());
}

Fp8Activation quantize_activation_fp8(const Tensor& x, Fp8ActScaling act) {
  H3_CHECK(x.defined() && dtype_is_float(x.dtype()) && x.dtype() != DType::kF8E4M3 && x.dim() >= 1,
           ErrorCode::kInvalidArgument, "ops::quantize_activation_fp8: x ",
           x.defined() ? x.desc() : std::string("<undefined>"), ": expected a float x [..., K]");
  if (x.device().is_cuda()) return cuda::quantize_activation_fp8(x, act);
  // Rows from the leading dimensions, so that K = 0 keeps them (the output is then the bias).
  const int64_t k = x.size(-1);
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  Fp8Activation out;
  out.data = fake_quantize_activation_fp8(x, act).reshape({rows, k});
  out.shape = x.shape();
  out.dtype = x.dtype();
  out.scaling = act;
  return out;
}

Fp8Activation swiglu_fp8(const Tensor& u, Fp8ActScaling act) {
  H3_CHECK(u.defined() && dtype_is_float(u.dtype()) && u.dtype() != DType::kF8E4M3 &&
               u.dim() >= 1 && u.size(-1) % 2 == 0,
           ErrorCode::kInvalidArgument, "ops::swiglu_fp8: u ",
           u.defined() ? u.desc() : std::string("<undefined>"),
           ": expected a float u [..., 2F] ([value | gate])");
  if (u.device().is_cuda()) return cuda::swiglu_fp8(u, act);
  return quantize_activation_fp8(swiglu(u), act);
}

Fp8Activation rms_norm_modulate_fp8(const Tensor& x, const Tensor* weight, float eps,
                                    const Tensor& scale, const Tensor& shift, const Tensor& idx,
                                    Fp8ActScaling act) {
  if (x.defined() && x.device().is_cuda()) {
    return cuda::rms_norm_modulate_fp8(x, weight, eps, scale, shift, idx, act);
  }
  return quantize_activation_fp8(rms_norm_modulate(x, weight, eps, scale, shift, idx), act);
}

GatedNormFp8 gated_residual_rms_norm_modulate_fp8(const Tensor& residual, const Tensor& branch,
                                                  const Tensor& gate, const Tensor& idx,
                                                  const Tensor* weight, float eps,
                                                  const Tensor& scale, const Tensor& shift,
                                                  Fp8ActScaling act) {
  if (residual.defined() && residual.device().is_cuda()) {
    return cuda::gated_residual_rms_norm_modulate_fp8(residual, branch, gate, idx, weight, eps,
                                                      scale, shift, act);
  }
  GatedNormFp8 r;
  r.x = gated_residual(residual, branch, gate, idx);
  r.modulated = rms_norm_modulate_fp8(r.x, weight, eps, scale, shift, idx, act);
  return r;
}

Tensor linear_fp8(const Fp8Activation& x, const Fp8Weight& w, const Tensor* bias) {
  check_fp8_weight(w, "ops::linear_fp8");
  H3_CHECK(x.defined() && x.data.dim() == 2 && x.data.size(1) == w.in_features(),
           ErrorCode::kInvalidArgument, "ops::linear_fp8: quantized x ",
           x.defined() ? x.data.desc() : std::string("<undefined>"), " and FP8 w ", w.data.desc(),
           ": expected x [M, K] and w [N, K]");
  H3_CHECK(!bias || (bias->defined() && bias->dim() == 1 && bias->size(0) == w.out_features()),
           ErrorCode::kInvalidArgument, "ops::linear_fp8: bias must be [", w.out_features(),
           "], got ", bias && bias->defined() ? bias->desc() : std::string("<undefined>"));
  if (x.data.device().is_cuda()) return cuda::linear_fp8(x, w, bias);
  require_cpu("linear_fp8", w.data);
  require_cpu("linear_fp8", w.scale);
  if (bias) require_cpu("linear_fp8", *bias);
  const Tensor wd = dequantize_weight_fp8(w, DType::kF32);
  const Tensor bf = bias ? bias->to(DType::kF32) : Tensor();
  Shape out_shape = x.shape;
  out_shape.back() = w.out_features();
  const Tensor y = linear(x.data, wd, bias ? &bf : nullptr).reshape(out_shape);
  return x.dtype == DType::kF32 ? y : y.to(x.dtype);
}

void quantize_projection_fp8(Tensor& w, Tensor& scale, Fp8WeightScaling scaling) {
  if (!w.defined() || w.dtype() == DType::kF8E4M3) return;
  Fp8Weight q = quantize_weight_fp8(w, scaling);
  w = std::move(q.data);
  scale = std::move(q.scale);
}

Fp8Weight projection_fp8(const Tensor& w, const Tensor& scale) {
  return {w, scale, scale.dim() == 2 ? Fp8WeightScaling::kPerBlock : Fp8WeightScaling::kPerChannel};
}

Fp8ActScaling projection_act_scaling(const Tensor& scale) {
  return scale.dim() == 2 ? Fp8ActScaling::kPerGroup : Fp8ActScaling::kPerToken;
}

Tensor linear_projection(const Tensor& x, const Tensor& w, const Tensor& scale,
                         const Tensor* bias) {
  if (w.dtype() != DType::kF8E4M3) return linear(x, w, bias);
  return linear_fp8(x, projection_fp8(w, scale), bias, projection_act_scaling(scale));
}

Tensor linear_projection(const Tensor& x, Fp8Activation& xq, const Tensor& w, const Tensor& scale,
                         const Tensor* bias) {
  if (w.dtype() != DType::kF8E4M3) return linear(x, w, bias);
  const Fp8ActScaling act = projection_act_scaling(scale);
  if (!xq.defined()) xq = quantize_activation_fp8(x, act);
  // A weight of the other scaling beside the shared one (not a layout the models make) gets its
  // own quantized x rather than a mismatched one.
  if (xq.scaling != act) return linear_fp8(x, projection_fp8(w, scale), bias, act);
  return linear_fp8(xq, projection_fp8(w, scale), bias);
}

}  // namespace h3::ops
