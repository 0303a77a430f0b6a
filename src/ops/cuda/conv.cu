// Convolutions on CUDA.
// - conv3d (video VAE): padding by pad3d (zeros/reflect/replicate, ops.h), then im2col over
//   bounded chunks of output frames and one cuBLASLt GEMM per chunk (float32 accumulation), bias
//   and the one rounding in the epilogue kernel. A 1x1x1 stride-1 kernel skips the im2col.
// - conv1d (audio VAE): a dense convolution (groups 1) as im2col over bounded chunks of output
//   samples and one cuBLASLt GEMM per chunk (float32 accumulation, no TF32), like conv3d: the
//   audio decoder's AMP blocks are 512-channel convolutions of up to 11 taps, which the direct
//   kernel below ran at a few TFLOP/s. Grouped (the anti-aliasing filters are depthwise, 12 taps)
//   and transposed convolutions keep the direct kernels, one thread per output sample;
//   H3_FUSE_CONV1D_GEMM=0 sends dense ones back to it too.
// - anti_aliased_snake_beta (audio VAE): one kernel for the up-filter, SnakeBeta and down-filter
//   (H3_FUSE_AA_SNAKE=0: the six passes of the composition).
#include <algorithm>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/elementwise_util.cuh"

namespace h3::ops::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kColumnBudgetBytes = 256LL << 20;

struct Conv1dArgs {
  const void* x;
  int xt;
  const void* w;
  int wt;
  const void* b;
  int bt;
  void* out;
  int ot;
  int64_t n, cin, l, cout, k, lout;
  int stride, padding, dilation, groups;
};

__global__ void conv1d_kernel(Conv1dArgs a) {
  const int64_t total = a.n * a.cout * a.lout;
  const int64_t cin_g = a.cin / a.groups, cout_g = a.cout / a.groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t lo = i % a.lout;
    const int64_t co = (i / a.lout) % a.cout;
    const int64_t nb = i / (a.lout * a.cout);
    const int64_t g = co / cout_g;
    float acc = a.b ? ld(a.b, a.bt, co) : 0.0f;
    for (int64_t ci = 0; ci < cin_g; ++ci) {
      const int64_t xrow = (nb * a.cin + g * cin_g + ci) * a.l;
      const int64_t wrow = (co * cin_g + ci) * a.k;
      for (int64_t kk = 0; kk < a.k; ++kk) {
        const int64_t li = lo * a.stride - a.padding + kk * a.dilation;
        if (li < 0 || li >= a.l) continue;
        acc += ld(a.w, a.wt, wrow + kk) * ld(a.x, a.xt, xrow + li);
      }
    }
    st(a.out, a.ot, i, acc);
  }
}

// w [Cin, Cout/groups, K]; out[lo] gathers every (li, k) with li*stride - padding + k*dilation = lo.
__global__ void conv_transpose1d_kernel(Conv1dArgs a) {
  const int64_t total = a.n * a.cout * a.lout;
  const int64_t cin_g = a.cin / a.groups, cout_g = a.cout / a.groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t lo = i % a.lout;
    const int64_t co = (i / a.lout) % a.cout;
    const int64_t nb = i / (a.lout * a.cout);
    const int64_t g = co / cout_g, co_l = co % cout_g;
    float acc = a.b ? ld(a.b, a.bt, co) : 0.0f;
    for (int64_t ci = g * cin_g; ci < (g + 1) * cin_g; ++ci) {
      const int64_t xrow = (nb * a.cin + ci) * a.l;
      const int64_t wrow = (ci * cout_g + co_l) * a.k;
      for (int64_t kk = 0; kk < a.k; ++kk) {
        const int64_t t = lo + a.padding - kk * a.dilation;
        if (t < 0 || t % a.stride != 0) continue;
        const int64_t li = t / a.stride;
        if (li >= a.l) continue;
        acc += ld(a.w, a.wt, wrow + kk) * ld(a.x, a.xt, xrow + li);
      }
    }
    st(a.out, a.ot, i, acc);
  }
}

// col[(ci, a, b, c), (t - t0, h, w)] = x[ci, t*st + a, h*sh + b, w*sw + c] for one batch item of
// an already padded input [Cin, T, H, W].
template <typename E>
__global__ void im2col3d_kernel(const E* x, E* col, int64_t cin, int64_t t_in, int64_t h_in, int64_t w_in,
                                int kt, int kh, int kw, int st, int sh, int sw, int64_t t0, int64_t frames,
                                int64_t ho, int64_t wo) {
  const int64_t cols = frames * ho * wo;
  const int64_t rows = cin * kt * kh * kw;
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t ow = c % wo, oh = (c / wo) % ho, ot = t0 + c / (wo * ho);
    const int64_t kc = r % kw, kb = (r / kw) % kh, ka = (r / (kw * kh)) % kt, ci = r / (kw * kh * kt);
    col[i] = x[((ci * t_in + ot * st + ka) * h_in + oh * sh + kb) * w_in + ow * sw + kc];
  }
}

// col[(ci, kk), c] = x[ci, (l0 + c) * stride - padding + kk * dilation] (zero outside [0, l)) for
// one batch item x [Cin, L]; c in [0, cols).
template <typename E>
__global__ void im2col1d_kernel(const E* x, E* col, int64_t cin, int64_t l, int k, int stride,
                                int padding, int dilation, int64_t l0, int64_t cols) {
  const int64_t n = cin * k * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const int64_t ci = r / k, kk = r - ci * k;
    const int64_t li = (l0 + c) * stride - padding + kk * dilation;
    col[i] = li >= 0 && li < l ? x[ci * l + li] : E(0);
  }
}

void check_float(const Tensor& t, const char* op, const char* name) {
  H3_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16,
           ErrorCode::kUnsupported, "ops::", op, ": ", name, " dtype ", dtype_name(t.dtype()),
           " is not supported on CUDA (expected f32, bf16 or f16)");
}

// out [N, Cout, Lout] = conv1d(x [N, Cin, L], w [Cout, Cin, K]) + bias: per batch item and chunk
// of output samples, im2col then acc[Cout, cols] = W[Cout, Cin*K] x col[Cin*K, cols] in float32,
// then the bias and the one rounding to out's dtype.
void conv1d_gemm(const Tensor& x_in, const Tensor& w_in, const Tensor* bias, int stride,
                 int padding, int dilation, Tensor& out) {
  const int64_t n = x_in.size(0), cin = x_in.size(1), l = x_in.size(2);
  const int64_t cout = w_in.size(0), k = w_in.size(2), lout = out.size(2);
  const DType ct = x_in.dtype() == w_in.dtype() ? x_in.dtype() : DType::kF32;
  const Tensor x = as_dtype(x_in, ct), w = as_dtype(w_in, ct);
  const int64_t ck = cin * k;
  const int64_t es = static_cast<int64_t>(dtype_size(ct));
  const bool pointwise = k == 1 && stride == 1 && padding == 0;
  // Output samples per GEMM: bounded by the column buffer and the float32 result buffer.
  const int64_t per_sample = std::max<int64_t>(1, std::max(pointwise ? 0 : ck * es, cout * 4));
  const int64_t chunk =
      std::max<int64_t>(1, std::min<int64_t>(lout, kColumnBudgetBytes / per_sample));
  Tensor col;
  if (!pointwise) col = Tensor::empty({ck * chunk}, ct, x.device());
  Tensor acc = Tensor::empty({cout * chunk}, DType::kF32, x.device());
  const int64_t oes = static_cast<int64_t>(dtype_size(out.dtype()));
  for (int64_t nb = 0; nb < n; ++nb) {
    const uint8_t* xi = static_cast<const uint8_t*>(x.raw()) + nb * cin * l * es;
    for (int64_t l0 = 0; l0 < lout; l0 += chunk) {
      const int64_t cols = std::min(chunk, lout - l0);
      const void* bptr;
      GemmOperand B;
      if (pointwise) {
        // A 1x1 convolution reads x [Cin, L] as it is: columns l0.. of a row-major [Cin, L].
        bptr = xi + l0 * es;
        B = GemmOperand{bptr, ct, l, false, 0};
      } else {
        const int64_t total = ck * cols;
        if (es == 2) {
          im2col1d_kernel<uint16_t><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
              reinterpret_cast<const uint16_t*>(xi), static_cast<uint16_t*>(col.raw()), cin, l,
              static_cast<int>(k), stride, padding, dilation, l0, cols);
        } else {
          im2col1d_kernel<uint32_t><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
              reinterpret_cast<const uint32_t*>(xi), static_cast<uint32_t*>(col.raw()), cin, l,
              static_cast<int>(k), stride, padding, dilation, l0, cols);
        }
        check_launch("conv1d im2col");
        bptr = col.raw();
        B = GemmOperand{bptr, ct, cols, false, 0};
      }
      const GemmOperand A{w.raw(), ct, ck, false, 0};
      gemm(cout, cols, ck, A, B, acc.raw(), DType::kF32, cols, 0, 1, nullptr, x.device().index);
      void* dst = static_cast<uint8_t*>(out.raw()) + (nb * cout * lout + l0) * oes;
      bias_add_cast(static_cast<const float*>(acc.raw()), cols, bias, true, dst, out.dtype(), lout,
                    cout, cols);
    }
  }
}

Tensor conv1d_common(const Tensor& x_in, const Tensor& w_in, const Tensor* bias, bool transposed,
                     int stride, int padding, int dilation, int groups, int output_padding, const char* op) {
  require_cuda(x_in, op, "x");
  require_cuda(w_in, op, "w");
  require_same_device(x_in, w_in, op);
  check_float(x_in, op, "x");
  check_float(w_in, op, "w");
  H3_CHECK(stride >= 1 && dilation >= 1 && groups >= 1 && padding >= 0 && output_padding >= 0,
           ErrorCode::kInvalidArgument, "ops::", op, ": stride/dilation/groups must be >= 1 and padding >= 0");
  H3_CHECK(x_in.dim() == 3 && w_in.dim() == 3, ErrorCode::kInvalidArgument, "ops::", op,
           ": expected x [N, Cin, L] and a 3-D w; got ", shape_str(x_in.shape()), " and ",
           shape_str(w_in.shape()));
  const int64_t n = x_in.size(0), cin = x_in.size(1), l = x_in.size(2), k = w_in.size(2);
  int64_t cout, lout;
  if (!transposed) {
    cout = w_in.size(0);
    H3_CHECK(cin % groups == 0 && cout % groups == 0 && w_in.size(1) == cin / groups,
             ErrorCode::kInvalidArgument, "ops::", op, ": w ", shape_str(w_in.shape()), " does not match x ",
             shape_str(x_in.shape()), " with ", groups, " groups (expected [Cout, Cin/groups, K])");
    lout = (l + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
  } else {
    H3_CHECK(w_in.size(0) == cin && cin % groups == 0, ErrorCode::kInvalidArgument, "ops::", op, ": w ",
             shape_str(w_in.shape()), " does not match x ", shape_str(x_in.shape()),
             " (expected [Cin, Cout/groups, K])");
    cout = w_in.size(1) * groups;
    lout = (l - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1;
  }
  H3_CHECK(lout >= 0 && (transposed || l + 2 * padding >= dilation * (k - 1) + 1), ErrorCode::kInvalidArgument,
           "ops::", op, ": input length ", l, " is too short for kernel ", k);
  if (bias) {
    require_cuda(*bias, op, "bias");
    check_float(*bias, op, "bias");
    H3_CHECK(bias->numel() == cout, ErrorCode::kInvalidArgument, "ops::", op, ": bias ",
             shape_str(bias->shape()), " does not match ", cout, " output channels");
  }
  set_device_of(x_in);
  const Tensor x = contiguous(x_in), w = contiguous(w_in);
  const Tensor b = bias ? contiguous(*bias) : Tensor();
  Tensor out = Tensor::empty({n, cout, lout}, x.dtype(), x.device());
  const int64_t total = out.numel();
  if (total == 0) return out;
  if (!transposed && groups == 1 && fusion_enabled("CONV1D_GEMM")) {
    conv1d_gemm(x, w, bias ? &b : nullptr, stride, padding, dilation, out);
    return out;
  }
  Conv1dArgs a{x.raw(), dtype_code(x.dtype()), w.raw(), dtype_code(w.dtype()), bias ? b.raw() : nullptr,
               bias ? dtype_code(b.dtype()) : 0, out.raw(), dtype_code(out.dtype()), n, cin, l, cout, k,
               lout, stride, padding, dilation, groups};
  if (transposed) {
    conv_transpose1d_kernel<<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(a);
  } else {
    conv1d_kernel<<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(a);
  }
  check_launch(op);
  return out;
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, const Conv1dParams& p) {
  return conv1d_common(x, w, bias, false, p.stride, p.padding, p.dilation, p.groups, 0, "conv1d");
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, int stride, int padding) {
  return conv1d_common(x, w, bias, true, stride, padding, 1, 1, 0, "conv_transpose1d");
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, const ConvTranspose1dParams& p) {
  return conv1d_common(x, w, bias, true, p.stride, p.padding, p.dilation, p.groups, p.output_padding,
                       "conv_transpose1d");
}

Tensor conv3d(const Tensor& x_in, const Tensor& w_in, const Tensor* bias, const Conv3dParams& p) {
  require_cuda(x_in, "conv3d", "x");
  require_cuda(w_in, "conv3d", "w");
  require_same_device(x_in, w_in, "conv3d");
  check_float(x_in, "conv3d", "x");
  check_float(w_in, "conv3d", "w");
  H3_CHECK(x_in.dim() == 5 && w_in.dim() == 5 && w_in.size(1) == x_in.size(1), ErrorCode::kInvalidArgument,
           "ops::conv3d: expected x [N, Cin, T, H, W] and w [Cout, Cin, kT, kH, kW]; got ",
           shape_str(x_in.shape()), " and ", shape_str(w_in.shape()));
  for (int d = 0; d < 3; ++d) {
    H3_CHECK(p.stride[d] >= 1 && p.padding[d] >= 0, ErrorCode::kInvalidArgument,
             "ops::conv3d: stride must be >= 1 and padding >= 0");
  }
  const int64_t n = x_in.size(0), cin = x_in.size(1), cout = w_in.size(0);
  const int kt = static_cast<int>(w_in.size(2)), kh = static_cast<int>(w_in.size(3)),
            kw = static_cast<int>(w_in.size(4));
  if (bias) {
    require_cuda(*bias, "conv3d", "bias");
    check_float(*bias, "conv3d", "bias");
    H3_CHECK(bias->numel() == cout, ErrorCode::kInvalidArgument, "ops::conv3d: bias ",
             shape_str(bias->shape()), " does not match ", cout, " output channels");
  }
  set_device_of(x_in);
  Tensor x = contiguous(x_in);
  if (p.padding[0] || p.padding[1] || p.padding[2]) {
    const int pads[6] = {p.padding[0], p.padding[0], p.padding[1], p.padding[1], p.padding[2], p.padding[2]};
    x = cuda::pad3d(x, pads, p.pad_mode);
  }
  const int64_t t_in = x.size(2), h_in = x.size(3), w_sz = x.size(4);
  H3_CHECK(t_in >= kt && h_in >= kh && w_sz >= kw, ErrorCode::kInvalidArgument, "ops::conv3d: input ",
           shape_str(x_in.shape()), " (padded) is smaller than the kernel ", shape_str(w_in.shape()));
  const int64_t to = (t_in - kt) / p.stride[0] + 1, ho = (h_in - kh) / p.stride[1] + 1,
                wo = (w_sz - kw) / p.stride[2] + 1;
  Tensor out = Tensor::empty({n, cout, to, ho, wo}, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  const DType ct = x.dtype() == w_in.dtype() ? x.dtype() : DType::kF32;
  if (x.dtype() != ct) x = cast(x, ct);
  const Tensor w = as_dtype(w_in, ct);
  const int64_t ck = cin * kt * kh * kw;
  const int64_t plane = ho * wo;
  const int64_t out_cols = to * plane;
  const bool pointwise = kt == 1 && kh == 1 && kw == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.stride[2] == 1;
  const int64_t es = static_cast<int64_t>(dtype_size(ct));
  // Output frames per GEMM: bounded by the column buffer and the float32 result buffer.
  const int64_t col_bytes_per_frame = pointwise ? 0 : ck * plane * es;
  const int64_t acc_bytes_per_frame = cout * plane * 4;
  const int64_t per_frame = std::max<int64_t>(1, std::max(col_bytes_per_frame, acc_bytes_per_frame));
  const int64_t frames_per_chunk = std::max<int64_t>(1, std::min<int64_t>(to, kColumnBudgetBytes / per_frame));
  Tensor col;
  if (!pointwise) col = Tensor::empty({ck * frames_per_chunk * plane}, ct, x.device());
  Tensor acc = Tensor::empty({cout * frames_per_chunk * plane}, DType::kF32, x.device());
  const int64_t in_item = cin * t_in * h_in * w_sz;
  for (int64_t nb = 0; nb < n; ++nb) {
    for (int64_t t0 = 0; t0 < to; t0 += frames_per_chunk) {
      const int64_t frames = std::min(frames_per_chunk, to - t0);
      const int64_t cols = frames * plane;
      const void* bptr;
      if (pointwise) {
        bptr = static_cast<const uint8_t*>(x.raw()) + (nb * in_item + t0 * plane) * es;
      } else {
        const int64_t total = ck * cols;
        switch (es) {
          case 2:
            im2col3d_kernel<uint16_t><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
                static_cast<const uint16_t*>(x.raw()) + nb * in_item, static_cast<uint16_t*>(col.raw()), cin,
                t_in, h_in, w_sz, kt, kh, kw, p.stride[0], p.stride[1], p.stride[2], t0, frames, ho, wo);
            break;
          default:
            im2col3d_kernel<uint32_t><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
                static_cast<const uint32_t*>(x.raw()) + nb * in_item, static_cast<uint32_t*>(col.raw()), cin,
                t_in, h_in, w_sz, kt, kh, kw, p.stride[0], p.stride[1], p.stride[2], t0, frames, ho, wo);
            break;
        }
        check_launch("conv3d im2col");
        bptr = col.raw();
      }
      // acc[Cout, cols] = W[Cout, CK] x col[CK, cols]
      const GemmOperand A{w.raw(), ct, ck, false, 0};
      const GemmOperand B{bptr, ct, pointwise ? out_cols : cols, false, 0};
      gemm(cout, cols, ck, A, B, acc.raw(), DType::kF32, cols, 0, 1, nullptr, x.device().index);
      void* dst = static_cast<uint8_t*>(out.raw()) +
                  (nb * cout * out_cols + t0 * plane) * static_cast<int64_t>(dtype_size(out.dtype()));
      bias_add_cast(static_cast<const float*>(acc.raw()), cols, bias, true, dst, out.dtype(), out_cols, cout,
                    cols);
    }
  }
  return out;
}

namespace {

// Outputs per block of the one-pass anti-aliased SnakeBeta (one thread each).
constexpr int kAaTile = 256;

__device__ __forceinline__ int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// One block: kAaTile outputs j0.. of one row (batch item, channel) of x [rows, L] (float32).
// Stages the replicate-padded inputs the block's up-filter taps reach, then the SnakeBeta of every
// 2x sample its down-filter taps reach (replicate padding as clamped positions), in shared
// memory; each sample is computed once, in float32.
__global__ void anti_aliased_snake_beta_kernel(
    const float* __restrict__ x, const float* __restrict__ log_alpha,
    const float* __restrict__ log_beta, const float* __restrict__ up,
    const float* __restrict__ down, float* __restrict__ out, int64_t rows, int64_t c, int64_t l,
    int k, int r, int64_t pad, int64_t crop, int64_t left, int ns, int nx) {
  extern __shared__ float shared[];
  float* xs = shared;       // padded inputs ilo.. (nx at most)
  float* ss = shared + nx;  // SnakeBeta at 2x positions q0.. (ns)
  const int64_t lu = r * l, lp = l + 2 * pad;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kAaTile;
  const int64_t q0 = r * j0 - left;
  const int64_t mlo = max(q0, int64_t{0}), mhi = min(q0 + ns - 1, lu - 1);
  const int64_t ilo = max(int64_t{0}, floor_div(mlo + crop - k + r, r));
  const int64_t ihi = min(lp - 1, (mhi + crop) / r);
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const int64_t ch = row % c;
    const float* xr = x + row * l;
    const float* fu = up + ch * k;
    const float* fd = down + ch * k;
    for (int64_t i = threadIdx.x; i <= ihi - ilo; i += blockDim.x)
      xs[i] = xr[min(max(ilo + i - pad, int64_t{0}), l - 1)];
    __syncthreads();
    const float alpha = expf(log_alpha[ch]);
    const float inv = 1.0f / (expf(log_beta[ch]) + 1e-9f);
    for (int idx = threadIdx.x; idx < ns; idx += blockDim.x) {
      const int64_t m = min(max(q0 + idx, int64_t{0}), lu - 1), t = m + crop;
      const int64_t i1 = min(lp - 1, t / r);
      float u = 0.0f;
      for (int64_t i = max(int64_t{0}, floor_div(t - k + r, r)); i <= i1; ++i)
        u += xs[i - ilo] * fu[t - r * i];
      const float sn = sinf(alpha * u);
      ss[idx] = u + inv * sn * sn;
    }
    __syncthreads();
    const int64_t j = j0 + threadIdx.x;
    if (j < l) {
      float acc = 0.0f;
      for (int kk = 0; kk < k; ++kk) acc += ss[r * static_cast<int>(threadIdx.x) + kk] * fd[kk];
      out[row * l + j] = acc;
    }
    __syncthreads();  // the next row overwrites xs and ss
  }
}

}  // namespace

// Float32 operands (the audio VAE's) take the one-pass kernel; other dtypes, and every call with
// H3_FUSE_AA_SNAKE=0, the composition ops.h defines it by, one kernel per pass.
Tensor anti_aliased_snake_beta(const Tensor& x, const Tensor& log_alpha, const Tensor& log_beta,
                               const Tensor& up_filter, const Tensor& down_filter, int ratio) {
  const int64_t n = x.size(0), c = x.size(1), l = x.size(2), k = up_filter.size(2), r = ratio;
  const int pad = static_cast<int>(k / r - 1);
  const int64_t crop = pad * r + (k - r) / 2;
  const int left = static_cast<int>(k / 2 - (k % 2 == 0 ? 1 : 0)), right = static_cast<int>(k / 2);
  bool all_f32 = true;
  for (const Tensor* t : {&x, &log_alpha, &log_beta, &up_filter, &down_filter}) {
    require_cuda(*t, "anti_aliased_snake_beta", "operand");
    all_f32 = all_f32 && t->dtype() == DType::kF32;
  }
  if (all_f32 && fusion_enabled("AA_SNAKE")) {
    set_device_of(x);
    Tensor out = Tensor::empty({n, c, l}, DType::kF32, x.device());
    if (out.numel() == 0) return out;
    auto dense = [](const Tensor& t) { return t.is_contiguous() ? t : cuda::copy(t); };
    const Tensor xc = dense(x), ac = dense(log_alpha), bc = dense(log_beta);
    const Tensor uc = dense(up_filter), dc = dense(down_filter);
    const int ns = static_cast<int>(r * (kAaTile - 1) + k);
    const int nx = (ns - 1 + static_cast<int>(k) - 1) / static_cast<int>(r) + 2;
    const size_t smem = static_cast<size_t>(ns + nx) * sizeof(float);
    // (2 x 255 + K) + about half that, in floats: 3 KiB for the decoder's K = 12 at ratio 2.
    H3_CHECK(smem <= 48 * 1024, ErrorCode::kUnsupported, "ops::anti_aliased_snake_beta: K ", k,
             " at ratio ", ratio, " needs ", smem,
             " bytes of shared memory per block (48 KiB at most)");
    const dim3 grid(static_cast<unsigned>((l + kAaTile - 1) / kAaTile),
                    static_cast<unsigned>(std::min<int64_t>(n * c, 65535)));
    anti_aliased_snake_beta_kernel<<<grid, kAaTile, smem, current_stream()>>>(
        static_cast<const float*>(xc.raw()), static_cast<const float*>(ac.raw()),
        static_cast<const float*>(bc.raw()), static_cast<const float*>(uc.raw()),
        static_cast<const float*>(dc.raw()), static_cast<float*>(out.raw()), n * c, c, l,
        static_cast<int>(k), ratio, pad, crop, left, ns, nx);
    check_launch("anti_aliased_snake_beta");
    return out;
  }
  const int groups = static_cast<int>(c);
  const int pads_up[6] = {0, 0, 0, 0, pad, pad};
  ConvTranspose1dParams up;
  up.stride = ratio;
  up.groups = groups;
  Tensor h =
      cuda::conv_transpose1d(cuda::pad3d(x, pads_up, PadMode::kReplicate), up_filter, nullptr, up);
  h = cuda::snake_beta(cuda::copy(h.slice(2, crop, crop + r * l)), log_alpha, log_beta);
  const int pads_down[6] = {0, 0, 0, 0, left, right};
  return cuda::conv1d(cuda::pad3d(h, pads_down, PadMode::kReplicate), down_filter, nullptr,
                      {.stride = ratio, .padding = 0, .dilation = 1, .groups = groups});
}

}  // namespace h3::ops::cuda
