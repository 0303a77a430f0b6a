#include "models/video_vae/video_vae_assembly.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/dtype.h"
#include "core/status.h"
#include "ops/cuda/vae_assemble.h"

namespace h3::video_vae {
namespace {

// "0" turns a switch off; unset or anything else leaves it on.
bool switch_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::strcmp(v, "0") == 0);
}

float round_to(float v, DType dtype) {
  if (dtype == DType::kF16) return round_f16(v);
  if (dtype == DType::kBF16) return round_bf16(v);
  return v;
}

}  // namespace

bool fused_assembly_enabled() { return switch_on("H3_VAE_FUSED_ASSEMBLY"); }
bool device_uint8_enabled() { return switch_on("H3_VAE_DEVICE_UINT8"); }
bool fused_residual_enabled() { return switch_on("H3_VAE_FUSED_RESIDUAL"); }
bool fused_stitch_enabled() { return switch_on("H3_VAE_FUSED_STITCH"); }

void blend_weights(int64_t e, DType dtype, std::vector<float>* wa, std::vector<float>* wb) {
  wa->assign(static_cast<size_t>(std::max<int64_t>(e, 0)), 0.0f);
  wb->assign(wa->size(), 0.0f);
  for (int64_t p = 0; p < e; ++p) {
    // As blend(): positions / extent, then 1 - that, each rounded to the window's dtype (§2.7).
    (*wb)[p] = round_to(static_cast<float>(p) / static_cast<float>(e), dtype);
    (*wa)[p] = round_to(1.0f - (*wb)[p], dtype);
  }
}

void assemble_frames(const Tensor& out, int64_t dst0, const Tensor& clip, int64_t src0, int64_t n,
                     const Tensor* prev, int64_t prev0, const std::vector<float>& wa,
                     const std::vector<float>& wb) {
  if (out.device().is_cuda()) {
    ops::cuda::vae_assemble_frames(out, dst0, clip, src0, n, prev, prev0, wa, wb);
    return;
  }
  const int64_t e = static_cast<int64_t>(wa.size());
  H3_CHECK(out.dim() == 4 && clip.dim() == 4 && out.dtype() == DType::kF32 && out.is_contiguous() &&
               clip.device() == out.device() && out.size(0) == clip.size(0) &&
               out.size(2) == clip.size(2) && out.size(3) == clip.size(3),
           ErrorCode::kInvalidArgument,
           "video VAE assembly: expected contiguous out [C, F, H, W] float32 and clip [C, Fc, H, W] on one "
           "device, got ", out.desc(), " and ", clip.desc());
  H3_CHECK(n >= 0 && src0 >= 0 && dst0 >= 0 && src0 + n <= clip.size(1) && dst0 + n <= out.size(1) &&
               e == static_cast<int64_t>(wb.size()) && e <= n,
           ErrorCode::kInvalidArgument, "video VAE assembly: frames [", src0, ", ", src0 + n, ") of ",
           clip.desc(), " into [", dst0, ", ", dst0 + n, ") of ", out.desc(), " with ", e, " blended");
  H3_CHECK(e == 0 || (prev && prev->dim() == 4 && prev->dtype() == clip.dtype() &&
                      prev->size(0) == clip.size(0) && prev->size(2) == clip.size(2) &&
                      prev->size(3) == clip.size(3) && prev0 >= 0 && prev0 + e <= prev->size(1)),
           ErrorCode::kInvalidArgument, "video VAE assembly: the previous window ",
           prev ? prev->desc() : std::string("(none)"), " cannot give ", e, " frames from ", prev0);
  const DType dt = clip.dtype();
  const Tensor c32 = clip.to(DType::kF32).contiguous();  // exact widening of the window's values
  const Tensor p32 = e > 0 ? prev->to(DType::kF32).contiguous() : Tensor();
  const int64_t channels = clip.size(0), plane = clip.size(2) * clip.size(3);
  const float* cs = c32.data<float>();
  const float* ps = e > 0 ? p32.data<float>() : nullptr;
  float* os = out.data<float>();
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t f = 0; f < n; ++f) {
      const float* src = cs + (c * clip.size(1) + src0 + f) * plane;
      float* dst = os + (c * out.size(1) + dst0 + f) * plane;
      if (f >= e) {
        std::memcpy(dst, src, static_cast<size_t>(plane) * sizeof(float));
        continue;
      }
      const float* pv = ps + (c * prev->size(1) + prev0 + f) * plane;
      for (int64_t i = 0; i < plane; ++i) {
        // ops::add(ops::mul(a, w_a), ops::mul(b, w_b)): each op rounds to the window's dtype.
        const float pa = round_to(pv[i] * wa[f], dt);
        const float pb = round_to(src[i] * wb[f], dt);
        dst[i] = round_to(pa + pb, dt);
      }
    }
  }
}

}  // namespace h3::video_vae
