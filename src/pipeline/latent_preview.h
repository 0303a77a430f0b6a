// A cheap picture of the predicted clean latents at a denoising step, without the VAE: what the
// server's preview events and `h3 generate --preview` show.
//
// It is a fixed C -> 3 linear map of one latent frame: the channels split into three runs in order
// (with the release's 24: 0-7, 8-15, 16-23; a VAE of another width, such as the trained tiny
// model's 16, splits its own), each run's mean gives red, green and blue, then 128 + 64 * value
// (the latents are normalized, about unit variance), clamped. Fewer than three channels repeat. It
// was chosen as the simplest map that needs no fitted data and still shows where the content of a
// latent frame moves from step to step; its colours are not the video's. A map fitted by least
// squares of decoded RGB on latents (as latent previewers of other diffusion models do) would give
// truer colours and can replace this one without other change.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace h3::pipeline {

// RGB bytes [height, width, 3] with their size.
struct RgbBytes {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> data;
};

// Frame `t` of normalized latents [1, C, T, h, w] (CPU float32) through the fixed map, enlarged
// by nearest neighbour so that its longer side is at least `min_side` pixels.
RgbBytes latent_preview(const Tensor& latents, int64_t t, int64_t min_side = 192);

// Nearest-neighbour resize to width x height.
RgbBytes resize_nearest(const RgbBytes& image, int64_t width, int64_t height);

}  // namespace h3::pipeline
