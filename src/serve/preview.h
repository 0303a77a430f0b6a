// Cheap pictures for the server: a per-step preview from the predicted clean latents (no VAE), the
// thumbnail of a finished video, both as JPEG, and base64 for server-sent events.
//
// The preview is a fixed 24 -> 3 linear map of one latent frame, not the VAE decoder: channels
// 0-7 averaged give red, 8-15 green, 16-23 blue, then 128 + 64 * value (the latents are normalized,
// about unit variance), clamped. It was chosen as the simplest map that needs no fitted data and
// shows where the content of each latent frame moves from step to step; its colours are not the
// video's. A map fitted by least squares of decoded RGB on latents (as latent previewers of other
// diffusion models do) would give truer colours and can replace kLatentToRgb without other change.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3::serve {

// RGB bytes [height, width, 3] with their size.
struct RgbBytes {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> data;
};

// Frame `t` of normalized latents [1, 24, T, h, w] (CPU float32) through the fixed map, enlarged
// by nearest neighbour so that its longer side is at least `min_side` pixels.
RgbBytes latent_preview(const Tensor& latents, int64_t t, int64_t min_side = 192);

// One frame of uint8 [n, H, W, 3] (CPU).
RgbBytes frame_image(const Tensor& frames, int64_t index);

// Baseline JPEG bytes (TurboJPEG). Throws h3::Error kInternal when the encoder fails.
std::string encode_jpeg(const RgbBytes& image, int quality = 80);

std::string base64_encode(const std::string& bytes);

}  // namespace h3::serve
