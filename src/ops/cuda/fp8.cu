// FP8 (E4M3) quantization kernels and the FP8 linear layer on CUDA, with the semantics of
// ops/fp8.h. Every scale is the IEEE float32 quotient amax / 448 and every element the IEEE
// quotient x / scale rounded to nearest even, so a CUDA quantization is bit for bit the CPU's;
// the GEMM then differs from the CPU oracle only by the order of float32 accumulation.
#include <cuda_fp8.h>

#include <climits>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/elementwise_util.cuh"
#include "ops/cuda/fp8_cuda.h"
#include "ops/cuda/fp8_util.cuh"

namespace h3::ops::cuda {

namespace {

constexpr int kThreads = 256;

// The block's NaN-propagating maximum of v (every thread gets it).
__device__ float block_amax(float v) {
  __shared__ float partial[kThreads / 32];
  __shared__ float result;
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = partial[0];
    for (int w = 1; w < kThreads / 32; ++w) m = nan_max(m, partial[w]);
    result = m;
  }
  __syncthreads();
  const float r = result;
  __syncthreads();  // `partial` may be reused by a later call
  return r;
}

// Records the smallest flat index of a non-finite weight (weights must be finite).
__device__ __forceinline__ void note_bad(unsigned long long* bad, int64_t i, float v) {
  if (bad && !isfinite(v)) atomicMin(bad, static_cast<unsigned long long>(i));
}

// One block per row of x [rows, k]: the row's scale (its own amax, or the tensor's when
// `global_amax` is given), then its E4M3 values (q), their float32 value (fq), or both.
__global__ void quantize_rows_kernel(const void* x, int xt, int64_t k, const unsigned* global_amax,
                                     uint8_t* q, float* scale, float* fq, unsigned long long* bad) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * k;
  float amax;
  if (global_amax) {
    amax = __uint_as_float(*global_amax);
  } else {
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < k; i += kThreads) {
      const float v = ld(x, xt, base + i);
      note_bad(bad, base + i, v);
      m = nan_max(m, fabsf(v));
    }
    amax = block_amax(m);
  }
  const float s = scale_of(amax);
  if (scale && threadIdx.x == 0) scale[blockIdx.x] = s;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) {
    const uint8_t e = to_e4m3(__fdiv_rn(ld(x, xt, base + i), s));
    if (q) q[base + i] = e;
    if (fq) fq[base + i] = isfinite(s) ? __fmul_rn(from_e4m3(e), s) : __int_as_float(0x7fffffff);
  }
}

// Per-group activations (ops/fp8.h): one block per row of the padded rows [m4, k], each warp
// one run of 128 columns at a time (lane l takes columns l, l + 32, l + 64 and l + 96, so a warp's
// loads are coalesced) with the run's own amax and scale. Rows from m on are the padding that
// cuBLASLt's block scaling wants (a multiple of 4 rows): zero values, scale 1. The arithmetic is
// quantize_rows_kernel's over a run instead of a row, so the bits are the CPU's.
__global__ void quantize_groups_kernel(const void* x, int xt, int64_t m, int64_t m4, int64_t k,
                                       uint8_t* q, float* scale, float* fq) {
  const int64_t row = blockIdx.x, groups = (k + 127) / 128;
  const int lane = threadIdx.x & 31;
  for (int64_t g = threadIdx.x >> 5; g < groups; g += kThreads / 32) {
    float v[4], a = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = g * 128 + lane + 32 * j;
      v[j] = row < m && c < k ? ld(x, xt, row * k + c) : 0.0f;
      a = nan_max(a, fabsf(v[j]));
    }
    for (int o = 16; o > 0; o >>= 1) a = nan_max(a, __shfl_xor_sync(0xffffffffu, a, o));
    const float s = scale_of(a);
    if (scale && lane == 0) scale[g * m4 + row] = s;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t c = g * 128 + lane + 32 * j;
      if (c >= k) continue;
      const uint8_t e = to_e4m3(__fdiv_rn(v[j], s));
      if (q) q[row * k + c] = e;
      if (fq && row < m)
        fq[row * k + c] = isfinite(s) ? __fmul_rn(from_e4m3(e), s) : __int_as_float(0x7fffffff);
    }
  }
}

// The float32 values of per-group E4M3 rows: out [m, k] from q [m4, k] and scale [groups, m4].
__global__ void dequantize_groups_kernel(const uint8_t* q, const float* scale, int64_t m,
                                         int64_t m4, int64_t k, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < m * k;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / k, c = i - r * k;
    out[i] = __fmul_rn(from_e4m3(q[i]), scale[(c / 128) * m4 + r]);
  }
}

// Two 16-bit values as floats (exact for both formats).
__device__ __forceinline__ float2 pair_to_float2(const __nv_bfloat162& h) { return __bfloat1622float2(h); }
__device__ __forceinline__ float2 pair_to_float2(const __half2& h) { return __half22float2(h); }
// Eight 16-bit values of one 16-byte word as floats, in memory order.
template <typename Pair>
__device__ __forceinline__ void unpack8(const uint4& u, float v[8]) {
  const Pair* h = reinterpret_cast<const Pair*>(&u);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = pair_to_float2(h[j]);
    v[2 * j] = f.x;
    v[2 * j + 1] = f.y;
  }
}

// quantize_rows_kernel for 16-bit (bf16: the DiT; f16: the video VAE's autocast decoder)
// activations per token with k % 8 == 0 on 16-byte aligned rows: eight values per load and eight
// E4M3 bytes per store. The arithmetic is the same, value for value (amax, scale, IEEE division,
// rounding), so are the bits; the scalar kernel's loads and byte stores made it several times
// slower than the memory it moves. Pair: __nv_bfloat162 or __half2.
template <typename Pair>
__global__ void quantize_rows_x8_kernel(const void* x, int64_t k, uint8_t* q, float* scale) {
  const int64_t row = blockIdx.x, nv = k / 8;
  const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + row * k);
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < nv; i += kThreads) {
    float v[8];
    unpack8<Pair>(xr[i], v);
#pragma unroll
    for (int j = 0; j < 8; ++j) m = nan_max(m, fabsf(v[j]));
  }
  const float s = scale_of(block_amax(m));
  if (threadIdx.x == 0) scale[row] = s;
  uint2* qr = reinterpret_cast<uint2*>(q + row * k);
  for (int64_t i = threadIdx.x; i < nv; i += kThreads) {
    float v[8];
    unpack8<Pair>(xr[i], v);  // the row again, from L1/L2: the first pass brought it in
    qr[i] = e4m3x8(v, s);
  }
}

// quantize_groups_kernel for 16-bit rows with k % 128 == 0 on 16-byte aligned rows: eight values
// per load and eight E4M3 bytes per store, the 16 threads holding one run of 128 columns sharing
// its amax (e4m3x8_group). The same values, amax, scale and rounding, so the same bits.
template <typename Pair>
__global__ void quantize_groups_x8_kernel(const void* x, int64_t m, int64_t m4, int64_t k,
                                          uint8_t* q, float* scale) {
  const int64_t row = blockIdx.x, nv = k / 8;
  const int lane = threadIdx.x & 31;
  const uint4* xr = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + row * k);
  uint2* qr = reinterpret_cast<uint2*>(q + row * k);
  for (int64_t i = threadIdx.x; i < nv; i += kThreads) {
    float v[8] = {};
    if (row < m) unpack8<Pair>(xr[i], v);  // rows from m on are padding: zeros, scale 1
    qr[i] = e4m3x8_group(v, lane, &scale[(8 * i / 128) * m4 + row]);
  }
}

// swiglu_fp8 for 16-bit u [rows, 2F] = [value | gate], F % 8 == 0, 16-byte aligned: one block per
// row. The products are rounded to u's dtype exactly as swiglu_vec8_kernel stores them, kept in
// shared memory (F values), and quantized as quantize_rows_x8_kernel quantizes swiglu's output:
// the same amax, scale and E4M3 bits, without writing the product and reading it back.
template <typename Pair>
__global__ void swiglu_quantize_rows_kernel(const void* u, int code, int64_t f, uint8_t* q,
                                            float* scale) {
  extern __shared__ uint4 products[];  // F / 8 groups of eight 16-bit values
  const int64_t row = blockIdx.x, nv = f / 8;
  const void* ur = static_cast<const uint16_t*>(u) + row * 2 * f;
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < nv; i += kThreads) {
    float v[8], g[8];
    ld8(ur, code, 8 * i, v);
    ld8(ur, code, f + 8 * i, g);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] *= silu_f(g[j]);
    st8(&products[i], code, 0, v);
    ld8(&products[i], code, 0, v);  // the stored (rounded) values, which are what gets quantized
#pragma unroll
    for (int j = 0; j < 8; ++j) m = nan_max(m, fabsf(v[j]));
  }
  const float s = scale_of(block_amax(m));  // block_amax's barriers also publish `products`
  if (threadIdx.x == 0) scale[row] = s;
  uint2* qr = reinterpret_cast<uint2*>(q + row * f);
  for (int64_t i = threadIdx.x; i < nv; i += kThreads) {
    float v[8];
    unpack8<Pair>(products[i], v);
    qr[i] = e4m3x8(v, s);
  }
}

// swiglu_quantize_rows_kernel per group (F % 128 == 0): in each pass the 16 threads holding one
// run of 128 products share its amax (e4m3x8_group), so the products need no shared memory. The
// products are rounded to u's dtype as swiglu_vec8_kernel stores them. Rows from m to m4 are the
// padding cuBLASLt's block scaling wants (zero bytes, scale 1); scale is [F / 128, m4].
__global__ void swiglu_quantize_groups_kernel(const void* u, int code, int64_t m, int64_t m4,
                                              int64_t f, uint8_t* q, float* scale) {
  const int64_t row = blockIdx.x, nv = f / 8;
  const int lane = threadIdx.x & 31;
  const void* ur = static_cast<const uint16_t*>(u) + row * 2 * f;
  uint2* qr = reinterpret_cast<uint2*>(q + row * f);
  for (int64_t i = threadIdx.x; i < nv; i += kThreads) {
    float v[8] = {};
    if (row < m) {
      float g[8];
      ld8(ur, code, 8 * i, v);
      ld8(ur, code, f + 8 * i, g);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] *= silu_f(g[j]);
      round8(code, v);
    }
    qr[i] = e4m3x8_group(v, lane, &scale[(8 * i / 128) * m4 + row]);
  }
}

// Shared memory a swiglu_quantize_rows_kernel block may take without opting in to more.
constexpr int64_t kSwigluFp8MaxSmem = 48 * 1024;

// amax over all of x into *out (float bits; |x| is non-negative, so its bits order as its
// values, and a NaN's bits sort above infinity's: NaN wins here too). *out starts at 0.
__global__ void amax_all_kernel(const void* x, int xt, int64_t n, unsigned* out) {
  float m = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    m = nan_max(m, fabsf(ld(x, xt, i)));
  m = block_amax(m);
  if (threadIdx.x == 0) atomicMax(out, isnan(m) ? 0x7fffffffu : __float_as_uint(m));
}

// One block per 128 x 128 block of w [n, k] (grid: k blocks x n blocks).
__global__ void quantize_blocks_kernel(const void* w, int wt, int64_t n, int64_t k, uint8_t* q,
                                       float* scale, unsigned long long* bad) {
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 128,
                c0 = static_cast<int64_t>(blockIdx.x) * 128;
  const int64_t rows = n - r0 < 128 ? n - r0 : 128, cols = k - c0 < 128 ? k - c0 : 128;
  float m = 0.0f;
  for (int64_t t = threadIdx.x; t < rows * cols; t += kThreads) {
    const int64_t i = (r0 + t / cols) * k + c0 + t % cols;
    const float v = ld(w, wt, i);
    note_bad(bad, i, v);
    m = nan_max(m, fabsf(v));
  }
  const float s = scale_of(block_amax(m));
  if (threadIdx.x == 0) scale[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = s;
  for (int64_t t = threadIdx.x; t < rows * cols; t += kThreads) {
    const int64_t i = (r0 + t / cols) * k + c0 + t % cols;
    q[i] = to_e4m3(__fdiv_rn(ld(w, wt, i), s));
  }
}

__global__ void dequantize_kernel(const uint8_t* q, const float* scale, int64_t n, int64_t k,
                                  bool per_block, void* out, int ot) {
  const int64_t kb = (k + 127) / 128;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n * k;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / k, c = i - r * k;
    const float s = per_block ? scale[(r / 128) * kb + c / 128] : scale[r];
    st(out, ot, i, __fmul_rn(from_e4m3(q[i]), s));
  }
}

void require_float(const Tensor& t, const char* op, const char* name) {
  H3_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16 || t.dtype() == DType::kF16,
           ErrorCode::kUnsupported, "ops::", op, ": ", name, " dtype ", dtype_name(t.dtype()),
           " is not supported on CUDA (expected f32, bf16 or f16)");
}

}  // namespace

bool quantizes_vectorized(const Tensor& x, Fp8ActScaling act) {
  if (act == Fp8ActScaling::kPerTensor || x.dim() < 1) return false;
  // Per group, a run of 128 columns is one half warp's sixteen loads.
  const int64_t multiple = act == Fp8ActScaling::kPerGroup ? 128 : 8;
  return (x.dtype() == DType::kBF16 || x.dtype() == DType::kF16) && x.size(-1) % multiple == 0 &&
         x.is_contiguous() && reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0 &&
         fusion_enabled("FP8_QUANT_VEC");
}

namespace {

// Quantizes the rows of x [rows, k] (contiguous, on the current device): per row, or with one
// scale for the whole tensor (then `scale` still gets one entry per row, all the same, which is
// what the GEMM's per-token scale vector wants).
void quantize_rows(const Tensor& x, int64_t rows, int64_t k, Fp8ActScaling act, uint8_t* q,
                   float* scale, float* fq) {
  if (rows == 0) return;
  H3_CHECK(rows <= 0x7fffffff, ErrorCode::kUnsupported, "ops::fp8: ", rows,
           " rows exceed one launch");
  Tensor amax;
  if (act == Fp8ActScaling::kPerTensor) {
    amax = Tensor::zeros({1}, DType::kI32, x.device());
    amax_all_kernel<<<grid_for(rows * k, kThreads, 1024), kThreads, 0, current_stream()>>>(
        x.raw(), dtype_code(x.dtype()), rows * k, static_cast<unsigned*>(amax.raw()));
    check_launch("fp8 amax");
  }
  const bool vec = q && scale && !fq && reinterpret_cast<uintptr_t>(q) % 8 == 0 &&
                   quantizes_vectorized(x, act);
  if (vec && x.dtype() == DType::kBF16) {
    quantize_rows_x8_kernel<__nv_bfloat162>
        <<<static_cast<unsigned>(rows), kThreads, 0, current_stream()>>>(x.raw(), k, q, scale);
  } else if (vec) {
    quantize_rows_x8_kernel<__half2>
        <<<static_cast<unsigned>(rows), kThreads, 0, current_stream()>>>(x.raw(), k, q, scale);
  } else {
    quantize_rows_kernel<<<static_cast<unsigned>(rows), kThreads, 0, current_stream()>>>(
        x.raw(), dtype_code(x.dtype()), k,
        amax.defined() ? static_cast<unsigned*>(amax.raw()) : nullptr, q, scale, fq, nullptr);
  }
  check_launch("fp8 quantize rows");
}

// Rows padded to what cuBLASLt's 128-element block scaling takes.
int64_t group_rows(int64_t m) { return (m + 3) / 4 * 4; }

// Quantizes x [m, k] (contiguous, on the current device) per group into q [m4, k] and scale
// [groups, m4], and/or its float32 values into fq [m, k].
void quantize_groups(const Tensor& x, int64_t m, int64_t m4, int64_t k, uint8_t* q, float* scale,
                     float* fq) {
  if (m4 == 0 || k == 0) return;
  H3_CHECK(m4 <= 0x7fffffff, ErrorCode::kUnsupported, "ops::fp8: ", m4, " rows exceed one launch");
  const unsigned grid = static_cast<unsigned>(m4);
  const bool vec = q && scale && !fq && reinterpret_cast<uintptr_t>(q) % 8 == 0 &&
                   quantizes_vectorized(x, Fp8ActScaling::kPerGroup);
  if (vec && x.dtype() == DType::kBF16) {
    quantize_groups_x8_kernel<__nv_bfloat162>
        <<<grid, kThreads, 0, current_stream()>>>(x.raw(), m, m4, k, q, scale);
  } else if (vec) {
    quantize_groups_x8_kernel<__half2>
        <<<grid, kThreads, 0, current_stream()>>>(x.raw(), m, m4, k, q, scale);
  } else {
    quantize_groups_kernel<<<grid, kThreads, 0, current_stream()>>>(x.raw(), dtype_code(x.dtype()),
                                                                    m, m4, k, q, scale, fq);
  }
  check_launch("fp8 quantize groups");
}

}  // namespace

bool linear_fp8_uses_tensor_cores(int64_t n, int64_t k, Fp8WeightScaling scaling,
                                  Fp8ActScaling act) {
  const bool pairing = scaling == Fp8WeightScaling::kPerChannel ? act != Fp8ActScaling::kPerGroup
                                                                : act == Fp8ActScaling::kPerGroup;
  return pairing && k > 0 && k % 16 == 0 && n % 8 == 0;
}

Fp8Weight quantize_weight_fp8(const Tensor& w_in, Fp8WeightScaling scaling) {
  require_cuda(w_in, "quantize_weight_fp8", "w");
  require_float(w_in, "quantize_weight_fp8", "w");
  H3_CHECK(w_in.dim() == 2, ErrorCode::kInvalidArgument,
           "ops::quantize_weight_fp8: w must be a float [N, K] tensor, got ", w_in.desc());
  set_device_of(w_in);
  const Tensor w = contiguous(w_in);
  const int64_t n = w.size(0), k = w.size(1), nb = (n + 127) / 128, kb = (k + 127) / 128;
  Fp8Weight out;
  out.scaling = scaling;
  out.data = Tensor::empty({n, k}, DType::kF8E4M3, w.device());
  out.scale = scaling == Fp8WeightScaling::kPerChannel
                  ? Tensor::empty({n}, DType::kF32, w.device())
                  : Tensor::empty({nb, kb}, DType::kF32, w.device());
  if (n == 0) return out;
  if (k == 0) {
    // No values: every group's scale is 1, as on the CPU.
    const std::vector<float> ones(static_cast<size_t>(out.scale.numel()), 1.0f);
    cuda::copy_into(out.scale, Tensor::from_f32(ones, out.scale.shape()).to(w.device()));
    return out;
  }
  // A non-finite weight would make its whole channel or block NaN: found on the device, refused
  // here with its index (one 8-byte read-back; quantizing happens once, at load).
  Tensor bad = Tensor::empty({1}, DType::kI64, w.device());
  const unsigned long long none = ULLONG_MAX;
  H3_CUDA_CHECK(
      cudaMemcpyAsync(bad.raw(), &none, sizeof(none), cudaMemcpyHostToDevice, current_stream()));
  auto* bad_ptr = static_cast<unsigned long long*>(bad.raw());
  auto* q = static_cast<uint8_t*>(out.data.raw());
  auto* s = static_cast<float*>(out.scale.raw());
  if (scaling == Fp8WeightScaling::kPerChannel) {
    H3_CHECK(n <= 0x7fffffff, ErrorCode::kUnsupported, "ops::quantize_weight_fp8: ", n,
             " channels exceed one launch");
    quantize_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, current_stream()>>>(
        w.raw(), dtype_code(w.dtype()), k, nullptr, q, s, nullptr, bad_ptr);
  } else {
    H3_CHECK(nb <= 65535 && kb <= 0x7fffffff, ErrorCode::kUnsupported,
             "ops::quantize_weight_fp8: ", shape_str(w.shape()),
             " has too many 128-blocks for one launch");
    quantize_blocks_kernel<<<dim3(static_cast<unsigned>(kb), static_cast<unsigned>(nb)), kThreads,
                             0, current_stream()>>>(w.raw(), dtype_code(w.dtype()), n, k, q, s,
                                                    bad_ptr);
  }
  check_launch("quantize_weight_fp8");
  unsigned long long first = 0;
  H3_CUDA_CHECK(
      cudaMemcpyAsync(&first, bad.raw(), sizeof(first), cudaMemcpyDeviceToHost, current_stream()));
  H3_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  H3_CHECK(first == none, ErrorCode::kInvalidArgument, "ops::quantize_weight_fp8: w ", w.desc(),
           " holds a non-finite value at [", static_cast<int64_t>(first) / k, ", ",
           static_cast<int64_t>(first) % k, "] (FP8 weights need finite values)");
  return out;
}

Tensor dequantize_weight_fp8(const Fp8Weight& w, DType dtype) {
  require_cuda(w.data, "dequantize_weight_fp8", "w.data");
  require_cuda(w.scale, "dequantize_weight_fp8", "w.scale");
  require_same_device(w.data, w.scale, "dequantize_weight_fp8");
  H3_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
           ErrorCode::kUnsupported, "ops::dequantize_weight_fp8: output dtype ", dtype_name(dtype),
           " on CUDA (expected f32, bf16 or f16)");
  set_device_of(w.data);
  const Tensor q = contiguous(w.data), s = contiguous(w.scale);
  const int64_t n = q.size(0), k = q.size(1);
  Tensor out = Tensor::empty({n, k}, dtype, q.device());
  if (out.numel() == 0) return out;
  dequantize_kernel<<<grid_for(n * k, kThreads), kThreads, 0, current_stream()>>>(
      static_cast<const uint8_t*>(q.raw()), static_cast<const float*>(s.raw()), n, k,
      w.scaling == Fp8WeightScaling::kPerBlock, out.raw(), dtype_code(dtype));
  check_launch("dequantize_weight_fp8");
  return out;
}

Tensor fake_quantize_activation_fp8(const Tensor& x_in, Fp8ActScaling act) {
  require_cuda(x_in, "fake_quantize_activation_fp8", "x");
  require_float(x_in, "fake_quantize_activation_fp8", "x");
  set_device_of(x_in);
  const Tensor x = contiguous(x_in);
  const int64_t k = x.size(-1), rows = k ? x.numel() / k : 0;
  Tensor out = Tensor::empty(x.shape(), DType::kF32, x.device());
  if (act == Fp8ActScaling::kPerGroup)
    quantize_groups(x, rows, rows, k, nullptr, nullptr, static_cast<float*>(out.raw()));
  else
    quantize_rows(x, rows, k, act, nullptr, nullptr, static_cast<float*>(out.raw()));
  return out;
}

Fp8Activation empty_fp8_rows(int64_t rows, int64_t cols, const Shape& shape, DType dtype,
                             Device device) {
  Fp8Activation out;
  out.data = Tensor::empty({rows, cols}, DType::kF8E4M3, device);
  out.scale = Tensor::empty({rows}, DType::kF32, device);
  out.shape = shape;
  out.dtype = dtype;
  return out;
}

Fp8Activation empty_fp8_groups(int64_t rows, int64_t cols, const Shape& shape, DType dtype,
                               Device device) {
  const int64_t m4 = group_rows(rows);
  Fp8Activation out;
  out.data = Tensor::empty({m4, cols}, DType::kF8E4M3, device);
  out.scale = Tensor::empty({(cols + 127) / 128, m4}, DType::kF32, device);
  out.shape = shape;
  out.dtype = dtype;
  out.scaling = Fp8ActScaling::kPerGroup;
  return out;
}

Fp8Activation quantize_activation_fp8(const Tensor& x_in, Fp8ActScaling act) {
  require_cuda(x_in, "quantize_activation_fp8", "x");
  require_float(x_in, "quantize_activation_fp8", "x");
  set_device_of(x_in);
  const Tensor x = contiguous(x_in);
  // Rows from the leading dimensions, so that K = 0 keeps them (the output is then the bias).
  const int64_t k = x.size(-1);
  int64_t m = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  if (act == Fp8ActScaling::kPerGroup) {
    Fp8Activation out = empty_fp8_groups(m, k, x.shape(), x.dtype(), x.device());
    quantize_groups(x, m, out.data.size(0), k, static_cast<uint8_t*>(out.data.raw()),
                    static_cast<float*>(out.scale.raw()), nullptr);
    return out;
  }
  Fp8Activation out = empty_fp8_rows(m, k, x.shape(), x.dtype(), x.device());
  out.scaling = act;
  quantize_rows(x, m, k, act, static_cast<uint8_t*>(out.data.raw()),
                static_cast<float*>(out.scale.raw()), nullptr);
  return out;
}

bool swiglu_fp8_fused(const Tensor& u, Fp8ActScaling act) {
  if (act == Fp8ActScaling::kPerTensor || (u.dtype() != DType::kBF16 && u.dtype() != DType::kF16))
    return false;
  if (u.dim() < 1 || u.size(-1) % 16 != 0 || !u.is_contiguous()) return false;
  const int64_t f = u.size(-1) / 2;
  // Per token a row's products wait in shared memory for the row's amax; per group they do not.
  const bool fits = act == Fp8ActScaling::kPerToken ? f * 2 <= kSwigluFp8MaxSmem : f % 128 == 0;
  return f > 0 && fits && reinterpret_cast<uintptr_t>(u.raw()) % 16 == 0 &&
         fusion_enabled("SWIGLU") && fusion_enabled("FP8_SWIGLU");
}

Fp8Activation swiglu_fp8(const Tensor& u_in, Fp8ActScaling act) {
  require_cuda(u_in, "swiglu_fp8", "u");
  require_float(u_in, "swiglu_fp8", "u");
  set_device_of(u_in);
  const Tensor u = contiguous(u_in);
  if (!swiglu_fp8_fused(u, act)) return cuda::quantize_activation_fp8(cuda::swiglu(u), act);
  const int64_t f = u.size(-1) / 2;
  int64_t m = 1;
  for (int d = 0; d + 1 < u.dim(); ++d) m *= u.size(d);
  Shape shape = u.shape();
  shape.back() = f;
  if (act == Fp8ActScaling::kPerGroup) {
    Fp8Activation out = empty_fp8_groups(m, f, shape, u.dtype(), u.device());
    const int64_t m4 = out.data.size(0);
    if (m4 == 0) return out;
    H3_CHECK(m4 <= 0x7fffffff, ErrorCode::kUnsupported, "ops::swiglu_fp8: ", m4,
             " rows exceed one launch");
    swiglu_quantize_groups_kernel<<<static_cast<unsigned>(m4), kThreads, 0, current_stream()>>>(
        u.raw(), u.dtype() == DType::kBF16 ? kCodeBF16 : kCodeF16, m, m4, f,
        static_cast<uint8_t*>(out.data.raw()), static_cast<float*>(out.scale.raw()));
    check_launch("swiglu_fp8 (groups)");
    return out;
  }
  Fp8Activation out = empty_fp8_rows(m, f, shape, u.dtype(), u.device());
  if (m == 0) return out;
  H3_CHECK(m <= 0x7fffffff, ErrorCode::kUnsupported, "ops::swiglu_fp8: ", m,
           " rows exceed one launch");
  const size_t smem = static_cast<size_t>(f) * 2;
  auto* q = static_cast<uint8_t*>(out.data.raw());
  auto* sc = static_cast<float*>(out.scale.raw());
  if (u.dtype() == DType::kBF16) {
    swiglu_quantize_rows_kernel<__nv_bfloat162>
        <<<static_cast<unsigned>(m), kThreads, smem, current_stream()>>>(u.raw(), kCodeBF16, f, q,
                                                                         sc);
  } else {
    swiglu_quantize_rows_kernel<__half2>
        <<<static_cast<unsigned>(m), kThreads, smem, current_stream()>>>(u.raw(), kCodeF16, f, q,
                                                                         sc);
  }
  check_launch("swiglu_fp8");
  return out;
}

Tensor linear_fp8(const Fp8Activation& x, const Fp8Weight& w, const Tensor* bias) {
  require_cuda(x.data, "linear_fp8", "x");
  require_cuda(w.data, "linear_fp8", "w.data");
  require_cuda(w.scale, "linear_fp8", "w.scale");
  require_same_device(x.data, w.data, "linear_fp8");
  require_same_device(x.data, w.scale, "linear_fp8");
  if (bias) {
    require_cuda(*bias, "linear_fp8", "bias");
    require_same_device(x.data, *bias, "linear_fp8");
  }
  set_device_of(x.data);
  const bool groups = x.scaling == Fp8ActScaling::kPerGroup;
  // x.data has m rows, or m padded to a multiple of 4 when quantized per group.
  const int64_t n = w.out_features(), k = w.in_features(), rows = x.data.size(0);
  int64_t m = 1;
  for (size_t d = 0; d + 1 < x.shape.size(); ++d) m *= x.shape[d];
  const DType out_t = x.dtype;
  Shape out_shape = x.shape;
  out_shape.back() = n;
  const bool aligned = reinterpret_cast<uintptr_t>(w.data.raw()) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(w.scale.raw()) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(x.scale.raw()) % 16 == 0 &&
                       w.data.is_contiguous();
  // The float32 GEMM over the dequantized operands: the CPU oracle's own arithmetic, for what the
  // FP8 tensor cores do not take (and, should cuBLASLt have no FP8 kernel for a shape, that too).
  // The rows' E4M3 values times their scales are the fake-quantized activations bit for bit.
  auto dequantized = [&]() {
    Tensor xf;
    if (groups) {
      xf = Tensor::empty({m, k}, DType::kF32, x.data.device());
      if (m * k > 0) {
        dequantize_groups_kernel<<<grid_for(m * k, kThreads), kThreads, 0, current_stream()>>>(
            static_cast<const uint8_t*>(x.data.raw()), static_cast<const float*>(x.scale.raw()), m,
            rows, k, static_cast<float*>(xf.raw()));
        check_launch("fp8 dequantize groups");
      }
    } else {
      xf = cuda::dequantize_weight_fp8({x.data, x.scale, Fp8WeightScaling::kPerChannel},
                                       DType::kF32);
    }
    const Tensor y = cuda::linear(xf, cuda::dequantize_weight_fp8(w, DType::kF32), bias);
    return (out_t == DType::kF32 ? y : cuda::cast(y, out_t)).reshape(out_shape);
  };
  if (!linear_fp8_uses_tensor_cores(n, k, w.scaling, x.scaling) || !aligned || m == 0)
    return dequantized();
  const auto* xs = static_cast<const float*>(x.scale.raw());
  const auto* ws = static_cast<const float*>(w.scale.raw());
  // cuBLASLt reads 128 x 128 weight scales with each block row's stride a multiple of 4: a copy
  // padded to that when ceil(K / 128) is not (a few KiB; the padding is never read).
  Tensor ws_padded;
  if (groups) {
    const int64_t nb = w.scale.size(0), kb = w.scale.size(1), kb4 = (kb + 3) / 4 * 4;
    if (kb4 != kb) {
      ws_padded = Tensor::zeros({nb, kb4}, DType::kF32, w.scale.device());
      H3_CUDA_CHECK(cudaMemcpy2DAsync(ws_padded.raw(), kb4 * sizeof(float), w.scale.raw(),
                                      kb * sizeof(float), kb * sizeof(float), nb,
                                      cudaMemcpyDeviceToDevice, current_stream()));
      ws = static_cast<const float*>(ws_padded.raw());
    }
  }
  // The GEMM's rows: per group, the padded ones, whose outputs are dropped.
  auto rows_of = [&](const Tensor& full) {
    return rows == m ? full.reshape(out_shape) : full.slice(0, 0, m).reshape(out_shape);
  };
  const int dev = x.data.device().index;
  Tensor out = Tensor::empty({rows, n}, out_t, x.data.device());
  if (!bias) {
    if (!gemm_fp8(rows, n, k, x.data.raw(), xs, w.data.raw(), ws, out.raw(), out_t, dev, nullptr,
                  DType::kF32, groups))
      return dequantized();
    return rows_of(out);
  }
  // The bias joins in float32 before the one rounding to x's dtype, as on the CPU: in cuBLASLt's
  // epilogue where it has a kernel for that (a float32 copy of the output would cost three more
  // passes over it), else through a float32 accumulator. H3_FUSE_FP8_BIAS=0 takes the latter.
  const DType bt = bias->dtype();
  if (fusion_enabled("FP8_BIAS") && bias->is_contiguous() && bias->numel() == n &&
      (bt == DType::kF32 || bt == DType::kBF16 || bt == DType::kF16) &&
      gemm_fp8(rows, n, k, x.data.raw(), xs, w.data.raw(), ws, out.raw(), out_t, dev, bias->raw(),
               bt, groups))
    return rows_of(out);
  Tensor acc = Tensor::empty({rows, n}, DType::kF32, x.data.device());
  if (!gemm_fp8(rows, n, k, x.data.raw(), xs, w.data.raw(), ws, acc.raw(), DType::kF32, dev,
                nullptr, DType::kF32, groups))
    return dequantized();
  Tensor y = Tensor::empty(out_shape, out_t, x.data.device());
  bias_add_cast(static_cast<const float*>(acc.raw()), n, bias, false, y.raw(), out_t, n, m, n);
  return y;
}

// The timing entry points' shared set-up: x and w checked, a bf16 output of their GEMM, then
// `time(m, n, k, x_q, x_scale, w_q, w_scale, out)`.
template <class Time>
static std::vector<Fp8AlgoTiming> time_linear_fp8(const Fp8Activation& x, const Fp8Weight& w,
                                                  const char* op, Time time) {
  require_cuda(x.data, op, "x");
  require_cuda(w.data, op, "w.data");
  require_same_device(x.data, w.data, op);
  set_device_of(x.data);
  const int64_t n = w.out_features(), k = w.in_features(), m = x.data.size(0);
  H3_CHECK(linear_fp8_uses_tensor_cores(n, k, w.scaling, x.scaling) &&
               x.scaling != Fp8ActScaling::kPerGroup && m > 0,
           ErrorCode::kUnsupported, "ops::", op, ": ", m, " x ", k, " -> ", n,
           " does not run on the FP8 tensor cores");
  Tensor out = Tensor::empty({m, n}, DType::kBF16, x.data.device());
  return time(m, n, k, x.data.raw(), static_cast<const float*>(x.scale.raw()), w.data.raw(),
              static_cast<const float*>(w.scale.raw()), out.raw(), x.data.device().index);
}

std::vector<Fp8AlgoTiming> sweep_linear_fp8(const Fp8Activation& x, const Fp8Weight& w, int count,
                                            int iters, bool fast_accum) {
  return time_linear_fp8(x, w, "sweep_linear_fp8",
                         [&](int64_t m, int64_t n, int64_t k, const void* xq, const float* xs,
                             const void* wq, const float* ws, void* out, int dev) {
                           return sweep_gemm_fp8(m, n, k, xq, xs, wq, ws, out, DType::kBF16, dev,
                                                 count, iters, fast_accum);
                         });
}

std::vector<Fp8AlgoTiming> search_linear_fp8(const Fp8Activation& x, const Fp8Weight& w,
                                             int max_configs, int iters, Fp8SearchStats* stats) {
  return time_linear_fp8(x, w, "search_linear_fp8",
                         [&](int64_t m, int64_t n, int64_t k, const void* xq, const float* xs,
                             const void* wq, const float* ws, void* out, int dev) {
                           return search_gemm_fp8(m, n, k, xq, xs, wq, ws, out, DType::kBF16, dev,
                                                  max_configs, iters, stats);
                         });
}

bool linear_fp8_bias_in_epilogue(int64_t m, int64_t n, int64_t k, DType out, DType bias_dtype,
                                 int device) {
  if (!linear_fp8_uses_tensor_cores(n, k, Fp8WeightScaling::kPerChannel,
                                    Fp8ActScaling::kPerToken) ||
      !fusion_enabled("FP8_BIAS"))
    return false;
  return gemm_fp8_has_kernel(m, n, k, out, device, &bias_dtype);
}

Tensor linear_fp8(const Tensor& x_in, const Fp8Weight& w, const Tensor* bias, Fp8ActScaling act) {
  require_cuda(x_in, "linear_fp8", "x");
  require_float(x_in, "linear_fp8", "x");
  return cuda::linear_fp8(cuda::quantize_activation_fp8(x_in, act), w, bias);
}

}  // namespace h3::ops::cuda
