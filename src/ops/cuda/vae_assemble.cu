// Video VAE output assembly on CUDA (see vae_assemble.h). Both kernels replace chains of full-size
// passes (slice copies, blend products, concatenations, casts, a host loop) with one pass, and
// use explicitly rounded float operations (__fmul_rn/__fadd_rn) so that no multiply-add is fused
// and every intermediate rounds where the composition it replaces rounds.
#include <algorithm>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_internal.h"
#include "ops/cuda/elementwise_util.cuh"
#include "ops/cuda/vae_assemble.h"

namespace h3::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlendFrames = 64;

struct BlendWeights {
  int count = 0;
  float wa[kMaxBlendFrames];
  float wb[kMaxBlendFrames];
};

// Rounds a float32 value to the storage dtype `code` (f32: unchanged).
__device__ __forceinline__ float round_to(float v, int code) {
  switch (code) {
    case kCodeF32: return v;
    case kCodeBF16: return __bfloat162float(__float2bfloat16_rn(v));
    default: return __half2float(__float2half_rn(v));
  }
}

// One (channel, frame) plane per blockIdx.y; pixels of the plane over blockIdx.x.
__global__ void assemble_kernel(void* out, int ot, int64_t out_frames, int64_t dst0, const void* clip, int ct,
                                int64_t clip_frames, int64_t src0, const void* prev, int64_t prev_frames,
                                int64_t prev0, int64_t n, int64_t plane, BlendWeights w) {
  const int64_t c = blockIdx.y / n, f = blockIdx.y % n;
  const int64_t src_base = (c * clip_frames + src0 + f) * plane;
  const int64_t dst_base = (c * out_frames + dst0 + f) * plane;
  const bool blend = f < w.count;
  const int64_t prev_base = blend ? (c * prev_frames + prev0 + f) * plane : 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < plane;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = ld(clip, ct, src_base + i);
    if (blend) {
      // ops::add(ops::mul(a, w_a), ops::mul(b, w_b)): three roundings to the clip's dtype.
      const float pa = round_to(__fmul_rn(ld(prev, ct, prev_base + i), w.wa[f]), ct);
      const float pb = round_to(__fmul_rn(v, w.wb[f]), ct);
      v = round_to(__fadd_rn(pa, pb), ct);
    }
    st(out, ot, dst_base + i, v);  // exact: v is float32 or already rounded to out's dtype
  }
}

struct PixelStats {
  float mean[3];
  float std[3];
};

// One thread per output pixel (b, f, y, x): reads the 3 channel planes, writes 3 bytes.
__global__ void to_uint8_kernel(const void* x, int xt, uint8_t* out, int64_t batch, int64_t vol, PixelStats s) {
  const int64_t n = batch * vol;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / vol, p = i - b * vol;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
      // denormalize_pixels: x*std + mean (two roundings), clamp to [0, 1] keeping NaN.
      float v = __fadd_rn(__fmul_rn(ld(x, xt, (b * 3 + c) * vol + p), s.std[c]), s.mean[c]);
      if (!isnan(v)) v = fminf(fmaxf(v, 0.0f), 1.0f);
      // frames_to_uint8: rint(v*255) half to even, NaN -> 0, clamp to [0, 255].
      float r = rintf(__fmul_rn(v, 255.0f));
      r = isnan(r) ? 0.0f : fminf(fmaxf(r, 0.0f), 255.0f);
      out[i * 3 + c] = static_cast<uint8_t>(r);
    }
  }
}

// The stitch geometry: per tile row i (column j) its height (width), the first output row
// (column) it gives, and the blend extent with the row above (column to the left), 0 for the first.
struct StitchAxis {
  int n;
  int size[kVaeStitchMaxTiles];
  int out0[kVaeStitchMaxTiles + 1];  // out0[n] = the output's extent
  int extent[kVaeStitchMaxTiles];
};
struct StitchTiles {
  const void* ptr[kVaeStitchMaxTiles];
};

// blend(a, b, e) at position p < e (video_vae_tiling.cpp): the weights p / e and 1 - that, each
// rounded to the dtype, then a * wa + b * wb with each product and the sum rounded to it.
__device__ __forceinline__ float stitch_blend(float a, float b, int p, int e, int code) {
  const float wb = round_to(__fdiv_rn(static_cast<float>(p), static_cast<float>(e)), code);
  const float wa = round_to(__fsub_rn(1.0f, wb), code);
  return round_to(__fadd_rn(round_to(__fmul_rn(a, wa), code), round_to(__fmul_rn(b, wb), code)), code);
}

// One thread per output value (plane, y, x); planes are the C x F (channel, frame) pairs.
__global__ void stitch_kernel(StitchTiles t, int code, StitchAxis ya, StitchAxis xa, int64_t planes, void* out) {
  const int64_t H = ya.out0[ya.n], W = xa.out0[xa.n];
  const int64_t n = planes * H * W;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t X = idx % W, Y = (idx / W) % H, pl = idx / (W * H);
    int i = 0, j = 0;
    while (i + 1 < ya.n && Y >= ya.out0[i + 1]) ++i;
    while (j + 1 < xa.n && X >= xa.out0[j + 1]) ++j;
    const int y = static_cast<int>(Y - ya.out0[i]), x = static_cast<int>(X - xa.out0[j]);
    auto at = [&](int ti, int tj, int yy, int xx) {
      const int64_t th = ya.size[ti], tw = xa.size[tj];
      return ld(t.ptr[ti * xa.n + tj], code, (pl * th + yy) * tw + xx);
    };
    float v = at(i, j, y, x);
    const int ev = ya.extent[i], eh = xa.extent[j];
    if (ev > 0 && y < ev) v = stitch_blend(at(i - 1, j, ya.size[i - 1] - ev + y, x), v, y, ev, code);
    // The left neighbour is the raw tile, not its vertically blended form (§2.7).
    if (eh > 0 && x < eh) v = stitch_blend(at(i, j - 1, y, xa.size[j - 1] - eh + x), v, x, eh, code);
    st(out, code, idx, v);
  }
}

// out[r, c] = x[r, c] + float(branch[r, c]) * scale[c], two float32 roundings (no fused
// multiply-add), one block per row in a stride loop, threads over the columns.
__global__ void layerscale_residual_kernel(const float* x, const void* br, int bt, const float* scale, float* out,
                                           int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      out[base + c] = __fadd_rn(x[base + c], __fmul_rn(ld(br, bt, base + c), scale[c]));
  }
}

}  // namespace

Tensor vae_layerscale_residual(const Tensor& x, const Tensor& branch, const Tensor& scale) {
  require_cuda(x, "vae_layerscale_residual", "x");
  require_cuda(branch, "vae_layerscale_residual", "branch");
  require_cuda(scale, "vae_layerscale_residual", "scale");
  H3_CHECK(x.dim() == 2 && x.dtype() == DType::kF32 && x.is_contiguous() && branch.shape() == x.shape() &&
               branch.is_contiguous() && dtype_code(branch.dtype()) >= 0 && dtype_code(branch.dtype()) <= kCodeF16 &&
               scale.dtype() == DType::kF32 && scale.is_contiguous() && scale.numel() == x.size(1),
           ErrorCode::kInvalidArgument,
           "vae_layerscale_residual: expected contiguous x [S, C] float32, branch [S, C] float, scale [C] float32; got ",
           x.desc(), ", ", branch.desc(), ", ", scale.desc());
  require_same_device(x, branch, "vae_layerscale_residual");
  require_same_device(x, scale, "vae_layerscale_residual");
  set_device_of(x);
  Tensor out = Tensor::empty(x.shape(), DType::kF32, x.device());
  const int64_t rows = x.size(0), cols = x.size(1);
  if (rows * cols == 0) return out;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65535LL * 8));
  layerscale_residual_kernel<<<blocks, kThreads, 0, current_stream()>>>(
      static_cast<const float*>(x.raw()), branch.raw(), dtype_code(branch.dtype()),
      static_cast<const float*>(scale.raw()), static_cast<float*>(out.raw()), rows, cols);
  check_launch("vae_layerscale_residual");
  return out;
}

Tensor vae_stitch_tiles(const std::vector<Tensor>& tiles, int64_t ny, int64_t nx,
                        const std::vector<int64_t>& y_overlaps, const std::vector<int64_t>& x_overlaps) {
  H3_CHECK(ny >= 1 && nx >= 1 && static_cast<int64_t>(tiles.size()) == ny * nx && ny * nx <= kVaeStitchMaxTiles,
           ErrorCode::kInvalidArgument, "vae_stitch_tiles: ", tiles.size(), " tiles for a ", ny, " x ", nx,
           " grid (at most ", kVaeStitchMaxTiles, ")");
  H3_CHECK(static_cast<int64_t>(y_overlaps.size()) + 1 >= ny && static_cast<int64_t>(x_overlaps.size()) + 1 >= nx,
           ErrorCode::kInvalidArgument, "vae_stitch_tiles: ", ny, " x ", nx, " tiles need ", ny - 1, " and ", nx - 1,
           " overlaps");
  const Tensor& t0 = tiles[0];
  require_cuda(t0, "vae_stitch_tiles", "tile");
  const int code = dtype_code(t0.dtype());
  H3_CHECK(t0.dim() == 4 && code >= 0 && code <= kCodeF16, ErrorCode::kInvalidArgument,
           "vae_stitch_tiles: expected float tiles [C, F, h, w], got ", t0.desc());
  StitchAxis ya{}, xa{};
  StitchTiles ptrs{};
  ya.n = static_cast<int>(ny);
  xa.n = static_cast<int>(nx);
  for (int64_t i = 0; i < ny; ++i) ya.size[i] = static_cast<int>(tiles[i * nx].size(2));
  for (int64_t j = 0; j < nx; ++j) xa.size[j] = static_cast<int>(tiles[j].size(3));
  for (int64_t i = 0; i < ny; ++i)
    for (int64_t j = 0; j < nx; ++j) {
      const Tensor& t = tiles[i * nx + j];
      require_cuda(t, "vae_stitch_tiles", "tile");
      require_same_device(t0, t, "vae_stitch_tiles");
      H3_CHECK(t.dim() == 4 && t.dtype() == t0.dtype() && t.is_contiguous() && t.size(0) == t0.size(0) &&
                   t.size(1) == t0.size(1) && t.size(2) == ya.size[i] && t.size(3) == xa.size[j],
               ErrorCode::kInvalidArgument, "vae_stitch_tiles: tile (", i, ", ", j, ") ", t.desc(),
               " does not fit the grid of ", t0.desc());
      ptrs.ptr[i * nx + j] = t.raw();
    }
  // Kept extents and blend extents as stitch_tiles computes them (blend: min of both sizes and
  // the overlap; crop: the overlap itself, except after the last row or column).
  auto fill = [](StitchAxis& a, const std::vector<int64_t>& ov) {
    a.out0[0] = 0;
    for (int k = 0; k < a.n; ++k) {
      a.extent[k] = k == 0 ? 0 : static_cast<int>(std::min<int64_t>({a.size[k - 1], a.size[k], ov[k - 1]}));
      const int64_t kept = k + 1 < a.n ? a.size[k] - ov[k] : a.size[k];
      H3_CHECK(kept >= 0 && (k == 0 || ov[k - 1] >= 0), ErrorCode::kInvalidArgument,
               "vae_stitch_tiles: an overlap is negative or larger than its tile (tile ", k, " of ", a.n,
               ", ", a.size[k], " px)");
      a.out0[k + 1] = a.out0[k] + static_cast<int>(kept);
    }
  };
  fill(ya, y_overlaps);
  fill(xa, x_overlaps);
  const int64_t planes = t0.size(0) * t0.size(1);
  Tensor out = Tensor::empty({t0.size(0), t0.size(1), ya.out0[ya.n], xa.out0[xa.n]}, t0.dtype(), t0.device());
  if (out.numel() == 0) return out;
  set_device_of(t0);
  stitch_kernel<<<grid_for(out.numel(), kThreads), kThreads, 0, current_stream()>>>(ptrs, code, ya, xa, planes,
                                                                                    out.raw());
  check_launch("vae_stitch_tiles");
  return out;
}

void vae_assemble_frames(const Tensor& out, int64_t dst0, const Tensor& clip, int64_t src0, int64_t n,
                         const Tensor* prev, int64_t prev0, const std::vector<float>& wa,
                         const std::vector<float>& wb) {
  require_cuda(out, "vae_assemble_frames", "out");
  require_cuda(clip, "vae_assemble_frames", "clip");
  const int64_t e = static_cast<int64_t>(wa.size());
  H3_CHECK(out.dim() == 4 && clip.dim() == 4 && (out.dtype() == DType::kF32 || out.dtype() == clip.dtype()) &&
               out.is_contiguous() &&
               clip.is_contiguous() && out.size(0) == clip.size(0) && out.size(2) == clip.size(2) &&
               out.size(3) == clip.size(3),
           ErrorCode::kInvalidArgument, "vae_assemble_frames: expected contiguous out [C, F, H, W] (float32 or clip's dtype) and clip [C, Fc, H, W], got ",
           out.desc(), " and ", clip.desc());
  H3_CHECK(dtype_code(clip.dtype()) >= 0 && dtype_code(clip.dtype()) <= kCodeF16, ErrorCode::kUnsupported,
           "vae_assemble_frames: clip dtype ", dtype_name(clip.dtype()), " (expected a float dtype)");
  H3_CHECK(n >= 0 && src0 >= 0 && dst0 >= 0 && src0 + n <= clip.size(1) && dst0 + n <= out.size(1),
           ErrorCode::kInvalidArgument, "vae_assemble_frames: frames [", src0, ", ", src0 + n, ") of ",
           clip.desc(), " into [", dst0, ", ", dst0 + n, ") of ", out.desc());
  H3_CHECK(e == static_cast<int64_t>(wb.size()) && e <= kMaxBlendFrames && e <= n, ErrorCode::kInvalidArgument,
           "vae_assemble_frames: ", e, " and ", wb.size(), " blend weights for ", n, " frames (at most ",
           kMaxBlendFrames, ")");
  if (e > 0) {
    H3_CHECK(prev != nullptr && prev->dim() == 4 && prev->dtype() == clip.dtype() && prev->is_contiguous() &&
                 prev->size(0) == clip.size(0) && prev->size(2) == clip.size(2) &&
                 prev->size(3) == clip.size(3) && prev0 >= 0 && prev0 + e <= prev->size(1),
             ErrorCode::kInvalidArgument, "vae_assemble_frames: the previous window ",
             prev ? prev->desc() : std::string("(none)"), " cannot give ", e, " frames from ", prev0,
             " for ", clip.desc());
    require_cuda(*prev, "vae_assemble_frames", "prev");
    require_same_device(clip, *prev, "vae_assemble_frames");
  }
  require_same_device(out, clip, "vae_assemble_frames");
  const int64_t planes = clip.size(0) * n, plane = clip.size(2) * clip.size(3);
  if (planes == 0 || plane == 0) return;
  H3_CHECK(planes <= 65535, ErrorCode::kUnsupported, "vae_assemble_frames: ", planes,
           " channel-frame planes (at most 65535)");
  set_device_of(clip);
  BlendWeights w;
  w.count = static_cast<int>(e);
  for (int64_t p = 0; p < e; ++p) {
    w.wa[p] = wa[static_cast<size_t>(p)];
    w.wb[p] = wb[static_cast<size_t>(p)];
  }
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((plane + kThreads - 1) / kThreads, 4096)),
                  static_cast<unsigned>(planes));
  assemble_kernel<<<grid, kThreads, 0, current_stream()>>>(
      out.raw(), dtype_code(out.dtype()), out.size(1), dst0, clip.raw(), dtype_code(clip.dtype()), clip.size(1),
      src0, e > 0 ? prev->raw() : nullptr, e > 0 ? prev->size(1) : 0, prev0, n, plane, w);
  check_launch("vae_assemble_frames");
}

Tensor vae_frames_to_uint8(const Tensor& decoded, const float mean[3], const float std[3]) {
  require_cuda(decoded, "vae_frames_to_uint8", "decoded");
  H3_CHECK(decoded.dim() == 5 && decoded.size(1) == 3 && decoded.is_contiguous() &&
               dtype_code(decoded.dtype()) >= 0 && dtype_code(decoded.dtype()) <= kCodeF16,
           ErrorCode::kInvalidArgument, "vae_frames_to_uint8: expected contiguous float [B, 3, F, H, W], got ",
           decoded.desc());
  set_device_of(decoded);
  const int64_t b = decoded.size(0), f = decoded.size(2), h = decoded.size(3), w = decoded.size(4);
  Tensor out = Tensor::empty({b, f, h, w, 3}, DType::kU8, decoded.device());
  const int64_t vol = f * h * w;
  if (b * vol == 0) return out;
  PixelStats s;
  for (int c = 0; c < 3; ++c) {
    s.mean[c] = mean[c];
    s.std[c] = std[c];
  }
  to_uint8_kernel<<<grid_for(b * vol, kThreads), kThreads, 0, current_stream()>>>(
      decoded.raw(), dtype_code(decoded.dtype()), static_cast<uint8_t*>(out.raw()), b, vol, s);
  check_launch("vae_frames_to_uint8");
  return out;
}

}  // namespace h3::ops::cuda
