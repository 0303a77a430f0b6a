// Element-wise and row-indexed CUDA ops: activations, add/mul/scale, cast, modulate, gated
// residual, RoPE, snake activations, and the bias + rounding epilogue used by GEMM and conv.
//
// Each kernel loads every operand widened to float32, computes in float32 and rounds once on the
// store, the CPU oracle's dtype rule (ops.h). Secondary operands may have any float dtype; their
// loads switch on a kernel-uniform dtype code (no divergence, a few instructions per element).
#include <climits>
#include <cmath>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/elementwise_util.cuh"
#include "ops/random_fill.h"

namespace h3::ops::cuda {

namespace {

constexpr int kThreads = 256;

// ---- kernels ---------------------------------------------------------------------------------

enum class Unary : int { kSilu, kGelu, kGeluTanh, kScale };

__global__ void unary_kernel(const void* x, int xt, void* out, int ot, int64_t n, Unary op, float s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = ld(x, xt, i);
    float r;
    switch (op) {
      case Unary::kSilu: r = silu_f(v); break;
      case Unary::kGelu: r = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
      case Unary::kGeluTanh: {
        const float k = 0.7978845608028654f;  // sqrt(2/pi)
        r = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
        break;
      }
      default: r = v * s; break;
    }
    st(out, ot, i, r);
  }
}

enum class Binary : int { kAdd, kMul };

// b repeats every bn elements (broadcast over a's leading dims).
__global__ void binary_kernel(const void* a, int at, const void* b, int bt, int64_t bn, void* out,
                              int ot, int64_t n, Binary op) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float va = ld(a, at, i);
    const float vb = ld(b, bt, i % bn);
    st(out, ot, i, op == Binary::kAdd ? va + vb : va * vb);
  }
}

// Any-to-any conversion through double (integers, f64) or float (the three float types).
__global__ void cast_kernel(const void* x, int xt, void* out, int ot, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (xt <= kCodeF16 && ot <= kCodeF16) {
      st(out, ot, i, ld(x, xt, i));
    } else {
      st_any(out, ot, i, ld_any(x, xt, i));
    }
  }
}

// swiglu: x [rows, 2F] = [value | gate] -> value * silu(gate) [rows, F].
__global__ void swiglu_kernel(const void* x, int xt, void* out, int ot, int64_t rows, int64_t f) {
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, c = i - r * f;
    const float v = ld(x, xt, r * 2 * f + c);
    const float g = ld(x, xt, r * 2 * f + f + c);
    st(out, ot, i, v * silu_f(g));
  }
}

// swiglu_kernel eight outputs per thread (vec8_ok tensors, F % 8 == 0).
__global__ void swiglu_vec8_kernel(const void* x, int xt, void* out, int ot, int64_t rows,
                                   int64_t f) {
  const int64_t n = rows * (f / 8);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / (f / 8), c = (i - r * (f / 8)) * 8;
    float v[8], g[8];
    ld8(x, xt, r * 2 * f + c, v);
    ld8(x, xt, r * 2 * f + f + c, g);
    for (int k = 0; k < 8; ++k) v[k] *= silu_f(g[k]);
    st8(out, ot, r * f + c, v);
  }
}

__global__ void fill_random_kernel(void* out, int ot, int64_t n, uint64_t seed, float center,
                                   float half_width) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    st(out, ot, i, random_fill_value(seed, static_cast<uint64_t>(i), center, half_width));
}

// One tensor of fill_random_many: its blocks are [first_block, first_block + its block count).
struct FillDesc {
  void* out;
  int64_t n;
  uint64_t seed;
  float center, half_width;
  int dtype;
  int64_t first_block;
};
constexpr int kFillPerThread = 8;

// Each block finds its tensor (the last whose first block is at or before it) and fills its
// slice with the values fill_random_kernel gives the same indices.
__global__ void fill_random_many_kernel(const FillDesc* d, int count) {
  int lo = 0, hi = count - 1;
  const int64_t b = blockIdx.x;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (d[mid].first_block <= b) lo = mid; else hi = mid - 1;
  }
  const FillDesc t = d[lo];
  const int64_t chunk = static_cast<int64_t>(blockDim.x) * kFillPerThread;
  const int64_t begin = (b - t.first_block) * chunk, end = min(t.n, begin + chunk);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    st(t.out, t.dtype, i, random_fill_value(t.seed, static_cast<uint64_t>(i), t.center, t.half_width));
}

// out[r, c] = x[r, c] * (1 + scale[idx[r], c]) + shift[idx[r], c]
__global__ void modulate_kernel(const void* x, int xt, const void* sc, int sct, const void* sh,
                                int sht, IndexPtr idx, int64_t tables, void* out, int ot,
                                int64_t rows, int64_t c, int* bad) {
  const int64_t n = rows * c;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / c, col = i - r * c;
    const int64_t t = idx[r];
    if (t < 0 || t >= tables) {
      *bad = 1;
      continue;
    }
    const float v = ld(x, xt, i);
    st(out, ot, i, v * (1.0f + ld(sc, sct, t * c + col)) + ld(sh, sht, t * c + col));
  }
}

// out[r] = residual[r] + gate[idx[r]] * branch[r]
__global__ void gated_residual_kernel(const void* res, int rt, const void* br, int bt, const void* g,
                                      int gt, IndexPtr idx, int64_t tables, void* out, int ot,
                                      int64_t rows, int64_t c, int* bad) {
  const int64_t n = rows * c;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / c, col = i - r * c;
    const int64_t t = idx[r];
    if (t < 0 || t >= tables) {
      *bad = 1;
      continue;
    }
    st(out, ot, i, ld(res, rt, i) + ld(g, gt, t * c + col) * ld(br, bt, i));
  }
}

// gated_residual_kernel eight values per thread (vec8_ok tensors, C % 8 == 0).
__global__ void gated_residual_vec8_kernel(const void* res, int rt, const void* br, int bt,
                                           const void* g, int gt, IndexPtr idx, int64_t tables,
                                           void* out, int ot, int64_t rows, int64_t c, int* bad) {
  const int64_t n = rows * (c / 8);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / (c / 8), col = (i - r * (c / 8)) * 8;
    const int64_t t = idx[r];
    if (t < 0 || t >= tables) {
      *bad = 1;
      continue;
    }
    float rv[8], bv[8], gv[8];
    ld8(res, rt, r * c + col, rv);
    ld8(br, bt, r * c + col, bv);
    ld8(g, gt, t * c + col, gv);
    gated_add8(rv, gv, bv);
    st8(out, ot, r * c + col, rv);
  }
}

// Rotate-half RoPE on the first `rot` channels of x [S, H, D]; cos/sin [S, rot].
__global__ void rope_kernel(const void* x, int xt, const void* cs, int cst, const void* sn, int snt,
                            void* out, int ot, int64_t s_len, int64_t h, int64_t d, int64_t rot) {
  const int64_t n = s_len * h * d;
  const int64_t half = rot / 2;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % d;
    const int64_t s = i / (h * d);
    const float v = ld(x, xt, i);
    float r = v;
    if (c < half) {
      r = v * ld(cs, cst, s * rot + c) - ld(x, xt, i + half) * ld(sn, snt, s * rot + c);
    } else if (c < rot) {
      r = v * ld(cs, cst, s * rot + c) + ld(x, xt, i - half) * ld(sn, snt, s * rot + c);
    }
    st(out, ot, i, r);
  }
}

// snake over x [N, C, L] with per-channel parameters (beta_mode: exp of log parameters).
__global__ void snake_kernel(const void* x, int xt, const void* a, int at, const void* b, int bt,
                             bool beta_mode, void* out, int ot, int64_t n, int64_t c, int64_t l) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = (i / l) % c;
    const float v = ld(x, xt, i);
    float alpha, beta;
    if (beta_mode) {
      alpha = expf(ld(a, at, ch));
      beta = expf(ld(b, bt, ch));
    } else {
      alpha = ld(a, at, ch);
      beta = alpha;
    }
    const float s = sinf(alpha * v);
    st(out, ot, i, v + (1.0f / (beta + 1e-9f)) * s * s);
  }
}

__global__ void bias_add_cast_kernel(const float* in, int64_t in_ld, const void* bias, int bt,
                                     bool per_row, void* out, int ot, int64_t out_ld, int64_t rows,
                                     int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    float v = in[r * in_ld + c];
    if (bias) v += ld(bias, bt, per_row ? r : c);
    st(out, ot, r * out_ld + c, v);
  }
}

// ---- host helpers ---------------------------------------------------------------------------------

void check_float(const Tensor& t, const char* op, const char* name) {
  H3_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16,
           ErrorCode::kUnsupported, "ops::", op, ": ", name, " dtype ", dtype_name(t.dtype()),
           " is not supported on CUDA (expected f32, bf16 or f16)");
}

Tensor unary(const Tensor& x_in, Unary op, float s, const char* name) {
  require_cuda(x_in, name, "x");
  check_float(x_in, name, "x");
  set_device_of(x_in);
  const Tensor x = contiguous(x_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  unary_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      x.raw(), dtype_code(x.dtype()), out.raw(), dtype_code(out.dtype()), n, op, s);
  check_launch(name);
  return out;
}

Tensor binary(const Tensor& a_in, const Tensor& b_in, Binary op, const char* name) {
  require_cuda(a_in, name, "a");
  require_cuda(b_in, name, "b");
  require_same_device(a_in, b_in, name);
  check_float(a_in, name, "a");
  check_float(b_in, name, "b");
  // b's shape must equal the trailing dims of a's (broadcast over a's leading dims).
  bool ok = b_in.dim() <= a_in.dim();
  for (int i = 1; ok && i <= b_in.dim(); ++i) ok = b_in.size(-i) == a_in.size(-i);
  H3_CHECK(ok, ErrorCode::kInvalidArgument, "ops::", name, ": b ", shape_str(b_in.shape()),
           " does not broadcast over the leading dims of a ", shape_str(a_in.shape()));
  set_device_of(a_in);
  const Tensor a = contiguous(a_in), b = contiguous(b_in);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.numel();
  if (n == 0) return out;
  binary_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      a.raw(), dtype_code(a.dtype()), b.raw(), dtype_code(b.dtype()), b.numel(), out.raw(),
      dtype_code(out.dtype()), n, op);
  check_launch(name);
  return out;
}

IndexPtr index_ptr(const Tensor& idx, const char* op) {
  H3_CHECK(idx.dtype() == DType::kI64 || idx.dtype() == DType::kI32, ErrorCode::kInvalidArgument,
           "ops::", op, ": index dtype ", dtype_name(idx.dtype()), " (expected i32 or i64)");
  IndexPtr p;
  p.ptr = idx.raw();
  p.is64 = idx.dtype() == DType::kI64;
  return p;
}

template <typename Launch>
void with_index_check(const char* op, int64_t tables, Device device, Launch&& launch) {
  run_index_checked(op, tables, "table rows", device, launch);
}

}  // namespace

// ---- ops ------------------------------------------------------------------------------------------

Tensor silu(const Tensor& x) { return unary(x, Unary::kSilu, 0.0f, "silu"); }
Tensor gelu(const Tensor& x, bool tanh_approx) {
  return unary(x, tanh_approx ? Unary::kGeluTanh : Unary::kGelu, 0.0f, "gelu");
}
Tensor scale(const Tensor& x, float s) { return unary(x, Unary::kScale, s, "scale"); }

void fill_random(Tensor& x, uint64_t seed, float center, float half_width) {
  require_cuda(x, "fill_random", "x");
  check_float(x, "fill_random", "x");
  set_device_of(x);
  const int64_t n = x.numel();
  if (n == 0) return;
  fill_random_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      x.raw(), dtype_code(x.dtype()), n, seed, center, half_width);
  check_launch("fill_random");
}
void fill_random_many(std::vector<Tensor>& xs, const std::vector<RandomFill>& fills) {
  std::vector<FillDesc> descs;
  int64_t blocks = 0;
  const int64_t chunk = int64_t{kThreads} * kFillPerThread;
  for (size_t i = 0; i < xs.size(); ++i) {
    require_cuda(xs[i], "fill_random_many", "xs");
    const int64_t n = xs[i].numel();
    if (n == 0) continue;
    descs.push_back({xs[i].raw(), n, fills[i].seed, fills[i].center, fills[i].half_width,
                     dtype_code(xs[i].dtype()), blocks});
    blocks += (n + chunk - 1) / chunk;
  }
  if (descs.empty()) return;
  H3_CHECK(blocks <= INT32_MAX, ErrorCode::kUnsupported, "ops::fill_random_many: ", blocks,
           " blocks are more than one launch takes; fill the largest tensors on their own");
  set_device_of(xs[0]);
  // The table goes over with the launch's stream order; the pageable source is staged by the
  // copy before it returns, so the vector may go when this function does.
  Tensor table = Tensor::empty({static_cast<int64_t>(descs.size() * sizeof(FillDesc))}, DType::kU8,
                               xs[0].device());
  H3_CUDA_CHECK(cudaMemcpyAsync(table.raw(), descs.data(), descs.size() * sizeof(FillDesc),
                                cudaMemcpyHostToDevice, current_stream()));
  fill_random_many_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, current_stream()>>>(
      static_cast<const FillDesc*>(table.raw()), static_cast<int>(descs.size()));
  check_launch("fill_random_many");
}
Tensor add(const Tensor& a, const Tensor& b) { return binary(a, b, Binary::kAdd, "add"); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(a, b, Binary::kMul, "mul"); }

Tensor cast(const Tensor& x_in, DType dtype) {
  require_cuda(x_in, "cast", "x");
  H3_CHECK(dtype_code(x_in.dtype()) >= 0 && dtype_code(dtype) >= 0, ErrorCode::kUnsupported,
           "ops::cast: ", dtype_name(x_in.dtype()), " -> ", dtype_name(dtype),
           " is not supported on CUDA");
  set_device_of(x_in);
  const Tensor x = contiguous(x_in);
  // Same dtype: still a fresh tensor, so that writing the result never touches the input.
  if (x.dtype() == dtype) return x.storage() == x_in.storage() ? copy(x) : x;
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  cast_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      x.raw(), dtype_code(x.dtype()), out.raw(), dtype_code(dtype), n);
  check_launch("cast");
  return out;
}

Tensor swiglu(const Tensor& x_in) {
  require_cuda(x_in, "swiglu", "x");
  check_float(x_in, "swiglu", "x");
  H3_CHECK(x_in.dim() >= 1 && x_in.size(-1) % 2 == 0, ErrorCode::kInvalidArgument,
           "ops::swiglu: last dim of ", shape_str(x_in.shape()), " must be even ([value | gate])");
  set_device_of(x_in);
  const Tensor x = contiguous(x_in);
  const int64_t f = x.size(-1) / 2;
  Shape os = x.shape();
  os.back() = f;
  if (!fusion_enabled("SWIGLU")) {
    // Plain path: silu of the gate half, then the product, each op rounding (as torch eager).
    const Tensor value = x.slice(-1, 0, f);
    const Tensor gate = x.slice(-1, f, 2 * f);
    return mul(copy(value), silu(copy(gate)));
  }
  Tensor out = Tensor::empty(os, x.dtype(), x.device());
  const int64_t rows = f ? out.numel() / f : 0;
  if (out.numel() == 0) return out;
  if (f % 8 == 0 && vec8_ok(x) && vec8_ok(out)) {
    swiglu_vec8_kernel<<<grid_for(out.numel() / 8, kThreads), kThreads, 0, current_stream()>>>(
        x.raw(), dtype_code(x.dtype()), out.raw(), dtype_code(out.dtype()), rows, f);
  } else {
    swiglu_kernel<<<grid_for(out.numel(), kThreads), kThreads, 0, current_stream()>>>(
        x.raw(), dtype_code(x.dtype()), out.raw(), dtype_code(out.dtype()), rows, f);
  }
  check_launch("swiglu");
  return out;
}

Tensor modulate(const Tensor& x_in, const Tensor& scale_in, const Tensor& shift_in,
                const Tensor& idx_in) {
  for (const Tensor* t : {&x_in, &scale_in, &shift_in, &idx_in}) require_cuda(*t, "modulate", "input");
  check_float(x_in, "modulate", "x");
  check_float(scale_in, "modulate", "scale");
  check_float(shift_in, "modulate", "shift");
  H3_CHECK(x_in.dim() == 2 && scale_in.dim() == 2 && shift_in.shape() == scale_in.shape() &&
               scale_in.size(1) == x_in.size(1) && idx_in.numel() == x_in.size(0),
           ErrorCode::kInvalidArgument, "ops::modulate: expected x [S, C], scale/shift [T, C], idx [S]; got x ",
           shape_str(x_in.shape()), ", scale ", shape_str(scale_in.shape()), ", shift ",
           shape_str(shift_in.shape()), ", idx ", shape_str(idx_in.shape()));
  set_device_of(x_in);
  const Tensor x = contiguous(x_in), sc = contiguous(scale_in), sh = contiguous(shift_in),
               idx = contiguous(idx_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t rows = x.size(0), c = x.size(1), tables = sc.size(0);
  if (out.numel() == 0) return out;
  const IndexPtr ip = index_ptr(idx, "modulate");
  with_index_check("modulate", tables, x.device(), [&](int* bad) {
    modulate_kernel<<<grid_for(rows * c, kThreads), kThreads, 0, current_stream()>>>(
        x.raw(), dtype_code(x.dtype()), sc.raw(), dtype_code(sc.dtype()), sh.raw(),
        dtype_code(sh.dtype()), ip, tables, out.raw(), dtype_code(out.dtype()), rows, c, bad);
  });
  return out;
}

Tensor gated_residual(const Tensor& res_in, const Tensor& branch_in, const Tensor& gate_in,
                      const Tensor& idx_in) {
  for (const Tensor* t : {&res_in, &branch_in, &gate_in, &idx_in}) {
    require_cuda(*t, "gated_residual", "input");
  }
  check_float(res_in, "gated_residual", "residual");
  check_float(branch_in, "gated_residual", "branch");
  check_float(gate_in, "gated_residual", "gate");
  H3_CHECK(res_in.dim() == 2 && branch_in.shape() == res_in.shape() && gate_in.dim() == 2 &&
               gate_in.size(1) == res_in.size(1) && idx_in.numel() == res_in.size(0),
           ErrorCode::kInvalidArgument,
           "ops::gated_residual: expected residual/branch [S, C], gate [T, C], idx [S]; got ",
           shape_str(res_in.shape()), ", ", shape_str(branch_in.shape()), ", ",
           shape_str(gate_in.shape()), ", ", shape_str(idx_in.shape()));
  set_device_of(res_in);
  const Tensor res = contiguous(res_in), br = contiguous(branch_in), g = contiguous(gate_in),
               idx = contiguous(idx_in);
  const int64_t rows = res.size(0), c = res.size(1), tables = g.size(0);
  if (!fusion_enabled("GATED_RESIDUAL")) {
    // Plain path: gather the gate rows, multiply, add (three rounding points, as torch eager).
    return add(res, mul(br, gather_rows(g, idx)).view(res.shape()));
  }
  Tensor out = Tensor::empty(res.shape(), res.dtype(), res.device());
  if (out.numel() == 0) return out;
  const IndexPtr ip = index_ptr(idx, "gated_residual");
  const bool vec = c % 8 == 0 && vec8_ok(res) && vec8_ok(br) && vec8_ok(g) && vec8_ok(out);
  with_index_check("gated_residual", tables, res.device(), [&](int* bad) {
    if (vec) {
      gated_residual_vec8_kernel<<<grid_for(rows * c / 8, kThreads), kThreads, 0,
                                   current_stream()>>>(
          res.raw(), dtype_code(res.dtype()), br.raw(), dtype_code(br.dtype()), g.raw(),
          dtype_code(g.dtype()), ip, tables, out.raw(), dtype_code(out.dtype()), rows, c, bad);
    } else {
      gated_residual_kernel<<<grid_for(rows * c, kThreads), kThreads, 0, current_stream()>>>(
          res.raw(), dtype_code(res.dtype()), br.raw(), dtype_code(br.dtype()), g.raw(),
          dtype_code(g.dtype()), ip, tables, out.raw(), dtype_code(out.dtype()), rows, c, bad);
    }
  });
  return out;
}

Tensor rope(const Tensor& x_in, const Tensor& cos_in, const Tensor& sin_in, int rotary_dim) {
  for (const Tensor* t : {&x_in, &cos_in, &sin_in}) require_cuda(*t, "rope", "input");
  check_float(x_in, "rope", "x");
  check_float(cos_in, "rope", "cos");
  check_float(sin_in, "rope", "sin");
  H3_CHECK(x_in.dim() == 3 && rotary_dim >= 0 && rotary_dim % 2 == 0 && rotary_dim <= x_in.size(2) &&
               cos_in.numel() == x_in.size(0) * rotary_dim && sin_in.numel() == cos_in.numel(),
           ErrorCode::kInvalidArgument, "ops::rope: expected x [S, H, D], cos/sin [S, ", rotary_dim,
           "] with an even rotary_dim <= D; got x ", shape_str(x_in.shape()), ", cos ",
           shape_str(cos_in.shape()), ", sin ", shape_str(sin_in.shape()));
  set_device_of(x_in);
  const Tensor x = contiguous(x_in), cs = contiguous(cos_in), sn = contiguous(sin_in);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  rope_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      x.raw(), dtype_code(x.dtype()), cs.raw(), dtype_code(cs.dtype()), sn.raw(),
      dtype_code(sn.dtype()), out.raw(), dtype_code(out.dtype()), x.size(0), x.size(1), x.size(2),
      rotary_dim);
  check_launch("rope");
  return out;
}

static Tensor snake_impl(const Tensor& x_in, const Tensor& a_in, const Tensor* b_in, const char* op) {
  require_cuda(x_in, op, "x");
  require_cuda(a_in, op, "alpha");
  check_float(x_in, op, "x");
  check_float(a_in, op, "alpha");
  H3_CHECK(x_in.dim() == 3 && a_in.numel() == x_in.size(1) && (!b_in || b_in->numel() == x_in.size(1)),
           ErrorCode::kInvalidArgument, "ops::", op, ": expected x [N, C, L] and parameters [C]; got x ",
           shape_str(x_in.shape()), ", parameter ", shape_str(a_in.shape()));
  set_device_of(x_in);
  const Tensor x = contiguous(x_in), a = contiguous(a_in);
  const Tensor b = b_in ? contiguous(*b_in) : a;
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  snake_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      x.raw(), dtype_code(x.dtype()), a.raw(), dtype_code(a.dtype()), b.raw(), dtype_code(b.dtype()),
      b_in != nullptr, out.raw(), dtype_code(out.dtype()), n, x.size(1), x.size(2));
  check_launch(op);
  return out;
}

Tensor snake(const Tensor& x, const Tensor& alpha) { return snake_impl(x, alpha, nullptr, "snake"); }
Tensor snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta) {
  require_cuda(log_beta, "snake_beta", "log_beta");
  check_float(log_beta, "snake_beta", "log_beta");
  return snake_impl(x, log_alpha, &log_beta, "snake_beta");
}

void bias_add_cast(const float* in, int64_t in_ld, const Tensor* bias, bool per_row, void* out,
                   DType out_dtype, int64_t out_ld, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  Tensor b;
  if (bias) {
    check_float(*bias, "bias", "bias");
    b = contiguous(*bias);
  }
  bias_add_cast_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
      in, in_ld, bias ? b.raw() : nullptr, bias ? dtype_code(b.dtype()) : 0, per_row, out,
      dtype_code(out_dtype), out_ld, rows, cols);
  check_launch("bias_add_cast");
}

}  // namespace h3::ops::cuda
