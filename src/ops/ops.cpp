// The op interface: argument checks shared by both backends, then dispatch on the inputs' device
// (CUDA tensors to ops/cuda, CPU tensors to ops/cpu). Every check names the op and the tensors, so
// a model bug reads as "ops::linear: x f32[4, 7] and w bf16[5, 8]: ...", never as a crash.
#include "ops/ops.h"

#include <algorithm>
#include <initializer_list>
#include <string>

#include "core/status.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"

namespace h3::ops {

namespace {

struct Named {
  const char* name;
  const Tensor* t;  // null: an absent optional argument
};

std::string describe(const Tensor& t) { return t.defined() ? t.desc() : std::string("<undefined>"); }

// All given tensors defined and on one device; returns that device.
Device check_devices(const char* op, std::initializer_list<Named> args) {
  Device dev = Device::cpu();
  const char* first = nullptr;
  for (const Named& a : args) {
    if (!a.t) continue;
    H3_CHECK(a.t->defined(), ErrorCode::kInvalidArgument, "ops::", op, ": ", a.name, " is undefined");
    if (!first) {
      first = a.name;
      dev = a.t->device();
    } else {
      H3_CHECK(a.t->device() == dev, ErrorCode::kInvalidArgument, "ops::", op, ": ", a.name, " ",
               a.t->desc(), " is on another device than ", first, " (", dev.str(), ")");
    }
  }
  return dev;
}

void check_float(const char* op, const char* name, const Tensor& t) {
  H3_CHECK(dtype_is_float(t.dtype()), ErrorCode::kInvalidArgument, "ops::", op, ": ", name,
           " must be a float tensor, got ", t.desc());
}

void check_dims(const char* op, const char* name, const Tensor& t, int nd) {
  H3_CHECK(t.dim() == nd, ErrorCode::kInvalidArgument, "ops::", op, ": ", name, " must have ", nd,
           " dims, got ", t.desc());
}

void check_vector(const char* op, const char* name, const Tensor* t, int64_t n) {
  if (!t) return;
  check_float(op, name, *t);
  H3_CHECK(t->dim() == 1 && t->size(0) == n, ErrorCode::kInvalidArgument, "ops::", op, ": ", name,
           " must be [", n, "], got ", t->desc());
}

void check_index(const char* op, const char* name, const Tensor& idx, int64_t n, int64_t bound) {
  H3_CHECK(idx.dtype() == DType::kI32 || idx.dtype() == DType::kI64, ErrorCode::kInvalidArgument,
           "ops::", op, ": ", name, " must be int32 or int64, got ", idx.desc());
  H3_CHECK(idx.dim() == 1 && (n < 0 || idx.size(0) == n), ErrorCode::kInvalidArgument, "ops::", op,
           ": ", name, " must be 1-D", n >= 0 ? std::string(" of ") + std::to_string(n) : "",
           ", got ", idx.desc());
  // Range checks read the values, which is cheap for the CPU and skipped on the device (the
  // CUDA kernels guard their own loads).
  if (idx.device().is_cpu()) {
    for (int64_t v : cpu::index_values(idx)) {
      H3_CHECK(v >= 0 && v < bound, ErrorCode::kInvalidArgument, "ops::", op, ": ", name,
               " holds ", v, ", outside [0, ", bound, ")");
    }
  }
}

// b's shape must equal the trailing dims of a's (b broadcast over the leading dims of a).
void check_trailing(const char* op, const Tensor& a, const Tensor& b) {
  bool ok = b.dim() <= a.dim();
  for (int i = 1; ok && i <= b.dim(); ++i) ok = b.size(-i) == a.size(-i);
  H3_CHECK(ok, ErrorCode::kInvalidArgument, "ops::", op, ": b ", b.desc(),
           " must match the trailing dims of a ", a.desc());
}

}  // namespace

// ---- linear algebra -------------------------------------------------------------------------------

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias) {
  const Device dev = check_devices("linear", {{"x", &x}, {"w", &w}, {"bias", bias}});
  check_float("linear", "x", x);
  check_float("linear", "w", w);
  H3_CHECK(x.dim() >= 1 && w.dim() == 2 && x.size(-1) == w.size(1), ErrorCode::kInvalidArgument,
           "ops::linear: x ", x.desc(), " and w ", w.desc(), ": expected x [..., K] and w [N, K]");
  check_vector("linear", "bias", bias, w.size(0));
  if (dev.is_cuda()) return cuda::linear(x, w, bias);
  return cpu::linear(x, w, bias);
}

Tensor linear_segmented(const Tensor& x, const Tensor& w, const Tensor* bias,
                        const std::vector<int64_t>& row_starts) {
  const Device dev = check_devices("linear_segmented", {{"x", &x}, {"w", &w}, {"bias", bias}});
  check_float("linear_segmented", "x", x);
  check_float("linear_segmented", "w", w);
  H3_CHECK(x.dim() >= 1 && w.dim() == 2 && x.size(-1) == w.size(1), ErrorCode::kInvalidArgument,
           "ops::linear_segmented: x ", x.desc(), " and w ", w.desc(),
           ": expected x [..., K] and w [N, K]");
  check_vector("linear_segmented", "bias", bias, w.size(0));
  const int64_t rows = x.size(-1) ? x.numel() / x.size(-1) : 0;
  bool ok = row_starts.size() >= 2 && row_starts.front() == 0 && row_starts.back() == rows;
  for (size_t i = 1; ok && i < row_starts.size(); ++i) ok = row_starts[i] >= row_starts[i - 1];
  H3_CHECK(ok, ErrorCode::kInvalidArgument, "ops::linear_segmented: row_starts must rise from 0 to ",
           rows, " (the rows of x ", x.desc(), ")");
  if (dev.is_cuda()) return cuda::linear(x, w, bias);
  return cpu::linear_segmented(x, w, bias, row_starts);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  const Device dev = check_devices("matmul", {{"a", &a}, {"b", &b}});
  check_float("matmul", "a", a);
  check_float("matmul", "b", b);
  const bool shapes_ok = (a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3) &&
                         !(a.dim() == 2 && b.dim() == 3) && a.size(-1) == b.size(-2) &&
                         (b.dim() == 2 || a.size(0) == b.size(0));
  H3_CHECK(shapes_ok, ErrorCode::kInvalidArgument, "ops::matmul: a ", a.desc(), " and b ", b.desc(),
           ": expected a [B, M, K] with b [B, K, N] or [K, N], or a [M, K] with b [K, N]");
  if (dev.is_cuda()) return cuda::matmul(a, b);
  return cpu::matmul(a, b);
}

// ---- attention --------------------------------------------------------------------------------------

const char* attention_kernel_name(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kAuto: return "auto";
    case AttentionKernel::kHopper: return "hopper";
    case AttentionKernel::kMma: return "mma";
    case AttentionKernel::kGeneric: return "generic";
    case AttentionKernel::kCpu: return "cpu";
  }
  return "?";
}

AttentionKernel parse_attention_kernel(const std::string& text, const std::string& what) {
  for (AttentionKernel k : {AttentionKernel::kAuto, AttentionKernel::kHopper, AttentionKernel::kMma,
                            AttentionKernel::kGeneric}) {
    if (text == attention_kernel_name(k)) return k;
  }
  fail(ErrorCode::kInvalidArgument, what, ": unknown attention kernel '", text,
       "' (expected auto, hopper, mma or generic)");
}

bool attention_kernel_available(AttentionKernel kernel, const Device& device) {
  switch (kernel) {
    case AttentionKernel::kAuto: return true;
    case AttentionKernel::kCpu: return device.is_cpu();
    case AttentionKernel::kMma:
    case AttentionKernel::kGeneric: return device.is_cuda();
    case AttentionKernel::kHopper: return device.is_cuda() && cuda::hopper_attention_available(device.index);
  }
  return false;
}

namespace {

// The checks every backend shares; returns the inputs' device.
Device check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                       const Tensor* mask) {
  const Device dev = check_devices("attention", {{"q", &q}, {"k", &k}, {"v", &v}, {"mask", mask}});
  for (const Named& a : {Named{"q", &q}, Named{"k", &k}, Named{"v", &v}}) {
    check_float("attention", a.name, *a.t);
    check_dims("attention", a.name, *a.t, 3);
  }
  H3_CHECK(k.size(0) == v.size(0) && k.size(1) == v.size(1) && q.size(2) == k.size(2),
           ErrorCode::kInvalidArgument, "ops::attention: q ", q.desc(), ", k ", k.desc(), ", v ",
           v.desc(), ": expected q [S, Hq, D], k [S_kv, Hkv, D], v [S_kv, Hkv, Dv]");
  H3_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, ErrorCode::kInvalidArgument,
           "ops::attention: query heads ", q.size(1), " are not a multiple of key/value heads ",
           k.size(1));
  if (mask) {
    check_float("attention", "mask", *mask);
    H3_CHECK(mask->dim() == 2 && mask->size(0) == q.size(0) && mask->size(1) == k.size(0),
             ErrorCode::kInvalidArgument, "ops::attention: mask ", mask->desc(), " must be [",
             q.size(0), ", ", k.size(0), "]");
  }
  if (!p.cu_seqlens.empty()) {
    H3_CHECK(q.size(0) == k.size(0), ErrorCode::kInvalidArgument,
             "ops::attention: cu_seqlens needs as many queries as keys, got q ", q.desc(), " k ",
             k.desc());
    bool ok = p.cu_seqlens.size() >= 2 && p.cu_seqlens.front() == 0 &&
              p.cu_seqlens.back() == q.size(0);
    for (size_t i = 1; ok && i < p.cu_seqlens.size(); ++i) ok = p.cu_seqlens[i] >= p.cu_seqlens[i - 1];
    H3_CHECK(ok, ErrorCode::kInvalidArgument, "ops::attention: cu_seqlens must rise from 0 to ",
             q.size(0), " (", p.cu_seqlens.size(), " entries given)");
  }
  return dev;
}

}  // namespace

AttentionKernel attention_kernel_for(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const AttentionParams& p, const Tensor* mask) {
  const Device dev = check_attention(q, k, v, p, mask);
  if (dev.is_cuda()) return cuda::attention_kernel_for(q, k, v, p, mask);
  return AttentionKernel::kCpu;
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                 const Tensor* mask) {
  const Device dev = check_attention(q, k, v, p, mask);
  if (dev.is_cuda()) return cuda::attention(q, k, v, p, mask);
  return cpu::attention(q, k, v, p, mask);
}

// ---- normalization ----------------------------------------------------------------------------------

Tensor rms_norm(const Tensor& x, const Tensor* weight, float eps) {
  const Device dev = check_devices("rms_norm", {{"x", &x}, {"weight", weight}});
  check_float("rms_norm", "x", x);
  H3_CHECK(x.dim() >= 1, ErrorCode::kInvalidArgument, "ops::rms_norm: x ", x.desc(), " has no dims");
  check_vector("rms_norm", "weight", weight, x.size(-1));
  if (dev.is_cuda()) return cuda::rms_norm(x, weight, eps);
  return cpu::rms_norm(x, weight, eps);
}

Tensor layer_norm(const Tensor& x, const Tensor* weight, const Tensor* bias, float eps) {
  const Device dev = check_devices("layer_norm", {{"x", &x}, {"weight", weight}, {"bias", bias}});
  check_float("layer_norm", "x", x);
  H3_CHECK(x.dim() >= 1, ErrorCode::kInvalidArgument, "ops::layer_norm: x ", x.desc(), " has no dims");
  check_vector("layer_norm", "weight", weight, x.size(-1));
  check_vector("layer_norm", "bias", bias, x.size(-1));
  if (dev.is_cuda()) return cuda::layer_norm(x, weight, bias, eps);
  return cpu::layer_norm(x, weight, bias, eps);
}

Tensor group_norm(const Tensor& x, int groups, const Tensor* weight, const Tensor* bias, float eps) {
  const Device dev = check_devices("group_norm", {{"x", &x}, {"weight", weight}, {"bias", bias}});
  check_float("group_norm", "x", x);
  H3_CHECK(x.dim() >= 2, ErrorCode::kInvalidArgument, "ops::group_norm: x ", x.desc(),
           " must be [N, C, ...]");
  H3_CHECK(groups > 0 && x.size(1) % groups == 0, ErrorCode::kInvalidArgument,
           "ops::group_norm: ", x.size(1), " channels do not split into ", groups, " groups");
  check_vector("group_norm", "weight", weight, x.size(1));
  check_vector("group_norm", "bias", bias, x.size(1));
  if (dev.is_cuda()) return cuda::group_norm(x, groups, weight, bias, eps);
  return cpu::group_norm(x, groups, weight, bias, eps);
}

Tensor weight_norm(const Tensor& g, const Tensor& v) {
  const Device dev = check_devices("weight_norm", {{"g", &g}, {"v", &v}});
  check_float("weight_norm", "g", g);
  check_float("weight_norm", "v", v);
  H3_CHECK(v.dim() >= 1 && v.size(0) >= 1, ErrorCode::kInvalidArgument, "ops::weight_norm: v ",
           v.desc(), " must be a non-empty tensor");
  H3_CHECK(g.numel() == v.size(0), ErrorCode::kInvalidArgument, "ops::weight_norm: g ", g.desc(),
           " must hold one gain per slice of dim 0 of v ", v.desc());
  if (dev.is_cuda()) return cuda::weight_norm(g, v);
  return cpu::weight_norm(g, v);
}

void weight_norm_into(Tensor& dst, const Tensor& g, const Tensor& v) {
  const Device dev = check_devices("weight_norm_into", {{"dst", &dst}, {"g", &g}, {"v", &v}});
  check_float("weight_norm_into", "g", g);
  check_float("weight_norm_into", "v", v);
  H3_CHECK(v.dim() >= 1 && v.size(0) >= 1, ErrorCode::kInvalidArgument, "ops::weight_norm_into: v ",
           v.desc(), " must be a non-empty tensor");
  H3_CHECK(g.numel() == v.size(0), ErrorCode::kInvalidArgument, "ops::weight_norm_into: g ",
           g.desc(), " must hold one gain per slice of dim 0 of v ", v.desc());
  H3_CHECK(dst.is_contiguous() && dst.dtype() == DType::kF32 && dst.shape() == v.shape(),
           ErrorCode::kInvalidArgument, "ops::weight_norm_into: dst ", dst.desc(),
           " must be contiguous float32 of the shape of v ", v.desc());
  if (dev.is_cuda()) return cuda::weight_norm_into(dst, g, v);
  cpu::weight_norm_into(dst, g, v);
}

// ---- position and modulation -------------------------------------------------------------------------

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int rotary_dim) {
  const Device dev = check_devices("rope", {{"x", &x}, {"cos", &cos}, {"sin", &sin}});
  check_float("rope", "x", x);
  check_float("rope", "cos", cos);
  check_float("rope", "sin", sin);
  check_dims("rope", "x", x, 3);
  H3_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= x.size(2),
           ErrorCode::kInvalidArgument, "ops::rope: rotary_dim ", rotary_dim,
           " must be even, positive and at most the head dim of x ", x.desc());
  for (const Named& a : {Named{"cos", &cos}, Named{"sin", &sin}}) {
    H3_CHECK(a.t->dim() == 2 && a.t->size(0) == x.size(0) && a.t->size(1) == rotary_dim,
             ErrorCode::kInvalidArgument, "ops::rope: ", a.name, " ", a.t->desc(), " must be [",
             x.size(0), ", ", rotary_dim, "]");
  }
  if (dev.is_cuda()) return cuda::rope(x, cos, sin, rotary_dim);
  return cpu::rope(x, cos, sin, rotary_dim);
}

Tensor modulate(const Tensor& x, const Tensor& scale, const Tensor& shift, const Tensor& idx) {
  const Device dev =
      check_devices("modulate", {{"x", &x}, {"scale", &scale}, {"shift", &shift}, {"idx", &idx}});
  check_float("modulate", "x", x);
  check_dims("modulate", "x", x, 2);
  for (const Named& a : {Named{"scale", &scale}, Named{"shift", &shift}}) {
    check_float("modulate", a.name, *a.t);
    H3_CHECK(a.t->dim() == 2 && a.t->size(1) == x.size(1) && a.t->size(0) == scale.size(0),
             ErrorCode::kInvalidArgument, "ops::modulate: ", a.name, " ", a.t->desc(),
             " must be [T, ", x.size(1), "] like scale ", scale.desc());
  }
  check_index("modulate", "idx", idx, x.size(0), scale.size(0));
  if (dev.is_cuda()) return cuda::modulate(x, scale, shift, idx);
  return cpu::modulate(x, scale, shift, idx);
}

Tensor gated_residual(const Tensor& residual, const Tensor& branch, const Tensor& gate,
                      const Tensor& idx) {
  const Device dev = check_devices(
      "gated_residual", {{"residual", &residual}, {"branch", &branch}, {"gate", &gate}, {"idx", &idx}});
  check_float("gated_residual", "residual", residual);
  check_float("gated_residual", "branch", branch);
  check_float("gated_residual", "gate", gate);
  check_dims("gated_residual", "residual", residual, 2);
  H3_CHECK(branch.shape() == residual.shape(), ErrorCode::kInvalidArgument,
           "ops::gated_residual: branch ", branch.desc(), " must match residual ", residual.desc());
  H3_CHECK(gate.dim() == 2 && gate.size(1) == residual.size(1), ErrorCode::kInvalidArgument,
           "ops::gated_residual: gate ", gate.desc(), " must be [T, ", residual.size(1), "]");
  check_index("gated_residual", "idx", idx, residual.size(0), gate.size(0));
  if (dev.is_cuda()) return cuda::gated_residual(residual, branch, gate, idx);
  return cpu::gated_residual(residual, branch, gate, idx);
}

// ---- activations ---------------------------------------------------------------------------------------

Tensor swiglu(const Tensor& x) {
  const Device dev = check_devices("swiglu", {{"x", &x}});
  check_float("swiglu", "x", x);
  H3_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, ErrorCode::kInvalidArgument, "ops::swiglu: x ",
           x.desc(), " must have an even last dim [value | gate]");
  if (dev.is_cuda()) return cuda::swiglu(x);
  return cpu::swiglu(x);
}

Tensor silu(const Tensor& x) {
  const Device dev = check_devices("silu", {{"x", &x}});
  check_float("silu", "x", x);
  if (dev.is_cuda()) return cuda::silu(x);
  return cpu::silu(x);
}

Tensor gelu(const Tensor& x, bool tanh_approx) {
  const Device dev = check_devices("gelu", {{"x", &x}});
  check_float("gelu", "x", x);
  if (dev.is_cuda()) return cuda::gelu(x, tanh_approx);
  return cpu::gelu(x, tanh_approx);
}

Tensor snake(const Tensor& x, const Tensor& alpha) {
  const Device dev = check_devices("snake", {{"x", &x}, {"alpha", &alpha}});
  check_float("snake", "x", x);
  check_dims("snake", "x", x, 3);
  check_vector("snake", "alpha", &alpha, x.size(1));
  if (dev.is_cuda()) return cuda::snake(x, alpha);
  return cpu::snake(x, alpha);
}

Tensor snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta) {
  const Device dev =
      check_devices("snake_beta", {{"x", &x}, {"log_alpha", &log_alpha}, {"log_beta", &log_beta}});
  check_float("snake_beta", "x", x);
  check_dims("snake_beta", "x", x, 3);
  check_vector("snake_beta", "log_alpha", &log_alpha, x.size(1));
  check_vector("snake_beta", "log_beta", &log_beta, x.size(1));
  if (dev.is_cuda()) return cuda::snake_beta(x, log_alpha, log_beta);
  return cpu::snake_beta(x, log_alpha, log_beta);
}

Tensor anti_aliased_snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta,
                               const Tensor& up_filter, const Tensor& down_filter, int ratio) {
  const char* op = "anti_aliased_snake_beta";
  const Device dev = check_devices(op, {{"x", &x},
                                        {"log_alpha", &log_alpha},
                                        {"log_beta", &log_beta},
                                        {"up_filter", &up_filter},
                                        {"down_filter", &down_filter}});
  check_float(op, "x", x);
  check_dims(op, "x", x, 3);
  const int64_t c = x.size(1);
  check_vector(op, "log_alpha", &log_alpha, c);
  check_vector(op, "log_beta", &log_beta, c);
  for (const auto& [name, f] : {std::pair<const char*, const Tensor*>{"up_filter", &up_filter},
                                {"down_filter", &down_filter}}) {
    check_float(op, name, *f);
    H3_CHECK(f->dim() == 3 && f->size(0) == c && f->size(1) == 1 && f->size(2) == up_filter.size(2),
             ErrorCode::kInvalidArgument, "ops::", op, ": ", name, " must be [", c,
             ", 1, K] with K ", "the same for both filters, got ", f->desc());
  }
  H3_CHECK(ratio >= 1 && up_filter.size(2) >= ratio, ErrorCode::kInvalidArgument, "ops::", op,
           ": ratio ", ratio, " must be in [1, K] (K = ", up_filter.size(2), ")");
  H3_CHECK(x.size(2) >= 1, ErrorCode::kInvalidArgument, "ops::", op, ": x ", x.desc(),
           " has no samples");
  if (dev.is_cuda())
    return cuda::anti_aliased_snake_beta(x, log_alpha, log_beta, up_filter, down_filter, ratio);
  return cpu::anti_aliased_snake_beta(x, log_alpha, log_beta, up_filter, down_filter, ratio);
}

// ---- elementwise ----------------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  const Device dev = check_devices("add", {{"a", &a}, {"b", &b}});
  check_float("add", "a", a);
  check_float("add", "b", b);
  check_trailing("add", a, b);
  if (dev.is_cuda()) return cuda::add(a, b);
  return cpu::add(a, b);
}

Tensor mul(const Tensor& a, const Tensor& b) {
  const Device dev = check_devices("mul", {{"a", &a}, {"b", &b}});
  check_float("mul", "a", a);
  check_float("mul", "b", b);
  check_trailing("mul", a, b);
  if (dev.is_cuda()) return cuda::mul(a, b);
  return cpu::mul(a, b);
}

Tensor scale(const Tensor& x, float s) {
  const Device dev = check_devices("scale", {{"x", &x}});
  check_float("scale", "x", x);
  if (dev.is_cuda()) return cuda::scale(x, s);
  return cpu::scale(x, s);
}

void fill_random(Tensor& x, uint64_t seed, float center, float half_width) {
  const Device dev = check_devices("fill_random", {{"x", &x}});
  check_float("fill_random", "x", x);
  H3_CHECK(x.is_contiguous(), ErrorCode::kInvalidArgument, "ops::fill_random: x ", x.desc(),
           " must be contiguous");
  if (dev.is_cuda()) return cuda::fill_random(x, seed, center, half_width);
  cpu::fill_random(x, seed, center, half_width);
}

void fill_random_many(std::vector<Tensor>& xs, const std::vector<RandomFill>& fills) {
  H3_CHECK(xs.size() == fills.size(), ErrorCode::kInvalidArgument, "ops::fill_random_many: ",
           xs.size(), " tensors but ", fills.size(), " fills");
  if (xs.empty()) return;
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string what = "xs[" + std::to_string(i) + "]";
    check_float("fill_random_many", what.c_str(), xs[i]);
    H3_CHECK(xs[i].is_contiguous(), ErrorCode::kInvalidArgument, "ops::fill_random_many: ", what,
             " ", xs[i].desc(), " must be contiguous");
    H3_CHECK(xs[i].device() == xs[0].device(), ErrorCode::kInvalidArgument,
             "ops::fill_random_many: ", what, " is on ", xs[i].device().str(), ", xs[0] on ",
             xs[0].device().str());
  }
  if (xs[0].device().is_cuda()) return cuda::fill_random_many(xs, fills);
  for (size_t i = 0; i < xs.size(); ++i)
    cpu::fill_random(xs[i], fills[i].seed, fills[i].center, fills[i].half_width);
}

Tensor cast(const Tensor& x, DType dtype) {
  const Device dev = check_devices("cast", {{"x", &x}});
  if (dev.is_cuda()) return cuda::cast(x, dtype);
  return cpu::cast(x, dtype);
}

// ---- convolution ----------------------------------------------------------------------------------------

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv1dParams& p) {
  const Device dev = check_devices("conv1d", {{"x", &x}, {"w", &w}, {"bias", bias}});
  check_float("conv1d", "x", x);
  check_float("conv1d", "w", w);
  check_dims("conv1d", "x", x, 3);
  check_dims("conv1d", "w", w, 3);
  H3_CHECK(p.stride > 0 && p.dilation > 0 && p.padding >= 0 && p.groups > 0,
           ErrorCode::kInvalidArgument, "ops::conv1d: stride ", p.stride, ", dilation ", p.dilation,
           ", padding ", p.padding, ", groups ", p.groups, " out of range");
  H3_CHECK(x.size(1) % p.groups == 0 && w.size(0) % p.groups == 0 && w.size(1) * p.groups == x.size(1),
           ErrorCode::kInvalidArgument, "ops::conv1d: x ", x.desc(), " and w ", w.desc(),
           " do not fit groups ", p.groups, " (expected w [Cout, Cin/groups, K])");
  H3_CHECK(x.size(2) + 2 * p.padding >= p.dilation * (w.size(2) - 1) + 1, ErrorCode::kInvalidArgument,
           "ops::conv1d: input length ", x.size(2), " (padding ", p.padding,
           ") is shorter than the dilated kernel of w ", w.desc());
  check_vector("conv1d", "bias", bias, w.size(0));
  if (dev.is_cuda()) return cuda::conv1d(x, w, bias, p);
  if (p.f64_accumulate) return cpu::conv1d_f64(x, w, bias, p);
  return cpu::conv1d(x, w, bias, p);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, int stride,
                        int padding) {
  ConvTranspose1dParams p;
  p.stride = stride;
  p.padding = padding;
  return conv_transpose1d(x, w, bias, p);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias,
                        const ConvTranspose1dParams& p) {
  const Device dev = check_devices("conv_transpose1d", {{"x", &x}, {"w", &w}, {"bias", bias}});
  check_float("conv_transpose1d", "x", x);
  check_float("conv_transpose1d", "w", w);
  check_dims("conv_transpose1d", "x", x, 3);
  check_dims("conv_transpose1d", "w", w, 3);
  H3_CHECK(p.stride > 0 && p.dilation > 0 && p.padding >= 0 && p.groups > 0 &&
               p.output_padding >= 0 && p.output_padding < std::max(p.stride, p.dilation),
           ErrorCode::kInvalidArgument, "ops::conv_transpose1d: stride ", p.stride, ", dilation ",
           p.dilation, ", padding ", p.padding, ", output_padding ", p.output_padding, ", groups ",
           p.groups, " out of range");
  H3_CHECK(x.size(1) == w.size(0) && x.size(1) % p.groups == 0, ErrorCode::kInvalidArgument,
           "ops::conv_transpose1d: x ", x.desc(), " and w ", w.desc(),
           " do not fit (expected w [Cin, Cout/groups, K], groups ", p.groups, ")");
  const int64_t lout = (x.size(2) - 1) * p.stride - 2 * p.padding + p.dilation * (w.size(2) - 1) +
                       p.output_padding + 1;
  H3_CHECK(lout > 0, ErrorCode::kInvalidArgument, "ops::conv_transpose1d: padding ", p.padding,
           " leaves no output for x ", x.desc(), " and w ", w.desc());
  check_vector("conv_transpose1d", "bias", bias, w.size(1) * p.groups);
  if (dev.is_cuda()) return cuda::conv_transpose1d(x, w, bias, p);
  if (p.f64_accumulate) return cpu::conv_transpose1d_f64(x, w, bias, p);
  return cpu::conv_transpose1d(x, w, bias, p);
}

Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv3dParams& p) {
  const Device dev = check_devices("conv3d", {{"x", &x}, {"w", &w}, {"bias", bias}});
  check_float("conv3d", "x", x);
  check_float("conv3d", "w", w);
  check_dims("conv3d", "x", x, 5);
  check_dims("conv3d", "w", w, 5);
  H3_CHECK(x.size(1) == w.size(1), ErrorCode::kInvalidArgument, "ops::conv3d: x ", x.desc(),
           " has ", x.size(1), " channels, w ", w.desc(), " expects ", w.size(1));
  for (int d = 0; d < 3; ++d) {
    H3_CHECK(p.stride[d] > 0 && p.padding[d] >= 0, ErrorCode::kInvalidArgument,
             "ops::conv3d: stride ", p.stride[d], " / padding ", p.padding[d], " of dim ", d,
             " out of range");
    H3_CHECK(x.size(2 + d) + 2 * p.padding[d] >= w.size(2 + d), ErrorCode::kInvalidArgument,
             "ops::conv3d: x ", x.desc(), " (padding ", p.padding[d], ") is smaller than the kernel ",
             w.desc(), " in dim ", 2 + d);
    H3_CHECK(p.pad_mode != PadMode::kReflect || p.padding[d] < x.size(2 + d),
             ErrorCode::kInvalidArgument, "ops::conv3d: reflect padding ", p.padding[d],
             " must be smaller than dim ", 2 + d, " of x ", x.desc());
  }
  check_vector("conv3d", "bias", bias, w.size(0));
  if (dev.is_cuda()) return cuda::conv3d(x, w, bias, p);
  return cpu::conv3d(x, w, bias, p);
}

Tensor pad3d(const Tensor& x, const int pads[6], PadMode mode) {
  const Device dev = check_devices("pad3d", {{"x", &x}});
  H3_CHECK(x.dim() >= 3, ErrorCode::kInvalidArgument, "ops::pad3d: x ", x.desc(),
           " needs at least 3 dims");
  for (int d = 0; d < 3; ++d) {
    const int64_t n = x.size(x.dim() - 3 + d);
    const int a = pads[2 * d], b = pads[2 * d + 1];
    H3_CHECK(n + a + b >= 0 && a >= -n && b >= -n, ErrorCode::kInvalidArgument, "ops::pad3d: pads ",
             a, ", ", b, " of dim ", x.dim() - 3 + d, " do not fit x ", x.desc());
    H3_CHECK(mode != PadMode::kReflect || (a < n && b < n), ErrorCode::kInvalidArgument,
             "ops::pad3d: reflect pads ", a, ", ", b, " must be smaller than dim ",
             x.dim() - 3 + d, " of x ", x.desc());
    H3_CHECK(mode == PadMode::kZeros || n > 0 || (a <= 0 && b <= 0), ErrorCode::kInvalidArgument,
             "ops::pad3d: cannot reflect or replicate an empty dim of x ", x.desc());
  }
  if (dev.is_cuda()) return cuda::pad3d(x, pads, mode);
  return cpu::pad3d(x, pads, mode);
}

// ---- indexing and layout ----------------------------------------------------------------------------------

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  const Device dev = check_devices("gather_rows", {{"x", &x}, {"idx", &idx}});
  H3_CHECK(x.dim() >= 1, ErrorCode::kInvalidArgument, "ops::gather_rows: x ", x.desc(), " has no dims");
  check_index("gather_rows", "idx", idx, -1, x.size(0));
  if (dev.is_cuda()) return cuda::gather_rows(x, idx);
  return cpu::gather_rows(x, idx);
}

void scatter_rows(Tensor& dst, const Tensor& idx, const Tensor& src) {
  const Device dev = check_devices("scatter_rows", {{"dst", &dst}, {"idx", &idx}, {"src", &src}});
  H3_CHECK(dst.dim() >= 1 && dst.is_contiguous(), ErrorCode::kInvalidArgument,
           "ops::scatter_rows: dst ", dst.desc(), " must be contiguous with at least one dim");
  check_index("scatter_rows", "idx", idx, -1, dst.size(0));
  Shape expect = dst.shape();
  expect[0] = idx.size(0);
  H3_CHECK(src.shape() == expect, ErrorCode::kInvalidArgument, "ops::scatter_rows: src ", src.desc(),
           " must be ", shape_str(expect), " for dst ", dst.desc(), " and idx ", idx.desc());
  H3_CHECK(src.dtype() == dst.dtype() || (dtype_is_float(src.dtype()) && dtype_is_float(dst.dtype())),
           ErrorCode::kInvalidArgument, "ops::scatter_rows: src ", src.desc(), " cannot be stored into dst ",
           dst.desc());
  if (dev.is_cuda()) return cuda::scatter_rows(dst, idx, src);
  cpu::scatter_rows(dst, idx, src);
}

Tensor concat(const std::vector<Tensor>& parts, int dim) {
  H3_CHECK(!parts.empty(), ErrorCode::kInvalidArgument, "ops::concat: no tensors given");
  const Tensor& first = parts[0];
  H3_CHECK(first.defined(), ErrorCode::kInvalidArgument, "ops::concat: part 0 is undefined");
  const int nd = first.dim();
  const int d = dim < 0 ? dim + nd : dim;
  H3_CHECK(d >= 0 && d < nd, ErrorCode::kInvalidArgument, "ops::concat: dim ", dim,
           " out of range for ", first.desc());
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = parts[i];
    H3_CHECK(t.defined() && t.device() == first.device() && t.dtype() == first.dtype() &&
                 t.dim() == nd,
             ErrorCode::kInvalidArgument, "ops::concat: part ", i, " ", describe(t),
             " does not match part 0 ", first.desc(), " in device, dtype or rank");
    for (int j = 0; j < nd; ++j) {
      H3_CHECK(j == d || t.size(j) == first.size(j), ErrorCode::kInvalidArgument, "ops::concat: part ",
               i, " ", t.desc(), " differs from part 0 ", first.desc(), " outside dim ", d);
    }
  }
  if (first.device().is_cuda()) return cuda::concat(parts, d);
  return cpu::concat(parts, d);
}

Tensor copy(const Tensor& x) {
  const Device dev = check_devices("copy", {{"x", &x}});
  if (dev.is_cuda()) return cuda::copy(x);
  return cpu::copy(x);
}

void copy_into(Tensor& dst, const Tensor& src) {
  const Device dev = check_devices("copy_into", {{"dst", &dst}, {"src", &src}});
  H3_CHECK(dst.is_contiguous() && dst.shape() == src.shape() && dst.dtype() == src.dtype(),
           ErrorCode::kInvalidArgument, "ops::copy_into: dst ", dst.desc(),
           " must be contiguous with the shape and dtype of src ", src.desc());
  if (dev.is_cuda()) return cuda::copy_into(dst, src);
  cpu::copy_into(dst, src);
}

// The fused ops (rms_norm_modulate, qk_norm_rope) dispatch in ops/cpu/fused.cpp.

}  // namespace h3::ops
