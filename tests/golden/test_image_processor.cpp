// Qwen3-VL image preprocessing against the golden `image_processor` cases (golden README
// components qwen_image_processor_*; h3_components_spec.md §1.4): uint8 image -> pixel_values and
// image_grid_thw. Bound from TOLERANCES.md: grid exact, pixel values rel_max/rel_l2 <= 1e-5.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/status.h"
#include "io/repo.h"
#include "media/qwen_processor.h"
#include "support/golden.h"

namespace h3 {
namespace {

constexpr double kBound = 1e-5;

media::QwenProcessorConfig image_config() {
  const std::string file =
      test::Golden::get()->checkpoint_dir() + "/processor/processor_config.json";
  return media::QwenProcessorConfig::from_json(io::read_json_file(file), "image_processor", file);
}

TEST(QwenImageProcessorGolden, PixelValuesAndGrid) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "image_processor");
  const media::QwenProcessorConfig cfg = image_config();
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    ASSERT_TRUE(f->has("image_uint8") && f->has("pixel_values") && f->has("image_grid_thw"))
        << c.file;
    const media::QwenPixels out = media::qwen_process_image(f->tensor("image_uint8"), cfg);
    const std::vector<int64_t> g = f->tensor("image_grid_thw").to_i64_vector();
    ASSERT_EQ(g.size(), 3u);
    std::printf("%s: grid (%lld, %lld, %lld)\n", c.file.c_str(), static_cast<long long>(out.grid.t),
                static_cast<long long>(out.grid.h), static_cast<long long>(out.grid.w));
    EXPECT_EQ(out.grid.t, g[0]);
    EXPECT_EQ(out.grid.h, g[1]);
    EXPECT_EQ(out.grid.w, g[2]);
    const Tensor ref = f->tensor("pixel_values");
    ASSERT_EQ(out.pixel_values.shape(), ref.shape()) << c.file;
    test::expect_close(c.file + ":pixel_values", out.pixel_values, ref, kBound, kBound);
  }
}

TEST(QwenImageProcessorGolden, SmartResizeAndRefusals) {
  // Sizes already valid stay; others round to multiples of 32 within the budget.
  EXPECT_EQ(media::qwen_smart_resize(64, 96, 32, 1024, 16777216), (std::array<int64_t, 2>{64, 96}));
  EXPECT_EQ(media::qwen_smart_resize(50, 70, 32, 1024, 16777216), (std::array<int64_t, 2>{64, 64}));
  EXPECT_EQ(media::qwen_smart_resize(768, 1344, 32, 65536, 16777216),
            (std::array<int64_t, 2>{768, 1344}));
  media::QwenProcessorConfig cfg;
  cfg.min_pixels = 1024;
  // 50x70 is resized (bicubic) to its smart_resize size 64x64: grid (1, 4, 4).
  const media::QwenPixels resized =
      media::qwen_process_image(Tensor::zeros({50, 70, 3}, DType::kU8), cfg);
  EXPECT_TRUE(resized.grid.t == 1 && resized.grid.h == 4 && resized.grid.w == 4);
  // Below the factor (no valid resize) and not [H, W, 3]: refused.
  const Tensor tiny = Tensor::zeros({20, 70, 3}, DType::kU8);
  const Tensor bad = Tensor::zeros({64, 64}, DType::kU8);
  for (const Tensor* t : {&tiny, &bad}) {
    try {
      (void)media::qwen_process_image(*t, cfg);
      ADD_FAILURE() << "expected an error for " << t->desc();
    } catch (const Error& e) {
      std::printf("  error: %s\n", e.what());
    }
  }
}

}  // namespace
}  // namespace h3
