// Bicubic antialiased resize of uint8 images, as the Qwen3-VL processors of transformers 5.x do
// it (h3_components_spec.md §1.4 "bicubic resize when needed").
//
// The processors are torchvision-backed: a PIL image or uint8 array becomes a uint8 tensor
// [.., C, H, W] on the CPU and `torchvision.transforms.v2.functional.resize(..., BICUBIC,
// antialias=True)` resizes it. For uint8 bicubic on the CPU torchvision keeps the uint8 dtype
// and calls torch's `interpolate(mode="bicubic", antialias=True, align_corners=False)` natively,
// which runs separably, the width pass first, then the height pass, each rounding to uint8:
//  * per output index i: scale = in/out, support = 2*scale when downscaling (2 otherwise),
//    center = scale*(i + 0.5), taps [xmin, xmin + n) with xmin = max(trunc(center - support +
//    0.5), 0) and n = min(trunc(center + support + 0.5), in) - xmin; weight of tap j =
//    cubic((j + xmin - center + 0.5) / max(scale, 1)) with the Keys kernel a = -0.5, normalized
//    to sum 1 (all in float64);
//  * the weights of a pass become int16 fixed point with `precision` fractional bits: the first
//    p = 0, 1, ..., 22 for which round(max_weight * 2^(p+1)) >= 2^15 (so the largest weight
//    still fits int16), each weight rounded half away from zero;
//  * an output sample is (2^(precision-1) + sum src*weight) >> precision (arithmetic shift),
//    clamped to [0, 255].
// A pass whose size is unchanged is skipped; equal sizes return the input unchanged.
//
// The golden data does not cover the processors' own resizes (golden README "Not covered": the
// inputs already meet the processors' pixel floors); the unit tests check this against an
// independent float64 evaluation of the same definition.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace h3::media {

// Taps of one resampling pass.
struct BicubicTaps {
  int64_t in_size = 0;
  int64_t out_size = 0;
  int64_t ksize = 0;               // taps stored per output sample
  int precision = 0;               // fractional bits of `weights`
  std::vector<int64_t> first;      // [out_size] first input index
  std::vector<int64_t> count;      // [out_size] taps used
  std::vector<double> weights_f64; // [out_size * ksize] normalized float64 weights
  std::vector<int16_t> weights;    // [out_size * ksize] fixed point
};

// Keys cubic convolution kernel with a = -0.5 (the antialiased bicubic filter).
double bicubic_aa_filter(double x);

// Taps for resizing `in_size` samples to `out_size`. Throws kInvalidArgument for sizes < 1.
BicubicTaps bicubic_aa_taps(int64_t in_size, int64_t out_size);

// Resizes uint8 [..., H, W, C] (channels last, any leading dims: frames) to [..., out_h, out_w, C].
// Throws kInvalidArgument for another dtype, fewer than 3 dims, an empty image or a target size
// < 1.
Tensor resize_bicubic_aa_u8(const Tensor& hwc, int64_t out_h, int64_t out_w);

}  // namespace h3::media
