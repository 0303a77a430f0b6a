// Pictures for the server: the per-step preview (pipeline/latent_preview.h) and the thumbnail of a
// finished video as JPEG, and base64 for server-sent events.
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "pipeline/latent_preview.h"

namespace h3::serve {

using pipeline::latent_preview;
using pipeline::RgbBytes;

// One frame of uint8 [n, H, W, 3] (CPU).
RgbBytes frame_image(const Tensor& frames, int64_t index);

// Baseline JPEG bytes (TurboJPEG). Throws h3::Error kInternal when the encoder fails.
std::string encode_jpeg(const RgbBytes& image, int quality = 80);

std::string base64_encode(const std::string& bytes);

}  // namespace h3::serve
