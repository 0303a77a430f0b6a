// The step preview's latent-to-colour map: three runs of channels in order, each run's mean to one
// of red, green and blue, for the release's 24 latent channels and for other VAE widths (the
// trained tiny model's 16) alike.
#include <gtest/gtest.h>

#include <vector>

#include "pipeline/latent_preview.h"

namespace h3::pipeline {
namespace {

// One latent frame (T = 1) of `channels` x 2 x 3 where channel k holds value(k) everywhere.
template <typename F>
Tensor latents(int64_t channels, F value) {
  std::vector<float> v;
  for (int64_t k = 0; k < channels; ++k)
    for (int i = 0; i < 6; ++i) v.push_back(value(k));
  return Tensor::from_f32(v, Shape({1, channels, 1, 2, 3}));
}

std::vector<int> pixel(const RgbBytes& img, int64_t y, int64_t x) {
  const size_t at = static_cast<size_t>((y * img.width + x) * 3);
  return {img.data[at], img.data[at + 1], img.data[at + 2]};
}

TEST(LatentPreview, ThreeRunsOfChannelsGiveRedGreenAndBlue) {
  // 24 channels: 0-7 at 1 (red 128 + 64), 8-15 at 0, 16-23 at -1 (blue 128 - 64).
  const RgbBytes a = latent_preview(
      latents(24, [](int64_t k) { return k < 8    ? 1.f
                                         : k < 16 ? 0.f
                                                  : -1.f; }), 0, 1);
  EXPECT_EQ(a.height, 2);
  EXPECT_EQ(a.width, 3);
  EXPECT_EQ(pixel(a, 1, 2), (std::vector<int>{192, 128, 64}));
  // 16 channels split 0-4, 5-9, 10-15: channel 4 belongs to red, 10 to blue.
  const RgbBytes b = latent_preview(
      latents(16, [](int64_t k) { return k == 4    ? 2.5f
                                         : k == 10 ? -3.f
                                                   : 0.f; }), 0, 1);
  EXPECT_EQ(pixel(b, 0, 0), (std::vector<int>{160, 128, 96}));
  // One channel: the same value in all three.
  const RgbBytes c = latent_preview(latents(1, [](int64_t) { return 0.5f; }), 0, 1);
  EXPECT_EQ(pixel(c, 0, 1), (std::vector<int>{160, 160, 160}));
  // Enlarged by whole multiples until the longer side reaches min_side.
  const RgbBytes d = latent_preview(latents(24, [](int64_t) { return 0.f; }), 0, 7);
  EXPECT_EQ(d.width, 9);
  EXPECT_EQ(d.height, 6);
}

}  // namespace
}  // namespace h3::pipeline
