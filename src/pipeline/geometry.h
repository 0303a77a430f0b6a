// Request geometry: canvas size, frame-count snapping, latent sizes and the duration limits.
//
// Every rule here mirrors the reference pipeline's integer and float64 arithmetic exactly
// (h3_components_spec.md §4.2-4.3, h3_dit_spec.md §4.1), including Python's round-half-even, so
// that a request resolves to the same latent geometry as the reference and hence the same
// packed layout and random draws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace h3::pipeline {

// Fixed by the model (h3_dit_spec.md §4.1).
inline constexpr int64_t kFps = 24;
inline constexpr int64_t kFramesPerChunk = 17;  // pixel frames per VAE clip
inline constexpr int64_t kLatentsPerChunk = 5;  // latent frames per clip; also the "+5" of 17n+5
inline constexpr int64_t kAudioLatentsPerSecond = 40;
inline constexpr int64_t kAudioChannels = 2;            // stereo, one row block per channel
inline constexpr int64_t kAudioSamplesPerLatent = 800;  // at 32 kHz
// The released values. The reference derives both from the repository: the canvas multiple is the
// VAE's spatial compression (the product of its spatial_downsample_factors) times the DiT's patch
// width (2), so a VAE that compresses 8x takes canvases in multiples of 16.
inline constexpr int64_t kCanvasMultiple = 32;
inline constexpr int64_t kVaeSpatialRatio = 16;
inline constexpr int64_t kDitPatch = 2;  // the DiT patch's height and width (packing.h)
inline constexpr double kMinDurationSeconds = 5.0;
inline constexpr double kMaxDurationSeconds = 15.0;

// Canvas settings stored in `modular_model_index.json` (released values by default; the tiny
// checkpoint shrinks them to 64 / 8192 / 64), and the VAE's spatial ratio from `vae/config.json`
// with the canvas multiple it implies (canvas_config_for_vae).
struct CanvasConfig {
  int64_t short_edge = 768;
  int64_t max_pixels = 768 * 1344;
  int64_t reference_image_short_edge = 2048;
  int64_t vae_spatial_ratio = kVaeSpatialRatio;
  int64_t multiple = kCanvasMultiple;  // vae_spatial_ratio * kDitPatch
};

// `config` with the VAE's spatial ratio and the canvas multiple it implies (ratio x patch).
CanvasConfig canvas_config_for_vae(CanvasConfig config, int64_t vae_spatial_ratio);

struct Canvas {
  int64_t height = 0;
  int64_t width = 0;
  bool operator==(const Canvas&) const = default;
};

// Python's round() on a float: nearest integer, ties to even.
double round_half_even(double x);

// `resolve_canvas_size(aspect_w, aspect_h)` (h3_components_spec.md §4.3): the short edge set to
// config.short_edge, scaled down to config.max_pixels when larger, each edge rounded to a multiple
// of config.multiple (32 released; round-half-even, at least one multiple). The ratio must lie in
// [1/4, 4].
Canvas resolve_canvas_size(double aspect_width, double aspect_height,
                           const CanvasConfig& config = {});

// Ref2VA image canvas (h3_dit_spec.md §4.5): scale = short_edge / min(w, h), each side
// max(m, round(side*scale/m)*m) with m the canvas multiple (32 released); the image must lie
// within 1:4 and 4:1.
Canvas resolve_reference_image_size(int64_t width, int64_t height, int64_t short_edge,
                                    int64_t multiple = kCanvasMultiple);

// The target canvas of a request: explicit height/width must come together and be positive
// multiples of config.multiple (32 released); otherwise the canvas of the default aspect.
Canvas resolve_target_canvas(std::optional<int64_t> height, std::optional<int64_t> width,
                             double default_aspect_width, double default_aspect_height,
                             const CanvasConfig& config = {});

// Rounds up to the next 17n + 5 (`align_num_frames`). Throws for frames < 1.
int64_t align_num_frames(int64_t num_frames);

struct FrameCount {
  int64_t requested = 0;
  int64_t frames = 0;  // snapped to 17n + 5
  std::string note;    // non-empty when the count was changed: says from what to what and why
};

// Snaps num_frames up to 17n + 5 and checks 5 s <= frames/24 <= 15 s (after snapping), unless
// allow_any_duration (tests with tiny canvases use 22 frames). Errors name `num_frames` and the
// legal range.
FrameCount resolve_num_frames(int64_t num_frames, bool allow_any_duration = false);

// Latent frames of a 17n + 5 frame video: 5n + 2 (124 -> 37, 192 -> 57). Throws otherwise.
int64_t video_latent_frames(int64_t num_frames);

// Audio latents: round(frames / 24 * 40) with Python's float64 arithmetic and round-half-even
// (124 -> 207, 192 -> 320).
int64_t audio_latent_count(int64_t num_frames);

// A reference video is cut to max(1, (n - 5) // 17) * 17 + 5 frames before encoding
// (h3_components_spec.md §4.5).
int64_t reference_video_frame_limit(int64_t num_frames);

// Reference audio is cut to int(num_frames / 24 * sample_rate) samples at its own rate.
int64_t reference_audio_sample_limit(int64_t num_frames, int64_t sample_rate);

// The resolved geometry of the generated clip.
struct TargetGeometry {
  int64_t height = 0;
  int64_t width = 0;
  int64_t num_frames = 0;     // 17n + 5
  int64_t latent_frames = 0;  // 5n + 2
  int64_t latent_height = 0;  // height / the VAE's spatial ratio (16 released)
  int64_t latent_width = 0;   // width / the VAE's spatial ratio
  int64_t audio_latents = 0;  // N_a
  int64_t rows_per_frame() const { return (latent_height / 2) * (latent_width / 2); }
  int64_t video_rows() const { return latent_frames * rows_per_frame(); }
  int64_t audio_rows() const { return kAudioChannels * audio_latents; }
};

// Latent geometry of a canvas and an already snapped frame count.
TargetGeometry make_target_geometry(const Canvas& canvas, int64_t num_frames,
                                    int64_t vae_spatial_ratio = kVaeSpatialRatio);

}  // namespace h3::pipeline
