// Pillow's `Image.resize(size, Image.LANCZOS)` on 8-bit RGB, bit for bit (golden README "Reference
// media and keyframe resizing": every resized uint8 array is Pillow's output).
//
// Pillow resamples separably, horizontal pass first then vertical, each pass rounding to uint8.
// Per output sample it builds a Lanczos-3 window (support 3 scaled by the downscale factor, none
// when upscaling) centred at in0 + (x + 0.5) * scale over input taps [xmin, xmin + n), normalizes
// the float64 weights to sum 1, converts them to fixed point with 22 fractional bits (rounded half
// away from zero), accumulates in int32 starting from a half and shifts right with clipping to
// [0, 255]. A pass whose size is unchanged is skipped; equal sizes return a copy.
#pragma once

#include <cstdint>
#include <vector>

#include "media/image_io.h"

namespace h3::media {

// Filter taps of one resampling pass, as Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc`.
struct ResampleCoefficients {
  int64_t in_size = 0;
  int64_t out_size = 0;
  int64_t ksize = 0;             // taps stored per output sample
  std::vector<int32_t> first;    // [out_size] first input index
  std::vector<int32_t> count;    // [out_size] taps used
  std::vector<int32_t> weights;  // [out_size * ksize] fixed point, 22 fractional bits
};

inline constexpr int kResamplePrecisionBits = 32 - 8 - 2;

ResampleCoefficients lanczos_coefficients(int64_t in_size, int64_t out_size);

// Resizes to width x height with Pillow's LANCZOS. Throws kInvalidArgument for an empty image or a
// non-positive target size.
RgbImage resize_lanczos(const RgbImage& image, int64_t width, int64_t height);

}  // namespace h3::media
