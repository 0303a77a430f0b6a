// Layout ops on CUDA: strided copies (copy, concat), row gather/scatter, and pad3d.
#include <vector>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/elementwise_util.cuh"

namespace h3::ops::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxDims = 8;

struct StridedDesc {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t src_stride[kMaxDims];
  int64_t dst_stride[kMaxDims];
};

// Byte-exact copy of same-dtype elements between two strided views.
template <typename E>
__global__ void copy_same_kernel(const E* src, E* dst, StridedDesc d, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i, so = 0, doff = 0;
    for (int k = d.ndim - 1; k >= 0; --k) {
      const int64_t c = rem % d.shape[k];
      rem /= d.shape[k];
      so += c * d.src_stride[k];
      doff += c * d.dst_stride[k];
    }
    dst[doff] = src[so];
  }
}

// Converting copy (any dtype pair the cast handles).
__global__ void copy_convert_kernel(const void* src, int st_code, void* dst, int dt_code, StridedDesc d,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i, so = 0, doff = 0;
    for (int k = d.ndim - 1; k >= 0; --k) {
      const int64_t c = rem % d.shape[k];
      rem /= d.shape[k];
      so += c * d.src_stride[k];
      doff += c * d.dst_stride[k];
    }
    st_any(dst, dt_code, doff, ld_any(src, st_code, so));
  }
}

template <typename E>
__global__ void gather_rows_kernel(const E* x, IndexPtr idx, int64_t x_rows, E* out, int64_t rows,
                                   int64_t row_elems, int* bad) {
  const int64_t n = rows * row_elems;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / row_elems, c = i - r * row_elems;
    const int64_t src = idx[r];
    if (src < 0 || src >= x_rows) {
      *bad = 1;
      continue;
    }
    out[i] = x[src * row_elems + c];
  }
}

__global__ void scatter_rows_kernel(void* dst, int dt, IndexPtr idx, int64_t dst_rows, const void* src,
                                    int st_code, int64_t rows, int64_t row_elems, int* bad) {
  const int64_t n = rows * row_elems;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / row_elems, c = i - r * row_elems;
    const int64_t d = idx[r];
    if (d < 0 || d >= dst_rows) {
      *bad = 1;
      continue;
    }
    st_any(dst, dt, d * row_elems + c, ld_any(src, st_code, i));
  }
}

__device__ __forceinline__ int64_t pad_source(int64_t o, int64_t before, int64_t size, int mode) {
  int64_t s = o - before;
  if (s >= 0 && s < size) return s;
  if (mode == 0) return -1;  // zeros
  if (mode == 2) return s < 0 ? 0 : size - 1;  // replicate
  // reflect (edge not repeated), as torch's reflect padding; pads are checked to be < size.
  if (s < 0) return -s;
  return 2 * (size - 1) - s;
}

template <typename E>
__global__ void pad3d_kernel(const E* x, E* out, int64_t outer, int64_t t, int64_t h, int64_t w,
                             int64_t ot, int64_t oh, int64_t ow, int64_t pt, int64_t ph, int64_t pw,
                             int mode) {
  const int64_t n = outer * ot * oh * ow;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rem = i;
    const int64_t xw = rem % ow;
    rem /= ow;
    const int64_t xh = rem % oh;
    rem /= oh;
    const int64_t xt = rem % ot;
    const int64_t b = rem / ot;
    const int64_t st = pad_source(xt, pt, t, mode), sh = pad_source(xh, ph, h, mode),
                  sw = pad_source(xw, pw, w, mode);
    out[i] = (st < 0 || sh < 0 || sw < 0) ? E(0) : x[((b * t + st) * h + sh) * w + sw];
  }
}

// Unsigned element types by size: layout ops move bits, never values.
template <typename Fn>
void dispatch_size(size_t bytes, const char* op, Fn&& fn) {
  switch (bytes) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    case 8: fn(uint64_t{}); break;
    default: fail(ErrorCode::kUnsupported, "ops::", op, ": element size ", bytes, " on CUDA");
  }
}

template <typename Launch>
void with_index_check(const char* op, int64_t limit, Device device, Launch&& launch) {
  run_index_checked(op, limit, "rows", device, launch);
}

IndexPtr index_ptr(const Tensor& idx, const char* op) {
  H3_CHECK(idx.dtype() == DType::kI64 || idx.dtype() == DType::kI32, ErrorCode::kInvalidArgument,
           "ops::", op, ": index dtype ", dtype_name(idx.dtype()), " (expected i32 or i64)");
  IndexPtr p;
  p.ptr = idx.raw();
  p.is64 = idx.dtype() == DType::kI64;
  return p;
}

}  // namespace

void copy_strided(const Tensor& dst, const Tensor& src) {
  H3_CHECK(dst.shape() == src.shape(), ErrorCode::kInvalidArgument, "copy: shape ",
           shape_str(src.shape()), " into ", shape_str(dst.shape()));
  H3_CHECK(dst.dim() <= kMaxDims, ErrorCode::kUnsupported, "copy: ", dst.dim(),
           " dims on CUDA (at most ", kMaxDims, ")");
  const int64_t n = dst.numel();
  if (n == 0) return;
  StridedDesc d;
  d.ndim = dst.dim();
  for (int i = 0; i < d.ndim; ++i) {
    d.shape[i] = dst.size(i);
    d.src_stride[i] = src.stride(i);
    d.dst_stride[i] = dst.stride(i);
  }
  if (d.ndim == 0) {
    d.ndim = 1;
    d.shape[0] = 1;
    d.src_stride[0] = d.dst_stride[0] = 1;
  }
  if (dst.dtype() == src.dtype()) {
    dispatch_size(dtype_size(dst.dtype()), "copy", [&](auto tag) {
      using E = decltype(tag);
      copy_same_kernel<E><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
          static_cast<const E*>(src.raw()), static_cast<E*>(dst.raw()), d, n);
    });
  } else {
    H3_CHECK(dtype_code(src.dtype()) >= 0 && dtype_code(dst.dtype()) >= 0, ErrorCode::kUnsupported,
             "copy: ", dtype_name(src.dtype()), " -> ", dtype_name(dst.dtype()), " on CUDA");
    copy_convert_kernel<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        src.raw(), dtype_code(src.dtype()), dst.raw(), dtype_code(dst.dtype()), d, n);
  }
  check_launch("copy");
}

Tensor copy(const Tensor& x) {
  require_cuda(x, "copy", "x");
  set_device_of(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.is_contiguous()) {
    if (out.nbytes()) {
      H3_CUDA_CHECK(cudaMemcpyAsync(out.raw(), x.raw(), out.nbytes(), cudaMemcpyDeviceToDevice,
                                    current_stream()));
    }
    return out;
  }
  copy_strided(out, x);
  return out;
}

void copy_into(Tensor& dst, const Tensor& src) {
  require_cuda(dst, "copy_into", "dst");
  require_cuda(src, "copy_into", "src");
  require_same_device(dst, src, "copy_into");
  set_device_of(dst);
  if (!src.is_contiguous()) return copy_strided(dst, src);
  if (dst.nbytes()) {
    H3_CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.nbytes(), cudaMemcpyDeviceToDevice,
                                  current_stream()));
  }
}

Tensor concat(const std::vector<Tensor>& parts, int dim) {
  H3_CHECK(!parts.empty(), ErrorCode::kInvalidArgument, "ops::concat: no tensors");
  const Tensor& first = parts[0];
  require_cuda(first, "concat", "parts[0]");
  const int nd = first.dim();
  const int d = dim < 0 ? dim + nd : dim;
  H3_CHECK(d >= 0 && d < nd, ErrorCode::kInvalidArgument, "ops::concat: dim ", dim, " for ", nd,
           "-dim tensors");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& p = parts[i];
    require_cuda(p, "concat", "part");
    require_same_device(first, p, "concat");
    bool ok = p.dim() == nd && p.dtype() == first.dtype();
    for (int k = 0; ok && k < nd; ++k) ok = k == d || p.size(k) == first.size(k);
    H3_CHECK(ok, ErrorCode::kInvalidArgument, "ops::concat: part ", i, " ", p.desc(),
             " does not match part 0 ", first.desc(), " outside dim ", d);
    out_shape[d] += p.size(d);
  }
  set_device_of(first);
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  int64_t at = 0;
  for (const Tensor& p : parts) {
    const int64_t len = p.size(d);
    if (len) copy_strided(out.slice(d, at, at + len), p);
    at += len;
  }
  return out;
}

Tensor gather_rows(const Tensor& x_in, const Tensor& idx_in) {
  require_cuda(x_in, "gather_rows", "x");
  require_cuda(idx_in, "gather_rows", "idx");
  require_same_device(x_in, idx_in, "gather_rows");
  H3_CHECK(x_in.dim() >= 1 && idx_in.dim() == 1, ErrorCode::kInvalidArgument,
           "ops::gather_rows: expected x [R, ...] and idx [N], got ", shape_str(x_in.shape()), " and ",
           shape_str(idx_in.shape()));
  set_device_of(x_in);
  const Tensor x = contiguous(x_in), idx = contiguous(idx_in);
  Shape os = x.shape();
  os[0] = idx.size(0);
  Tensor out = Tensor::empty(os, x.dtype(), x.device());
  const int64_t rows = idx.size(0);
  const int64_t row_elems = x.size(0) ? x.numel() / x.size(0) : shape_numel(Shape(os.begin() + 1, os.end()));
  if (out.numel() == 0) return out;
  const IndexPtr ip = index_ptr(idx, "gather_rows");
  with_index_check("gather_rows", x.size(0), x.device(), [&](int* bad) {
    dispatch_size(dtype_size(x.dtype()), "gather_rows", [&](auto tag) {
      using E = decltype(tag);
      gather_rows_kernel<E><<<grid_for(rows * row_elems, kThreads), kThreads, 0, current_stream()>>>(
          static_cast<const E*>(x.raw()), ip, x.size(0), static_cast<E*>(out.raw()), rows, row_elems, bad);
    });
  });
  return out;
}

void scatter_rows(Tensor& dst, const Tensor& idx_in, const Tensor& src_in) {
  require_cuda(dst, "scatter_rows", "dst");
  require_cuda(idx_in, "scatter_rows", "idx");
  require_cuda(src_in, "scatter_rows", "src");
  require_same_device(dst, src_in, "scatter_rows");
  H3_CHECK(dst.is_contiguous(), ErrorCode::kInvalidArgument, "ops::scatter_rows: dst ", dst.desc(),
           " must be contiguous (written in place)");
  H3_CHECK(dst.dim() >= 1 && idx_in.dim() == 1 && src_in.dim() == dst.dim() &&
               src_in.size(0) == idx_in.size(0),
           ErrorCode::kInvalidArgument, "ops::scatter_rows: expected dst [R, ...], idx [N], src [N, ...]; got ",
           shape_str(dst.shape()), ", ", shape_str(idx_in.shape()), ", ", shape_str(src_in.shape()));
  for (int k = 1; k < dst.dim(); ++k) {
    H3_CHECK(src_in.size(k) == dst.size(k), ErrorCode::kInvalidArgument, "ops::scatter_rows: src ",
             shape_str(src_in.shape()), " rows do not match dst ", shape_str(dst.shape()));
  }
  H3_CHECK(dtype_code(dst.dtype()) >= 0 && dtype_code(src_in.dtype()) >= 0, ErrorCode::kUnsupported,
           "ops::scatter_rows: dtypes ", dtype_name(src_in.dtype()), " -> ", dtype_name(dst.dtype()));
  set_device_of(dst);
  const Tensor src = contiguous(src_in), idx = contiguous(idx_in);
  const int64_t rows = idx.size(0);
  const int64_t row_elems = rows ? src.numel() / rows : 0;
  if (rows == 0 || row_elems == 0) return;
  const IndexPtr ip = index_ptr(idx, "scatter_rows");
  with_index_check("scatter_rows", dst.size(0), dst.device(), [&](int* bad) {
    scatter_rows_kernel<<<grid_for(rows * row_elems, kThreads), kThreads, 0, current_stream()>>>(
        dst.raw(), dtype_code(dst.dtype()), ip, dst.size(0), src.raw(), dtype_code(src.dtype()), rows,
        row_elems, bad);
  });
}

Tensor pad3d(const Tensor& x_in, const int pads[6], PadMode mode) {
  require_cuda(x_in, "pad3d", "x");
  H3_CHECK(x_in.dim() >= 3, ErrorCode::kInvalidArgument, "ops::pad3d: x ", shape_str(x_in.shape()),
           " has fewer than 3 dims");
  // A negative pad crops (as torch's F.pad and the CPU op); the output must keep a size >= 0.
  const int64_t t = x_in.size(-3), h = x_in.size(-2), w = x_in.size(-1);
  H3_CHECK(t + pads[0] + pads[1] >= 0 && h + pads[2] + pads[3] >= 0 && w + pads[4] + pads[5] >= 0,
           ErrorCode::kInvalidArgument, "ops::pad3d: pads crop more than the dims of ",
           shape_str(x_in.shape()));
  if (mode == PadMode::kReflect) {
    H3_CHECK(pads[0] < t && pads[1] < t && pads[2] < h && pads[3] < h && pads[4] < w && pads[5] < w,
             ErrorCode::kInvalidArgument, "ops::pad3d: reflect pads must be smaller than the dims of ",
             shape_str(x_in.shape()));
  }
  if (mode == PadMode::kReplicate) {
    H3_CHECK((t > 0 || pads[0] + pads[1] == 0) && (h > 0 || pads[2] + pads[3] == 0) &&
                 (w > 0 || pads[4] + pads[5] == 0),
             ErrorCode::kInvalidArgument, "ops::pad3d: cannot replicate-pad an empty dim of ",
             shape_str(x_in.shape()));
  }
  set_device_of(x_in);
  const Tensor x = contiguous(x_in);
  Shape os = x.shape();
  const int64_t ot = t + pads[0] + pads[1], oh = h + pads[2] + pads[3], ow = w + pads[4] + pads[5];
  os[os.size() - 3] = ot;
  os[os.size() - 2] = oh;
  os[os.size() - 1] = ow;
  Tensor out = Tensor::empty(os, x.dtype(), x.device());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const int64_t outer = n / (ot * oh * ow);
  const int m = mode == PadMode::kZeros ? 0 : mode == PadMode::kReflect ? 1 : 2;
  dispatch_size(dtype_size(x.dtype()), "pad3d", [&](auto tag) {
    using E = decltype(tag);
    pad3d_kernel<E><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<const E*>(x.raw()), static_cast<E*>(out.raw()), outer, t, h, w, ot, oh, ow,
        pads[0], pads[2], pads[4], m);
  });
  check_launch("pad3d");
  return out;
}

}  // namespace h3::ops::cuda
