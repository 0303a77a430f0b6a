#include "pipeline/latent_preview.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace h3::pipeline {

RgbBytes latent_preview(const Tensor& latents, int64_t t, int64_t min_side) {
  H3_CHECK(latents.dim() == 5 && latents.shape()[0] == 1 && latents.shape()[1] >= 1,
           ErrorCode::kInternal, "latent_preview expects [1, C, T, h, w], got ", latents.desc());
  const Tensor x = latents.contiguous().to(DType::kF32);
  const int64_t channels = x.shape()[1], frames = x.shape()[2], h = x.shape()[3], w = x.shape()[4];
  // Colour c averages channels [lo[c], hi[c]).
  int64_t lo[3], hi[3];
  for (int c = 0; c < 3; ++c) {
    lo[c] = channels >= 3 ? c * channels / 3 : c % channels;
    hi[c] = channels >= 3 ? (c + 1) * channels / 3 : lo[c] + 1;
  }
  t = std::clamp<int64_t>(t, 0, frames - 1);
  const float* p = x.data<float>();
  const int64_t plane = h * w;
  const int64_t scale = std::max<int64_t>(1, (min_side + std::max(h, w) - 1) / std::max(h, w));
  RgbBytes out;
  out.height = h * scale;
  out.width = w * scale;
  out.data.resize(static_cast<size_t>(out.height * out.width * 3));
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t xx = 0; xx < w; ++xx) {
      uint8_t rgb[3];
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        for (int64_t ch = lo[c]; ch < hi[c]; ++ch) sum += p[(ch * frames + t) * plane + y * w + xx];
        const double v = 128.0 + 64.0 * (sum / static_cast<double>(hi[c] - lo[c]));
        rgb[c] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 255.0)));
      }
      for (int64_t dy = 0; dy < scale; ++dy)
        for (int64_t dx = 0; dx < scale; ++dx) {
          uint8_t* q =
              &out.data[static_cast<size_t>(((y * scale + dy) * out.width + xx * scale + dx) * 3)];
          q[0] = rgb[0];
          q[1] = rgb[1];
          q[2] = rgb[2];
        }
    }
  }
  return out;
}

RgbBytes resize_nearest(const RgbBytes& in, int64_t width, int64_t height) {
  RgbBytes out;
  out.width = width;
  out.height = height;
  out.data.resize(static_cast<size_t>(width * height * 3));
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x) {
      const int64_t sy = y * in.height / height, sx = x * in.width / width;
      for (int c = 0; c < 3; ++c)
        out.data[static_cast<size_t>((y * width + x) * 3 + c)] =
            in.data[static_cast<size_t>((sy * in.width + sx) * 3 + c)];
    }
  return out;
}

}  // namespace h3::pipeline
