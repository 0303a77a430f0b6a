// Qwen3-VL image / video preprocessing (h3_components_spec.md §1.4).
#include "media/qwen_processor.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status.h"
#include "io/repo.h"
#include "media/bicubic_resize.h"

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

}  // namespace

QwenProcessorConfig QwenProcessorConfig::from_json(const nlohmann::json& j,
                                                   const std::string& section,
                                                   const std::string& file) {
  QwenProcessorConfig c;
  const std::string s = section.empty() ? "" : section + ".";
  const std::string where = section.empty() ? std::string("processor") : section;
  c.patch_size = io::config_int(j, s + "patch_size", file);
  c.temporal_patch_size = io::config_int(j, s + "temporal_patch_size", file);
  c.merge_size = io::config_int(j, s + "merge_size", file);
  c.min_pixels = io::config_int(j, s + "size.shortest_edge", file);
  c.max_pixels = io::config_int(j, s + "size.longest_edge", file);
  c.rescale_factor = io::config_number(j, s + "rescale_factor", file);
  c.mean = triple(j, s + "image_mean", file);
  c.std = triple(j, s + "image_std", file);
  H3_CHECK(c.patch_size > 0 && c.temporal_patch_size > 0 && c.merge_size > 0,
           ErrorCode::kInvalidFile, file, ": ", where, ": fields '", s, "patch_size' (",
           c.patch_size, "), '", s, "temporal_patch_size' (", c.temporal_patch_size, ") and '", s,
           "merge_size' (", c.merge_size, ") must be > 0");
  H3_CHECK(c.min_pixels > 0 && c.max_pixels >= c.min_pixels, ErrorCode::kInvalidFile, file, ": ",
           where, ": fields '", s, "size.shortest_edge' (", c.min_pixels, ") and '", s,
           "size.longest_edge' (", c.max_pixels, ") must satisfy 0 < shortest_edge <= longest_edge");
  H3_CHECK(c.rescale_factor > 0, ErrorCode::kInvalidFile, file, ": field '", s,
           "rescale_factor' must be > 0, got ", c.rescale_factor);
  for (double v : c.std) {
    H3_CHECK(v > 0, ErrorCode::kInvalidFile, file, ": field '", s,
             "image_std' must hold values > 0");
  }
  // Only the bicubic resample (PIL code 3) is implemented, as every Qwen3-VL release uses.
  const nlohmann::json* rs = j.contains(section) ? &j[section] : (section.empty() ? &j : nullptr);
  if (rs && rs->is_object() && rs->contains("resample")) {
    const nlohmann::json& r = (*rs)["resample"];
    H3_CHECK(r.is_number_integer(), ErrorCode::kInvalidFile, file, ": field '", s,
             "resample' must be an integer, got ", r.dump());
    H3_CHECK(r.get<int64_t>() == 3, ErrorCode::kInvalidFile, file, ": field '", s,
             "resample' is ", r.get<int64_t>(), "; only bicubic (3) is supported");
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

std::array<int64_t, 2> qwen_smart_resize_video(int64_t num_frames, int64_t height, int64_t width,
                                               int64_t temporal_factor, int64_t factor,
                                               int64_t min_pixels, int64_t max_pixels) {
  H3_CHECK(num_frames > 0 && temporal_factor > 0, ErrorCode::kInvalidArgument,
           "Qwen processor: video needs at least one frame and a temporal factor > 0, got ",
           num_frames, " frame(s), factor ", temporal_factor);
  H3_CHECK(height >= factor && width >= factor, ErrorCode::kInvalidArgument,
           "Qwen processor: video frame ", width, "x", height, " is smaller than the factor ",
           factor);
  H3_CHECK(std::max(height, width) <= 200 * std::min(height, width), ErrorCode::kInvalidArgument,
           "Qwen processor: aspect ratio of ", width, "x", height, " exceeds 200");
  const double f = static_cast<double>(factor);
  int64_t h = static_cast<int64_t>(std::nearbyint(height / f)) * factor;
  int64_t w = static_cast<int64_t>(std::nearbyint(width / f)) * factor;
  const int64_t t = (num_frames + temporal_factor - 1) / temporal_factor * temporal_factor;
  const double all = static_cast<double>(num_frames) * static_cast<double>(height) * width;
  if (t * h * w > max_pixels) {
    const double beta = std::sqrt(all / static_cast<double>(max_pixels));
    h = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(height / beta / f)) * factor);
    w = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(width / beta / f)) * factor);
  } else if (t * h * w < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / all);
    h = static_cast<int64_t>(std::ceil(height * beta / f)) * factor;
    w = static_cast<int64_t>(std::ceil(width * beta / f)) * factor;
  }
  return {h, w};
}

void check_processor_matches_vision(const QwenProcessorConfig& p,
                                    const qwen3_vl::VisionConfig& v, const std::string& file,
                                    const std::string& section) {
  const std::string s = section.empty() ? "" : section + ".";
  auto same = [&](const char* field, int64_t got, const char* vfield, int64_t want) {
    H3_CHECK(got == want, ErrorCode::kInvalidFile, file, ": field '", s, field, "' is ", got,
             " but the vision tower's vision_config.", vfield, " is ", want,
             " (text_encoder/config.json); the patches would not fit the patch embedding");
  };
  same("patch_size", p.patch_size, "patch_size", v.patch_size);
  same("temporal_patch_size", p.temporal_patch_size, "temporal_patch_size",
       v.temporal_patch_size);
  same("merge_size", p.merge_size, "spatial_merge_size", v.spatial_merge_size);
}

QwenPixels qwen_process_image(const Tensor& hwc, const QwenProcessorConfig& c) {
  H3_CHECK(hwc.dtype() == DType::kU8 && hwc.dim() == 3 && hwc.size(2) == 3,
           ErrorCode::kInvalidArgument, "Qwen processor: image must be uint8 [H, W, 3], got ",
           hwc.desc());
  const auto size = qwen_smart_resize(hwc.size(0), hwc.size(1), c.patch_size * c.merge_size,
                                      c.min_pixels, c.max_pixels);
  const int64_t h = size[0], w = size[1];
  const Tensor src = resize_bicubic_aa_u8(hwc, h, w);
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
  const int64_t t = thwc.size(0);
  const int64_t tp = c.temporal_patch_size;
  const int64_t padded = (t + tp - 1) / tp * tp;
  const auto size = qwen_smart_resize_video(t, thwc.size(1), thwc.size(2), tp,
                                            c.patch_size * c.merge_size, c.min_pixels,
                                            c.max_pixels);
  const int64_t h = size[0], w = size[1];
  // Resized before the temporal padding, as the reference (the pad repeats a resized frame).
  const Tensor src = resize_bicubic_aa_u8(thwc, h, w);
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
