// Attribute estimators for the tiny synthetic clips (tiny_clips.h, tools/train_tiny/SPEC.md):
// from decoded frames and a waveform alone, the object's colour, shape and motion and the tone's
// pitch. They judge a trained model's output, which is blurred and noisy, so every decision is
// taken with a wide margin and pooled over frames:
//
//   object:  per frame, the background is the median of the border pixels; the object's colour is
//            the median of the pixels farthest from it; a pixel's coverage is its projection on
//            the background-to-object axis, the object is the largest 4-connected region of
//            coverage above one half (a blurred edge keeps its half-contrast contour).
//   colour:  the median over frames of the object's core colour (coverage above 3/4), nearest
//            palette colour in RGB.
//   shape:   a triangle when the median over frames of the narrower over the wider of the
//            object's top and bottom thirds (mean row widths) is below 0.54 (1/5 sharp, circles
//            and squares near 1); otherwise the median of area / bounding-box area tells a circle
//            (pi/4 sharp) from a square (1), split at 0.86. The splits sit between the ranges
//            measured on clean and blurred, noisy clips and on the trained VAE's reconstructions.
//   motion:  the centroid track; a bounce when it turns back by more than 10 % of the frame height
//            (or width) along either axis; otherwise the larger net displacement's direction.
//   pitch:   the magnitude spectrum of the channel mean (Hann window), its peak between 150 and
//            1200 Hz, the palette tone nearest in log frequency (tones are a fifth apart, the
//            decision boundary is a factor 1.22 away).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "eval/tiny_clips.h"

namespace h3::eval {

struct ColourEstimate {
  Colour colour = Colour::kRed;
  double rgb[3] = {0, 0, 0};  // the measured object colour
  double distance = 0;        // to the chosen palette colour
};

struct ShapeEstimate {
  ShapeKind shape = ShapeKind::kCircle;
  double fill = 0;   // median area / bounding-box area
  double taper = 1;  // median of the narrower over the wider of the top and bottom thirds' widths
};

struct MotionEstimate {
  Motion motion = Motion::kLeft;
  double dx = 0, dy = 0;  // net displacement in pixels (last frames minus first frames)
  double reversal = 0;    // largest turn-back in pixels along either axis
};

struct PitchEstimate {
  Colour colour = Colour::kRed;  // whose tone it is
  double peak_hz = 0;
};

struct AttributeEstimate {
  std::optional<ColourEstimate> colour;  // empty when no object was found in any frame
  std::optional<ShapeEstimate> shape;
  std::optional<MotionEstimate> motion;  // empty with fewer than two frames showing the object
  PitchEstimate pitch;
  int64_t object_frames = 0;  // frames in which an object was found
};

// Frames: uint8 [F, H, W, 3] on the CPU, F >= 2, H and W >= 8. Throws kInvalidArgument otherwise.
// Returns empty estimates (not errors) when no object stands out of the background.
std::optional<ColourEstimate> estimate_colour(const Tensor& frames);
std::optional<ShapeEstimate> estimate_shape(const Tensor& frames);
std::optional<MotionEstimate> estimate_motion(const Tensor& frames);
// Audio: float32 [C, S] on the CPU, C in {1, 2}, at least 0.1 s at `sample_rate` > 0; finite.
PitchEstimate estimate_pitch(const Tensor& audio, int64_t sample_rate);
// All four (the frames are segmented once).
AttributeEstimate estimate_attributes(const Tensor& frames, const Tensor& audio,
                                      int64_t sample_rate);

}  // namespace h3::eval
