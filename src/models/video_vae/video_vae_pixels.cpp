// Pixel normalization, the posterior, and the pipeline's conditioning helper (h3_components_spec.md
// §2.2, §2.4; golden README pipeline facts 6 and 9). Host-side float32 loops: these touch each value
// once, in the order and precision the reference uses.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/status.h"
#include "models/video_vae/video_vae_assembly.h"
#include "models/video_vae/video_vae_model.h"
#include "ops/cuda/vae_assemble.h"
#include "ops/ops.h"

namespace h3::video_vae {
namespace {

// ImageNet statistics as the float32 values torch.tensor((0.485, ...)) holds.
constexpr float kPixelMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kPixelStd[3] = {0.229f, 0.224f, 0.225f};

Tensor host_f32(const Tensor& t) { return t.to(Device::cpu()).to(DType::kF32).contiguous(); }

void check_rgb(const Tensor& t, const char* what) {
  H3_CHECK(t.dim() == 5 && t.size(1) == 3, ErrorCode::kInvalidArgument, what,
           ": expected [B, 3, F, H, W] RGB, got ", t.desc());
}

}  // namespace

Tensor normalize_pixels(const Tensor& pixels) {
  check_rgb(pixels, "normalize_pixels");
  const bool bytes = pixels.dtype() == DType::kU8;
  H3_CHECK(bytes || dtype_is_float(pixels.dtype()), ErrorCode::kInvalidArgument,
           "normalize_pixels: expected uint8 or float pixels, got ", pixels.desc());
  const Tensor src = host_f32(pixels);
  Tensor out = Tensor::empty(pixels.shape(), DType::kF32);
  const float* s = src.data<float>();
  float* d = out.data<float>();
  const int64_t b = pixels.size(0), plane = pixels.numel() / (b * 3);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t c = 0; c < 3; ++c) {
      const int64_t off = (bi * 3 + c) * plane;
      for (int64_t i = 0; i < plane; ++i) {
        // pixels.float().div(255.0), then (x - mean) / std, each step rounded to float32.
        const float v = bytes ? s[off + i] / 255.0f : s[off + i];
        d[off + i] = (v - kPixelMean[c]) / kPixelStd[c];
      }
    }
  }
  return out;
}

Tensor denormalize_pixels(const Tensor& decoded) {
  check_rgb(decoded, "denormalize_pixels");
  const Tensor src = host_f32(decoded);
  Tensor out = Tensor::empty(decoded.shape(), DType::kF32);
  const float* s = src.data<float>();
  float* d = out.data<float>();
  const int64_t b = decoded.size(0), plane = decoded.numel() / std::max<int64_t>(b * 3, 1);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t c = 0; c < 3; ++c) {
      const int64_t off = (bi * 3 + c) * plane;
      for (int64_t i = 0; i < plane; ++i) {
        const float v = s[off + i] * kPixelStd[c] + kPixelMean[c];
        d[off + i] = std::isnan(v) ? v : std::clamp(v, 0.0f, 1.0f);
      }
    }
  }
  return out;
}

std::vector<double> frame_psnr(const Tensor& decoded, const Tensor& reference) {
  check_rgb(decoded, "frame_psnr");
  H3_CHECK(decoded.shape() == reference.shape(), ErrorCode::kInvalidArgument, "frame_psnr: ", decoded.desc(),
           " against ", reference.desc(), " (expected one shape)");
  const Tensor a = denormalize_pixels(decoded), b = denormalize_pixels(reference);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const int64_t items = a.size(0), frames = a.size(2), plane = a.size(3) * a.size(4);
  std::vector<double> out(static_cast<size_t>(frames));
  for (int64_t f = 0; f < frames; ++f) {
    double se = 0.0;
    for (int64_t bi = 0; bi < items; ++bi)
      for (int64_t c = 0; c < 3; ++c) {
        const int64_t off = ((bi * 3 + c) * frames + f) * plane;
        for (int64_t i = 0; i < plane; ++i) {
          const double d = static_cast<double>(pa[off + i]) - pb[off + i];
          se += d * d;
        }
      }
    const double mse = se / static_cast<double>(items * 3 * plane);
    out[static_cast<size_t>(f)] = mse > 0.0 ? 10.0 * std::log10(1.0 / mse) : std::numeric_limits<double>::infinity();
  }
  return out;
}

Tensor frames_to_uint8(const Tensor& pixels01) {
  check_rgb(pixels01, "frames_to_uint8");
  const Tensor src = host_f32(pixels01);
  const int64_t b = pixels01.size(0), f = pixels01.size(2), h = pixels01.size(3),
                w = pixels01.size(4);
  Tensor out = Tensor::empty({b, f, h, w, 3}, DType::kU8);
  const float* s = src.data<float>();
  auto* d = out.data<uint8_t>();
  const int64_t plane = h * w, vol = f * plane;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t c = 0; c < 3; ++c) {
      const float* sc = s + (bi * 3 + c) * vol;
      for (int64_t i = 0; i < vol; ++i) {
        // (x * 255).round(): half to even (the default rounding mode), then the byte.
        const float r = std::nearbyint(sc[i] * 255.0f);
        const float clamped = std::isnan(r) ? 0.0f : std::clamp(r, 0.0f, 255.0f);
        d[((bi * vol) + i) * 3 + c] = static_cast<uint8_t>(clamped);
      }
    }
  }
  return out;
}

Tensor decoded_to_uint8(const Tensor& decoded) {
  check_rgb(decoded, "decoded_to_uint8");
  if (decoded.device().is_cuda() && device_uint8_enabled() && dtype_is_float(decoded.dtype())) {
    const Tensor src = decoded.is_contiguous() ? decoded : ops::copy(decoded);
    return ops::cuda::vae_frames_to_uint8(src, kPixelMean, kPixelStd).to(Device::cpu());
  }
  return frames_to_uint8(denormalize_pixels(decoded));
}

Posterior posterior_from_moments(const Tensor& moments) {
  H3_CHECK(moments.dim() >= 2 && moments.size(1) % 2 == 0 && moments.size(1) > 0,
           ErrorCode::kInvalidArgument,
           "posterior: expected moments [B, 2*latent, ...] (mean then logvar on dim 1), got ",
           moments.desc());
  const int64_t lat = moments.size(1) / 2;
  Posterior p;
  p.mean = host_f32(moments.slice(1, 0, lat));
  p.logvar = host_f32(moments.slice(1, lat, 2 * lat)).clone();
  p.std = Tensor::empty(p.logvar.shape(), DType::kF32);
  float* lv = p.logvar.data<float>();
  float* sd = p.std.data<float>();
  for (int64_t i = 0; i < p.logvar.numel(); ++i) {
    lv[i] = std::clamp(lv[i], -30.0f, 20.0f);
    sd[i] = std::exp(0.5f * lv[i]);
  }
  return p;
}

Tensor posterior_sample(const Posterior& p, const Tensor& noise) {
  H3_CHECK(noise.shape() == p.mean.shape(), ErrorCode::kInvalidArgument,
           "posterior sample: noise ", noise.desc(), " must have the mean's shape ",
           shape_str(p.mean.shape()));
  const Tensor n = host_f32(noise);
  Tensor out = Tensor::empty(p.mean.shape(), DType::kF32);
  const float* m = p.mean.data<float>();
  const float* s = p.std.data<float>();
  const float* e = n.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = m[i] + s[i] * e[i];
  return out;
}

Tensor encode_condition(const VideoVae& vae, const Tensor& pixels_uint8, const Tensor& noise) {
  H3_CHECK(pixels_uint8.dtype() == DType::kU8, ErrorCode::kInvalidArgument,
           "encode_condition: expected uint8 pixels, got ", pixels_uint8.desc());
  const Tensor moments = vae.encode_moments(normalize_pixels(pixels_uint8));
  const Posterior post = posterior_from_moments(moments);
  // The sample is rounded to float16 before normalization (~11 bits kept, pipeline fact 6).
  const Tensor sample = posterior_sample(post, noise).to(DType::kF16).to(DType::kF32);
  return vae.normalize_latents(sample);
}

}  // namespace h3::video_vae
