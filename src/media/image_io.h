// Host RGB images and reading PNG/JPEG/BMP files (h3_components_spec.md §4.3: keyframes and image
// references are loaded and converted to RGB before any resize).
//
// Images are 8-bit interleaved RGB, row-major (H x W x 3), the layout the golden data stores
// (`input_image`, `keyframe_*`) and the layout Pillow's `Image.resize` works on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3::media {

struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3, row-major RGB

  RgbImage() = default;
  RgbImage(int64_t w, int64_t h);  // zero-filled; throws kInvalidArgument for a non-positive side
  uint8_t* at(int64_t x, int64_t y) { return pixels.data() + (y * width + x) * 3; }
  const uint8_t* at(int64_t x, int64_t y) const { return pixels.data() + (y * width + x) * 3; }
  bool operator==(const RgbImage&) const = default;
};

// [H, W, 3] uint8 CPU tensor <-> RgbImage. `name` appears in errors (e.g. "input_image").
RgbImage image_from_tensor(const Tensor& hwc, const std::string& name = "image");
Tensor image_to_tensor(const RgbImage& image);

// [F, H, W, 3] uint8 <-> frames of equal size. Throws for an empty list or unequal sizes.
std::vector<RgbImage> frames_from_tensor(const Tensor& fhwc, const std::string& name = "video");
Tensor frames_to_tensor(const std::vector<RgbImage>& frames);

// Decodes a PNG, JPEG, BMP, GIF (first frame) or PNM file to RGB: gray and palette images are
// expanded and an alpha channel is dropped, as PIL's convert("RGB") does for opaque inputs.
// EXIF orientation is not applied. Throws kNotFound for a missing file and kInvalidFile naming the
// file and the decoder's reason for an unreadable or corrupt one.
RgbImage read_image(const std::string& path);
// Same from bytes in memory; `name` is used in errors.
RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name);

}  // namespace h3::media
