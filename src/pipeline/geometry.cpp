#include "pipeline/geometry.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace h3::pipeline {

double round_half_even(double x) {
  const double lower = std::floor(x);
  const double diff = x - lower;  // exact for every finite double
  if (diff > 0.5) return lower + 1.0;
  if (diff < 0.5) return lower;
  return std::fmod(lower, 2.0) == 0.0 ? lower : lower + 1.0;
}

namespace {

// max(multiple, round(x / multiple) * multiple), as Python evaluates it.
int64_t round_to_multiple(double x, int64_t multiple) {
  const double q = round_half_even(x / static_cast<double>(multiple));
  return std::max<int64_t>(multiple, static_cast<int64_t>(q) * multiple);
}

}  // namespace

Canvas resolve_canvas_size(double aspect_width, double aspect_height, const CanvasConfig& config) {
  H3_CHECK(aspect_width > 0 && aspect_height > 0 && std::isfinite(aspect_width) &&
               std::isfinite(aspect_height),
           ErrorCode::kInvalidArgument, "aspect ratio must be positive, got ", aspect_width, ":",
           aspect_height);
  H3_CHECK(config.short_edge > 0 && config.max_pixels > 0 && config.multiple > 0, ErrorCode::kInvalidArgument,
           "canvas config: short edge (", config.short_edge, "), max pixels (", config.max_pixels,
           ") and multiple (", config.multiple, ") must be positive");
  const double ratio = aspect_width / aspect_height;
  H3_CHECK(ratio >= 0.25 && ratio <= 4.0, ErrorCode::kInvalidArgument,
           "aspect ratio must lie between 1:4 and 4:1, got ", aspect_width, ":", aspect_height);
  const double edge = static_cast<double>(config.short_edge);
  double width = 0;
  double height = 0;
  if (ratio >= 1.0) {
    width = edge * ratio;
    height = edge;
  } else {
    width = edge;
    height = edge / ratio;
  }
  const double area = width * height;
  const double max_pixels = static_cast<double>(config.max_pixels);
  if (area > max_pixels) {
    // Python's `x ** 0.5` calls pow(), which is not always bit-equal to sqrt().
    const double scale = std::pow(max_pixels / area, 0.5);
    width *= scale;
    height *= scale;
  }
  return Canvas{round_to_multiple(height, config.multiple),
                round_to_multiple(width, config.multiple)};
}

CanvasConfig canvas_config_for_vae(CanvasConfig config, int64_t vae_spatial_ratio) {
  H3_CHECK(vae_spatial_ratio >= 1 && vae_spatial_ratio <= 1024, ErrorCode::kInvalidArgument,
           "the VAE's spatial ratio must be in [1, 1024], got ", vae_spatial_ratio);
  config.vae_spatial_ratio = vae_spatial_ratio;
  config.multiple = vae_spatial_ratio * kDitPatch;
  return config;
}

Canvas resolve_reference_image_size(int64_t width, int64_t height, int64_t short_edge,
                                    int64_t multiple) {
  H3_CHECK(width > 0 && height > 0, ErrorCode::kInvalidArgument,
           "reference image must have a positive size, got ", width, "x", height);
  H3_CHECK(width <= 4 * height && height <= 4 * width, ErrorCode::kInvalidArgument,
           "reference image must lie within 1:4 and 4:1, got ", width, "x", height);
  H3_CHECK(short_edge > 0 && multiple > 0, ErrorCode::kInvalidArgument,
           "reference image short edge and canvas multiple must be positive, got ", short_edge, " and ",
           multiple);
  const double scale =
      static_cast<double>(short_edge) / static_cast<double>(std::min(width, height));
  return Canvas{round_to_multiple(static_cast<double>(height) * scale, multiple),
                round_to_multiple(static_cast<double>(width) * scale, multiple)};
}

Canvas resolve_target_canvas(std::optional<int64_t> height, std::optional<int64_t> width,
                             double default_aspect_width, double default_aspect_height,
                             const CanvasConfig& config) {
  H3_CHECK(height.has_value() == width.has_value(), ErrorCode::kInvalidArgument,
           "--height and --width must be given together, or neither");
  Canvas canvas;
  if (!height) {
    canvas = resolve_canvas_size(default_aspect_width, default_aspect_height, config);
  } else {
    canvas = Canvas{*height, *width};
    H3_CHECK(config.multiple > 0, ErrorCode::kInvalidArgument, "canvas config: the multiple must be positive, got ",
             config.multiple);
    H3_CHECK(canvas.height > 0 && canvas.width > 0 && canvas.height % config.multiple == 0 &&
                 canvas.width % config.multiple == 0,
             ErrorCode::kInvalidArgument, "--height and --width must be positive multiples of ",
             config.multiple, config.multiple == kCanvasMultiple ? "" : " (this model's VAE ratio times the DiT patch)",
             ", got ", canvas.height, "x", canvas.width);
  }
  return canvas;
}

int64_t align_num_frames(int64_t num_frames) {
  H3_CHECK(num_frames >= 1, ErrorCode::kInvalidArgument, "--num-frames must be positive, got ",
           num_frames);
  const int64_t rem = num_frames % kFramesPerChunk;
  const int64_t add = (kLatentsPerChunk - rem + kFramesPerChunk) % kFramesPerChunk;
  return num_frames + add;
}

FrameCount resolve_num_frames(int64_t num_frames, bool allow_any_duration) {
  FrameCount out;
  out.requested = num_frames;
  out.frames = align_num_frames(num_frames);
  if (out.frames != num_frames) {
    out.note = str_cat("num_frames ", num_frames, " snapped up to ", out.frames,
                       " (the video VAE needs 17n+5 frames)");
  }
  if (!allow_any_duration) {
    const double seconds = static_cast<double>(out.frames) / static_cast<double>(kFps);
    H3_CHECK(seconds >= kMinDurationSeconds && seconds <= kMaxDurationSeconds,
             ErrorCode::kInvalidArgument, "--num-frames ", num_frames, " (", out.frames,
             " after snapping to 17n+5) lasts ", seconds, " s at ", kFps,
             " fps; the model generates 5-15 s, i.e. 124 to 345 frames");
  }
  return out;
}

int64_t video_latent_frames(int64_t num_frames) {
  H3_CHECK(num_frames >= kLatentsPerChunk && num_frames % kFramesPerChunk == kLatentsPerChunk,
           ErrorCode::kInvalidArgument, "num_frames must be of the form 17n+5, got ", num_frames);
  return (num_frames - kLatentsPerChunk) / kFramesPerChunk * kLatentsPerChunk + 2;
}

int64_t audio_latent_count(int64_t num_frames) {
  H3_CHECK(num_frames >= 1, ErrorCode::kInvalidArgument, "num_frames must be positive, got ",
           num_frames);
  // Python: round(num_frames / 24 * 40), two float64 roundings then round-half-even.
  const double x = static_cast<double>(num_frames) / static_cast<double>(kFps) *
                   static_cast<double>(kAudioLatentsPerSecond);
  return static_cast<int64_t>(round_half_even(x));
}

int64_t reference_video_frame_limit(int64_t num_frames) {
  H3_CHECK(num_frames >= 1, ErrorCode::kInvalidArgument,
           "a reference video must have at least one frame, got ", num_frames);
  // Python floor division: (n - 5) // 17 is negative for n < 5.
  const int64_t d = num_frames - kLatentsPerChunk;
  const int64_t q = d >= 0 ? d / kFramesPerChunk : -((-d + kFramesPerChunk - 1) / kFramesPerChunk);
  return std::max<int64_t>(1, q) * kFramesPerChunk + kLatentsPerChunk;
}

int64_t reference_audio_sample_limit(int64_t num_frames, int64_t sample_rate) {
  H3_CHECK(num_frames >= 1 && sample_rate > 0, ErrorCode::kInvalidArgument,
           "reference audio: num_frames (", num_frames, ") and sample rate (", sample_rate,
           ") must be positive");
  const double seconds = static_cast<double>(num_frames) / static_cast<double>(kFps);
  return static_cast<int64_t>(seconds * static_cast<double>(sample_rate));  // int() truncates
}

TargetGeometry make_target_geometry(const Canvas& canvas, int64_t num_frames,
                                    int64_t vae_spatial_ratio) {
  H3_CHECK(vae_spatial_ratio > 0 && canvas.height > 0 && canvas.width > 0 &&
               canvas.height % (kDitPatch * vae_spatial_ratio) == 0 &&
               canvas.width % (kDitPatch * vae_spatial_ratio) == 0,
           ErrorCode::kInvalidArgument, "canvas ", canvas.height, "x", canvas.width,
           ": --height and --width must be positive multiples of ", kDitPatch * vae_spatial_ratio,
           " (the VAE's spatial ratio ", vae_spatial_ratio, " times the DiT's 2x2 patch)");
  TargetGeometry g;
  g.height = canvas.height;
  g.width = canvas.width;
  g.num_frames = num_frames;
  g.latent_frames = video_latent_frames(num_frames);
  g.latent_height = canvas.height / vae_spatial_ratio;
  g.latent_width = canvas.width / vae_spatial_ratio;
  g.audio_latents = audio_latent_count(num_frames);
  return g;
}

}  // namespace h3::pipeline
