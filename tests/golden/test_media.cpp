// Reference media and keyframe parity (golden README "Reference media and keyframe resizing"):
// the 24 fps frame resample (`normalized_reference_{k}_source_frame_index`), the LANCZOS resize of
// video references onto their own canvas (`_frames`), image references (`_image`) and the FL2VA
// keyframes (`keyframe_0` stretched, `keyframe_1` cover-cropped). All uint8 and exact: the bound is
// zero differing bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "io/repo.h"
#include "pipeline/generate.h"
#include "media/image_io.h"
#include "media/reference_media.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3 {
namespace {

// Canvas settings of the checkpoint the e2e cases ran with: the pipeline configuration in its
// index (the shared tiny checkpoint shrinks them to 64 / 8192 / 64), the release's where absent,
// and the canvas multiple of its VAE.
pipeline::CanvasConfig checkpoint_canvas_config() {
  return pipeline::repository_canvas_config(io::Repository::open(test::Golden::get()->checkpoint_dir()));
}

// Counts differing bytes between two uint8 tensors of equal shape and prints the figure.
int64_t expect_bytes_equal(const std::string& name, const Tensor& got, const Tensor& ref) {
  EXPECT_EQ(got.shape(), ref.shape()) << name << ": shape " << shape_str(got.shape())
                                      << " vs golden " << shape_str(ref.shape());
  if (got.shape() != ref.shape()) return -1;
  const Tensor g = got.contiguous(), r = ref.contiguous();
  const uint8_t* a = g.data<uint8_t>();
  const uint8_t* b = r.data<uint8_t>();
  int64_t diff = 0, max_abs = 0;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (a[i] != b[i]) {
      ++diff;
      max_abs = std::max<int64_t>(max_abs, std::abs(int(a[i]) - int(b[i])));
    }
  }
  std::printf("  %s %s: differing bytes=%lld of %lld, max_abs=%lld (bound 0)\n", name.c_str(),
              shape_str(g.shape()).c_str(), static_cast<long long>(diff),
              static_cast<long long>(g.numel()), static_cast<long long>(max_abs));
  EXPECT_EQ(diff, 0) << name << ": LANCZOS output differs from Pillow's";
  return diff;
}

int64_t meta_int(const nlohmann::json& meta, const char* key) {
  EXPECT_TRUE(meta.contains(key) && meta[key].is_number_integer()) << "manifest meta lacks " << key;
  return meta.value(key, int64_t{0});
}

TEST(MediaGolden, ReferenceVideoFramesAndImages) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "e2e");
  const pipeline::CanvasConfig canvas_config = checkpoint_canvas_config();
  int videos = 0, images = 0;
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    const nlohmann::json meta = c.entry.value("meta", nlohmann::json::object());
    // Every reference the case stores, in request order, whichever kind comes first.
    for (int k = 0; k < test::reference_count(*f); ++k) {
      const std::string pre = "input_reference_" + std::to_string(k) + "_";
      const std::string out = "normalized_reference_" + std::to_string(k) + "_";
      if (f->has(pre + "video") && f->has(out + "frames")) {
        const int64_t num_frames = meta_int(meta, "num_frames");
        // A video stored without its rate is at 24 fps (as the e2e requests take it).
        const double fps = f->has(pre + "fps") ? f->tensor(pre + "fps").to_f64_vector().at(0) : 24.0;
        const auto frames = media::frames_from_tensor(f->tensor(pre + "video"), pre + "video");
        const media::NormalizedVideo v =
            media::normalize_reference_video(frames, fps, num_frames, canvas_config);
        std::printf("  %s: reference %d, %zu frames at %.3f fps -> %zu frames on %lldx%lld\n",
                    c.file.c_str(), k, frames.size(), fps, v.frames.size(),
                    static_cast<long long>(v.canvas.height), static_cast<long long>(v.canvas.width));
        if (f->has(out + "source_frame_index")) {
          const std::vector<int64_t> ref = f->tensor(out + "source_frame_index").to_i64_vector();
          EXPECT_EQ(v.source_frame_index, ref) << c.file << ": " << out << "source_frame_index";
        }
        expect_bytes_equal(c.file + ":" + out + "frames", media::frames_to_tensor(v.frames),
                           f->tensor(out + "frames"));
        // The manifest meta records the normalized count and canvas of each video reference.
        if (meta.contains("video_references")) {
          for (const auto& vr : meta["video_references"]) {
            if (vr.value("reference", -1) != k) continue;
            EXPECT_EQ(static_cast<int64_t>(v.frames.size()), vr.value("normalized_frames", -1));
            EXPECT_EQ(v.canvas.height, vr["normalized_hw"][0].get<int64_t>());
            EXPECT_EQ(v.canvas.width, vr["normalized_hw"][1].get<int64_t>());
          }
        }
        // README: the frames are cut to 17n+5 with n = max(1, (F-5)//17) before the VAE (13
        // frames: n = 1, all 13 kept and padded inside encode).
        const int64_t nf = static_cast<int64_t>(v.frames.size());
        const int64_t n17 = std::max<int64_t>(1, (nf - 5) / 17);
        EXPECT_EQ(media::reference_frames_for_encoding(nf), std::min<int64_t>(nf, 17 * n17 + 5));
        ++videos;
      }
      if (f->has(pre + "image") && f->has(out + "image")) {
        const media::RgbImage img = media::image_from_tensor(f->tensor(pre + "image"), pre + "image");
        const media::RgbImage got =
            media::normalize_reference_image(img, canvas_config.reference_image_short_edge, canvas_config.multiple);
        expect_bytes_equal(c.file + ":" + out + "image", media::image_to_tensor(got),
                           f->tensor(out + "image"));
        ++images;
      }
    }
  }
  std::printf("[golden] %d video and %d image reference(s) compared\n", videos, images);
  // A folder whose e2e runs are all text-only has nothing to compare here: a visible skip.
  if (videos + images == 0)
    GTEST_SKIP() << "no e2e case holds normalized reference frames or images";
}

TEST(MediaGolden, Keyframes) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "e2e");
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    if (!f->has("input_image") || !f->has("keyframe_0")) continue;
    const nlohmann::json meta = c.entry.value("meta", nlohmann::json::object());
    const pipeline::Canvas canvas{meta_int(meta, "height"), meta_int(meta, "width")};
    const media::RgbImage first = media::image_from_tensor(f->tensor("input_image"), "input_image");
    // Only the fl2va_resize case hands over keyframes of another size; the others must pass
    // through unchanged (Image.resize to the same size is a copy).
    expect_bytes_equal(c.file + ":keyframe_0",
                       media::image_to_tensor(media::stretch_keyframe(first, canvas)),
                       f->tensor("keyframe_0"));
    ++ran;
    if (f->has("input_last_image") && f->has("keyframe_1")) {
      const media::RgbImage last =
          media::image_from_tensor(f->tensor("input_last_image"), "input_last_image");
      const media::CoverCrop g = media::cover_crop_geometry(last.width, last.height, canvas);
      std::printf("  %s: last keyframe %lldx%lld -> %lldx%lld, crop at (%lld, %lld)\n",
                  c.file.c_str(), static_cast<long long>(last.width),
                  static_cast<long long>(last.height), static_cast<long long>(g.resized_width),
                  static_cast<long long>(g.resized_height), static_cast<long long>(g.left),
                  static_cast<long long>(g.top));
      expect_bytes_equal(c.file + ":keyframe_1",
                         media::image_to_tensor(media::cover_crop_keyframe(last, canvas)),
                         f->tensor("keyframe_1"));
      ++ran;
    }
  }
  std::printf("[golden] %d keyframe(s) compared\n", ran);
  if (ran == 0) GTEST_SKIP() << "no e2e case holds input_image / keyframe_0";
}

}  // namespace
}  // namespace h3
