#include "media/reference_media.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "media/image_resize.h"

namespace h3::media {

std::vector<int64_t> frame_rate_source_indices(int64_t input_frames, double fps,
                                               int64_t max_frames) {
  H3_CHECK(input_frames > 0, ErrorCode::kInvalidArgument, "reference video has no frames");
  H3_CHECK(std::isfinite(fps) && fps > 0, ErrorCode::kInvalidArgument,
           "reference video frame rate must be positive and finite, got ", fps);
  H3_CHECK(max_frames > 0, ErrorCode::kInvalidArgument,
           "reference video: num_frames must be positive, got ", max_frames);
  const double s = static_cast<double>(pipeline::kFps) / fps;
  auto slot = [s](int64_t i) {
    return static_cast<int64_t>(std::floor(static_cast<double>(i) * s + 0.5));
  };
  std::vector<int64_t> out;
  int64_t begin = slot(0);
  for (int64_t i = 0; i < input_frames && static_cast<int64_t>(out.size()) < max_frames; ++i) {
    const int64_t end = slot(i + 1);
    for (int64_t r = begin; r < end && static_cast<int64_t>(out.size()) < max_frames; ++r) {
      out.push_back(i);
    }
    begin = end;
  }
  H3_CHECK(!out.empty(), ErrorCode::kInvalidArgument, "reference video of ", input_frames,
           " frames at ", fps, " fps leaves no frame at ", pipeline::kFps, " fps");
  return out;
}

NormalizedVideo normalize_reference_video(const std::vector<RgbImage>& frames, double fps,
                                          int64_t num_frames,
                                          const pipeline::CanvasConfig& config) {
  H3_CHECK(!frames.empty(), ErrorCode::kInvalidArgument, "reference video has no frames");
  const int64_t w = frames[0].width, h = frames[0].height;
  for (size_t i = 0; i < frames.size(); ++i) {
    H3_CHECK(frames[i].width == w && frames[i].height == h && w > 0 && h > 0,
             ErrorCode::kInvalidArgument, "reference video frame ", i, " is ", frames[i].width,
             "x", frames[i].height, ", expected ", w, "x", h, " like frame 0");
  }
  NormalizedVideo out;
  out.source_frame_index =
      frame_rate_source_indices(static_cast<int64_t>(frames.size()), fps, num_frames);
  out.canvas = pipeline::resolve_canvas_size(static_cast<double>(w), static_cast<double>(h), config);
  out.frames.reserve(out.source_frame_index.size());
  // Repeated input frames resize to identical outputs; reuse the previous result.
  for (size_t i = 0; i < out.source_frame_index.size(); ++i) {
    if (i > 0 && out.source_frame_index[i] == out.source_frame_index[i - 1]) {
      out.frames.push_back(out.frames.back());
      continue;
    }
    out.frames.push_back(resize_lanczos(frames[static_cast<size_t>(out.source_frame_index[i])],
                                        out.canvas.width, out.canvas.height));
  }
  return out;
}

int64_t reference_frames_for_encoding(int64_t normalized_frames) {
  return std::min(normalized_frames, pipeline::reference_video_frame_limit(normalized_frames));
}

RgbImage normalize_reference_image(const RgbImage& image, int64_t short_edge, int64_t multiple) {
  const pipeline::Canvas c =
      pipeline::resolve_reference_image_size(image.width, image.height, short_edge, multiple);
  return resize_lanczos(image, c.width, c.height);
}

RgbImage stretch_keyframe(const RgbImage& image, const pipeline::Canvas& canvas) {
  return resize_lanczos(image, canvas.width, canvas.height);
}

CoverCrop cover_crop_geometry(int64_t width, int64_t height, const pipeline::Canvas& canvas) {
  H3_CHECK(width > 0 && height > 0, ErrorCode::kInvalidArgument,
           "last keyframe must have a positive size, got ", width, "x", height);
  H3_CHECK(canvas.width > 0 && canvas.height > 0, ErrorCode::kInvalidArgument,
           "canvas must have a positive size, got ", canvas.width, "x", canvas.height);
  const double sw = static_cast<double>(canvas.width) / static_cast<double>(width);
  const double sh = static_cast<double>(canvas.height) / static_cast<double>(height);
  const double scale = std::max(sw, sh);
  CoverCrop c;
  c.resized_width = std::max<int64_t>(
      canvas.width,
      static_cast<int64_t>(pipeline::round_half_even(static_cast<double>(width) * scale)));
  c.resized_height = std::max<int64_t>(
      canvas.height,
      static_cast<int64_t>(pipeline::round_half_even(static_cast<double>(height) * scale)));
  c.left = (c.resized_width - canvas.width) / 2;  // both non-negative: floor division
  c.top = (c.resized_height - canvas.height) / 2;
  return c;
}

RgbImage cover_crop_keyframe(const RgbImage& image, const pipeline::Canvas& canvas) {
  const CoverCrop g = cover_crop_geometry(image.width, image.height, canvas);
  const RgbImage resized = resize_lanczos(image, g.resized_width, g.resized_height);
  RgbImage out(canvas.width, canvas.height);
  for (int64_t y = 0; y < canvas.height; ++y) {
    std::copy_n(resized.at(g.left, y + g.top), canvas.width * 3, out.at(0, y));
  }
  return out;
}

}  // namespace h3::media
