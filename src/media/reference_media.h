// Reference media and keyframe preparation (h3_components_spec.md §4.3; golden README "Reference
// media and keyframe resizing"): a reference video put on 24 fps by whole frames, cut to the
// request and LANCZOS-resized onto the canvas of its own aspect; an image reference sized from its
// short edge; FL2VA keyframes stretched (first) or cover-cropped (last) onto the target canvas.
//
// Sizes come from pipeline/geometry.h (resolve_canvas_size, resolve_reference_image_size,
// reference_video_frame_limit); the resize is media/image_resize.h. All results are exact uint8.
#pragma once

#include <cstdint>
#include <vector>

#include "media/image_io.h"
#include "pipeline/geometry.h"

namespace h3::media {

// Input frame behind each output frame of the 24 fps resample (golden README "Frame rate"):
// s = 24/fps in float64, slot_i = floor(i*s + 0.5), frame i repeated slot_{i+1} - slot_i times
// (end slot floor(F*s + 0.5)), the result cut to max_frames. fps must be positive and finite;
// throws kInvalidArgument when no frame results.
std::vector<int64_t> frame_rate_source_indices(int64_t input_frames, double fps,
                                               int64_t max_frames);

struct NormalizedVideo {
  std::vector<RgbImage> frames;             // on `canvas`, at 24 fps, at most num_frames
  std::vector<int64_t> source_frame_index;  // input frame behind each output frame
  pipeline::Canvas canvas;                  // resolve_canvas_size(W_in, H_in, config)
};

// The video reference of a Ref2VA request: frame-rate resample, cut to num_frames, LANCZOS onto
// resolve_canvas_size(width, height, config). Frames must share one size.
NormalizedVideo normalize_reference_video(const std::vector<RgbImage>& frames, double fps,
                                          int64_t num_frames,
                                          const pipeline::CanvasConfig& config);

// The frames the video VAE encodes: the first reference_video_frame_limit(F) of them, at most F
// (max(1, (F-5)//17)*17 + 5; the encoder pads a shorter clip by repeating the last frame).
int64_t reference_frames_for_encoding(int64_t normalized_frames);

// An image reference: LANCZOS onto resolve_reference_image_size(w, h, short_edge, multiple).
RgbImage normalize_reference_image(const RgbImage& image, int64_t short_edge,
                                   int64_t multiple = pipeline::kCanvasMultiple);

// FL2VA first keyframe: LANCZOS resize to exactly the canvas (aspect not kept).
RgbImage stretch_keyframe(const RgbImage& image, const pipeline::Canvas& canvas);

// FL2VA last keyframe: scale = max(W/w, H/h); LANCZOS to (max(W, round(w*scale)),
// max(H, round(h*scale))) with Python's round-half-even; crop at ((rw-W)//2, (rh-H)//2).
RgbImage cover_crop_keyframe(const RgbImage& image, const pipeline::Canvas& canvas);

// The cover-resize size and crop origin used by cover_crop_keyframe (exposed for tests/logs).
struct CoverCrop {
  int64_t resized_width = 0;
  int64_t resized_height = 0;
  int64_t left = 0;
  int64_t top = 0;
};
CoverCrop cover_crop_geometry(int64_t width, int64_t height, const pipeline::Canvas& canvas);

}  // namespace h3::media
