#include "media/image_io.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/status.h"

// stb_image is compiled into this file only (header-only use of Debian's libstb-dev header), so no
// extra library has to be linked. Its own code is not held to the project's warning flags.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_NO_STDIO
#define STBI_NO_HDR
#define STBI_NO_LINEAR
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_ONLY_GIF
#define STBI_ONLY_PNM
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace h3::media {

namespace {
// Guards against absurd headers before anything is allocated (1:4 aspect limits apply later).
constexpr int64_t kMaxImageSide = 1 << 15;
}  // namespace

RgbImage::RgbImage(int64_t w, int64_t h) : width(w), height(h) {
  H3_CHECK(w > 0 && h > 0, ErrorCode::kInvalidArgument, "image size must be positive, got ", w, "x",
           h);
  pixels.assign(static_cast<size_t>(w * h * 3), 0);
}

RgbImage image_from_tensor(const Tensor& hwc, const std::string& name) {
  H3_CHECK(hwc.defined(), ErrorCode::kInvalidArgument, name, ": image tensor is empty");
  H3_CHECK(hwc.dtype() == DType::kU8 && hwc.dim() == 3 && hwc.shape()[2] == 3,
           ErrorCode::kInvalidArgument, name, ": expected a uint8 [H, W, 3] RGB image, got ",
           hwc.desc());
  H3_CHECK(hwc.device().is_cpu(), ErrorCode::kInvalidArgument, name,
           ": image tensor must be on the CPU, got ", hwc.desc());
  Tensor c = hwc.contiguous();
  RgbImage out(c.shape()[1], c.shape()[0]);
  std::memcpy(out.pixels.data(), c.data<uint8_t>(), out.pixels.size());
  return out;
}

Tensor image_to_tensor(const RgbImage& image) {
  H3_CHECK(image.width > 0 && image.height > 0 &&
               image.pixels.size() == static_cast<size_t>(image.width * image.height * 3),
           ErrorCode::kInvalidArgument, "image of ", image.width, "x", image.height, " holds ",
           image.pixels.size(), " bytes, expected width*height*3");
  Tensor t = Tensor::empty({image.height, image.width, 3}, DType::kU8);
  std::memcpy(t.data<uint8_t>(), image.pixels.data(), image.pixels.size());
  return t;
}

std::vector<RgbImage> frames_from_tensor(const Tensor& fhwc, const std::string& name) {
  H3_CHECK(fhwc.defined() && fhwc.dtype() == DType::kU8 && fhwc.dim() == 4 && fhwc.shape()[3] == 3,
           ErrorCode::kInvalidArgument, name, ": expected uint8 video frames [F, H, W, 3], got ",
           fhwc.defined() ? fhwc.desc() : std::string("an empty tensor"));
  H3_CHECK(fhwc.shape()[0] > 0, ErrorCode::kInvalidArgument, name, ": the video has no frames");
  std::vector<RgbImage> frames;
  frames.reserve(static_cast<size_t>(fhwc.shape()[0]));
  for (int64_t f = 0; f < fhwc.shape()[0]; ++f) {
    frames.push_back(image_from_tensor(fhwc.select(0, f), str_cat(name, " frame ", f)));
  }
  return frames;
}

Tensor frames_to_tensor(const std::vector<RgbImage>& frames) {
  H3_CHECK(!frames.empty(), ErrorCode::kInvalidArgument, "frames_to_tensor: no frames");
  const int64_t w = frames[0].width, h = frames[0].height;
  Tensor t = Tensor::empty({static_cast<int64_t>(frames.size()), h, w, 3}, DType::kU8);
  uint8_t* dst = t.data<uint8_t>();
  for (size_t f = 0; f < frames.size(); ++f) {
    H3_CHECK(frames[f].width == w && frames[f].height == h &&
                 frames[f].pixels.size() == static_cast<size_t>(w * h * 3),
             ErrorCode::kInvalidArgument, "frame ", f, " is ", frames[f].width, "x",
             frames[f].height, ", expected ", w, "x", h, " like frame 0");
    std::memcpy(dst + f * static_cast<size_t>(w * h * 3), frames[f].pixels.data(),
                frames[f].pixels.size());
  }
  return t;
}

RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name) {
  H3_CHECK(data != nullptr && size > 0, ErrorCode::kInvalidFile, name, ": image file is empty");
  H3_CHECK(size <= static_cast<size_t>(INT32_MAX), ErrorCode::kInvalidFile, name,
           ": image file is larger than 2 GiB");
  int w = 0, h = 0, comp = 0;
  if (!stbi_info_from_memory(data, static_cast<int>(size), &w, &h, &comp)) {
    fail(ErrorCode::kInvalidFile, name, ": not a readable PNG/JPEG/BMP/GIF/PNM image (",
         stbi_failure_reason() ? stbi_failure_reason() : "unknown format", ")");
  }
  H3_CHECK(w > 0 && h > 0 && w <= kMaxImageSide && h <= kMaxImageSide, ErrorCode::kInvalidFile,
           name, ": image size ", w, "x", h, " is outside 1..", kMaxImageSide, " pixels per side");
  unsigned char* rgb = stbi_load_from_memory(data, static_cast<int>(size), &w, &h, &comp, 3);
  if (rgb == nullptr) {
    fail(ErrorCode::kInvalidFile, name, ": corrupt image data (",
         stbi_failure_reason() ? stbi_failure_reason() : "decoder error", ")");
  }
  RgbImage out(w, h);
  std::memcpy(out.pixels.data(), rgb, out.pixels.size());
  stbi_image_free(rgb);
  return out;
}

RgbImage read_image(const std::string& path) {
  std::error_code ec;
  H3_CHECK(std::filesystem::is_regular_file(path, ec), ErrorCode::kNotFound, path,
           ": image file not found");
  std::ifstream in(path, std::ios::binary);
  H3_CHECK(in.good(), ErrorCode::kIo, path, ": cannot open image file for reading");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  H3_CHECK(!in.bad(), ErrorCode::kIo, path, ": read error");
  return decode_image(bytes.data(), bytes.size(), path);
}

}  // namespace h3::media
