// Qwen3-VL image / video preprocessing (h3_components_spec.md §1.4).
#include "media/qwen_processor.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status.h"
#include "io/repo.h"

namespace h3::media {
namespace {

std::array<double, 3> triple(const nlohmann::json& j, const std::string& field,
                             const std::string& file) {
  const nlohmann::json& v = io::config_field(j, field, file);
  H3_CHECK(v.is_array() && v.size() == 3, ErrorCode::kInvalidFile, file, ": field '", field,
           "' must be a list of 3 numbers");
  std::array<double, 3> out{};
  for (size_t i = 0; i < 3; ++i) {
    H3_CHECK(v[i].is_number(), ErrorCode::kInvalidFile, file, ": field '", field,
             "' must hold numbers");
    out[i] = v[i].get<double>();
  }
  return out;
}

// frames: [T, H, W, C] uint8 contiguous, T a multiple of tp.
QwenPixels patchify(const std::vector<uint8_t>& px, int64_t frames, int64_t h, int64_t w,
                    const QwenProcessorConfig& c) {
  const int64_t p = c.patch_size, tp = c.temporal_patch_size, m = c.merge_size, ch = 3;
  const int64_t gt = frames / tp, gh = h / p, gw = w / p;
  const int64_t feat = ch * tp * p * p;
  std::vector<float> out(static_cast<size_t>(gt * gh * gw * feat));
  // Per channel affine (x * rescale - mean) / std, evaluated in double, rounded once.
  std::array<std::array<float, 256>, 3> lut{};
  for (int64_t k = 0; k < ch; ++k) {
    for (int v = 0; v < 256; ++v) {
      lut[static_cast<size_t>(k)][static_cast<size_t>(v)] = static_cast<float>(
          (v * c.rescale_factor - c.mean[static_cast<size_t>(k)]) / c.std[static_cast<size_t>(k)]);
    }
  }
  size_t o = 0;
  // Patch order: t, block row, block col, intra row, intra col; features (C, t, y, x).
  for (int64_t t = 0; t < gt; ++t)
    for (int64_t br = 0; br < gh / m; ++br)
      for (int64_t bc = 0; bc < gw / m; ++bc)
        for (int64_t ir = 0; ir < m; ++ir)
          for (int64_t ic = 0; ic < m; ++ic) {
            const int64_t y0 = (br * m + ir) * p, x0 = (bc * m + ic) * p;
            for (int64_t k = 0; k < ch; ++k)
              for (int64_t f = 0; f < tp; ++f)
                for (int64_t y = 0; y < p; ++y)
                  for (int64_t x = 0; x < p; ++x) {
                    const size_t src =
                        static_cast<size_t>((((t * tp + f) * h + y0 + y) * w + x0 + x) * ch + k);
                    out[o++] = lut[static_cast<size_t>(k)][px[src]];
                  }
          }
  QwenPixels r;
  r.pixel_values = Tensor::from_f32(out, {gt * gh * gw, feat});
  r.grid = {gt, gh, gw};
  return r;
}

void check_size(int64_t h, int64_t w, int64_t frames, int64_t pixels_scale,
                const QwenProcessorConfig& c, const char* what) {
  const int64_t factor = c.patch_size * c.merge_size;
  // The video budget counts every frame (T*H*W); the image budget one frame.
  const auto r =
      qwen_smart_resize(h, w, factor, c.min_pixels / pixels_scale, c.max_pixels / pixels_scale);
  H3_CHECK(r[0] == h && r[1] == w, ErrorCode::kUnsupported, "Qwen processor: ", what, " of ", w,
           "x", h, " (", frames, " frame(s)) needs a resize to ", r[1], "x", r[0],
           "; resampling is not implemented (give sizes that are multiples of ", factor,
           " within the pixel budget)");
}

}  // namespace

QwenProcessorConfig QwenProcessorConfig::from_json(const nlohmann::json& j,
                                                   const std::string& section,
                                                   const std::string& file) {
  QwenProcessorConfig c;
  const std::string s = section + ".";
  c.patch_size = io::config_int(j, s + "patch_size", file);
  c.temporal_patch_size = io::config_int(j, s + "temporal_patch_size", file);
  c.merge_size = io::config_int(j, s + "merge_size", file);
  c.min_pixels = io::config_int(j, s + "size.shortest_edge", file);
  c.max_pixels = io::config_int(j, s + "size.longest_edge", file);
  c.rescale_factor = io::config_number(j, s + "rescale_factor", file);
  c.mean = triple(j, s + "image_mean", file);
  c.std = triple(j, s + "image_std", file);
  H3_CHECK(c.patch_size > 0 && c.temporal_patch_size > 0 && c.merge_size > 0,
           ErrorCode::kInvalidFile, file, ": ", section,
           ": patch_size, temporal_patch_size and merge_size must be > 0");
  H3_CHECK(c.min_pixels > 0 && c.max_pixels >= c.min_pixels, ErrorCode::kInvalidFile, file, ": ",
           section, ": size.shortest_edge (", c.min_pixels, ") and size.longest_edge (",
           c.max_pixels, ") must satisfy 0 < min <= max");
  for (double v : c.std) {
    H3_CHECK(v > 0, ErrorCode::kInvalidFile, file, ": ", section, ": image_std must be > 0");
  }
  return c;
}

std::array<int64_t, 2> qwen_smart_resize(int64_t height, int64_t width, int64_t factor,
                                         int64_t min_pixels, int64_t max_pixels) {
  H3_CHECK(height >= factor && width >= factor, ErrorCode::kInvalidArgument,
           "Qwen processor: image ", width, "x", height, " is smaller than the factor ", factor);
  H3_CHECK(std::max(height, width) <= 200 * std::min(height, width), ErrorCode::kInvalidArgument,
           "Qwen processor: aspect ratio of ", width, "x", height, " exceeds 200");
  const double f = static_cast<double>(factor);
  // Python round() is half-to-even, as std::nearbyint in the default rounding mode.
  int64_t h = static_cast<int64_t>(std::nearbyint(height / f)) * factor;
  int64_t w = static_cast<int64_t>(std::nearbyint(width / f)) * factor;
  if (h * w > max_pixels) {
    const double beta = std::sqrt(static_cast<double>(height) * width / max_pixels);
    h = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(height / beta / f)) * factor);
    w = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(width / beta / f)) * factor);
  } else if (h * w < min_pixels) {
    const double beta =
        std::sqrt(static_cast<double>(min_pixels) / (static_cast<double>(height) * width));
    h = static_cast<int64_t>(std::ceil(height * beta / f)) * factor;
    w = static_cast<int64_t>(std::ceil(width * beta / f)) * factor;
  }
  return {h, w};
}

QwenPixels qwen_process_image(const Tensor& hwc, const QwenProcessorConfig& c) {
  H3_CHECK(hwc.dtype() == DType::kU8 && hwc.dim() == 3 && hwc.size(2) == 3,
           ErrorCode::kInvalidArgument, "Qwen processor: image must be uint8 [H, W, 3], got ",
           hwc.desc());
  const int64_t h = hwc.size(0), w = hwc.size(1);
  check_size(h, w, 1, 1, c, "image");
  const Tensor src = hwc.contiguous();
  const uint8_t* d = src.data<uint8_t>();
  const size_t frame = static_cast<size_t>(h * w * 3);
  std::vector<uint8_t> px(frame * static_cast<size_t>(c.temporal_patch_size));
  for (int64_t f = 0; f < c.temporal_patch_size; ++f)
    std::copy(d, d + frame,
              px.begin() + static_cast<std::ptrdiff_t>(f * static_cast<int64_t>(frame)));
  return patchify(px, c.temporal_patch_size, h, w, c);
}

QwenPixels qwen_process_video(const Tensor& thwc, const QwenProcessorConfig& c) {
  H3_CHECK(thwc.dtype() == DType::kU8 && thwc.dim() == 4 && thwc.size(3) == 3 && thwc.size(0) > 0,
           ErrorCode::kInvalidArgument, "Qwen processor: video must be uint8 [T, H, W, 3], got ",
           thwc.desc());
  const int64_t t = thwc.size(0), h = thwc.size(1), w = thwc.size(2);
  const int64_t tp = c.temporal_patch_size;
  const int64_t padded = (t + tp - 1) / tp * tp;
  H3_CHECK(h >= c.patch_size * c.merge_size && w >= c.patch_size * c.merge_size &&
               h % (c.patch_size * c.merge_size) == 0 && w % (c.patch_size * c.merge_size) == 0 &&
               padded * h * w <= c.max_pixels && padded * h * w >= c.min_pixels,
           ErrorCode::kUnsupported, "Qwen processor: video of ", w, "x", h, " x ", t,
           " frames needs a resize; resampling is not implemented (give multiples of ",
           c.patch_size * c.merge_size, " within the pixel budget)");
  const Tensor src = thwc.contiguous();
  const uint8_t* d = src.data<uint8_t>();
  const size_t frame = static_cast<size_t>(h * w * 3);
  std::vector<uint8_t> px(frame * static_cast<size_t>(padded));
  for (int64_t f = 0; f < padded; ++f) {
    const int64_t s = std::min(f, t - 1);
    std::copy(d + static_cast<size_t>(s) * frame, d + static_cast<size_t>(s + 1) * frame,
              px.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(f) * frame));
  }
  return patchify(px, padded, h, w, c);
}

}  // namespace h3::media
