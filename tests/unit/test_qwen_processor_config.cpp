// Qwen processor configuration (components spec §1.4): processor_config.json sections and the flat
// preprocessor_config.json form parse; malformed files are refused with kInvalidFile naming the
// file and the field; a processor whose patch geometry disagrees with the vision tower is refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "media/qwen_processor.h"
#include "models/qwen3_vl/qwen3_vl_config.h"

namespace h3::media {
namespace {

using nlohmann::json;

const char* kFile = "processor/processor_config.json";

json processor_section() {
  return json{{"do_convert_rgb", true},
              {"do_normalize", true},
              {"do_rescale", true},
              {"do_resize", true},
              {"image_mean", {0.5, 0.5, 0.5}},
              {"image_std", {0.5, 0.5, 0.5}},
              {"merge_size", 2},
              {"patch_size", 16},
              {"resample", 3},
              {"rescale_factor", 0.00392156862745098},
              {"size", {{"longest_edge", 16777216}, {"shortest_edge", 65536}}},
              {"temporal_patch_size", 2}};
}

json processor_json() {
  json j;
  j["image_processor"] = processor_section();
  j["video_processor"] = processor_section();
  j["video_processor"]["size"] = {{"longest_edge", 25165824}, {"shortest_edge", 4096}};
  return j;
}

// Expects kInvalidFile with every string of `parts` in the message.
void expect_refused(const json& j, const std::string& section, const std::vector<std::string>& parts,
                    const std::string& what) {
  try {
    (void)QwenProcessorConfig::from_json(j, section, kFile);
    ADD_FAILURE() << what << ": accepted";
  } catch (const Error& e) {
    std::printf("  %s -> %s\n", what.c_str(), e.what());
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << what << ": " << e.what();
    for (const auto& p : parts) {
      EXPECT_NE(e.message().find(p), std::string::npos)
          << what << ": message lacks \"" << p << "\": " << e.what();
    }
  }
}

template <typename Edit>
json edited(const std::string& section, Edit&& edit) {
  json j = processor_json();
  edit(j[section]);
  return j;
}

TEST(QwenProcessorConfig, ParsesBothSectionsAndTheFlatForm) {
  const json j = processor_json();
  const QwenProcessorConfig img = QwenProcessorConfig::from_json(j, "image_processor", kFile);
  EXPECT_EQ(img.patch_size, 16);
  EXPECT_EQ(img.merge_size, 2);
  EXPECT_EQ(img.temporal_patch_size, 2);
  EXPECT_EQ(img.min_pixels, 65536);
  EXPECT_EQ(img.max_pixels, 16777216);
  const QwenProcessorConfig vid = QwenProcessorConfig::from_json(j, "video_processor", kFile);
  EXPECT_EQ(vid.min_pixels, 4096);
  EXPECT_EQ(vid.max_pixels, 25165824);
  // preprocessor_config.json holds the image processor's fields at the top level.
  const QwenProcessorConfig flat =
      QwenProcessorConfig::from_json(processor_section(), "", "processor/preprocessor_config.json");
  EXPECT_EQ(flat.min_pixels, 65536);
  EXPECT_DOUBLE_EQ(flat.std[2], 0.5);
}

TEST(QwenProcessorConfig, RefusesMissingFields) {
  for (const char* field : {"patch_size", "merge_size", "temporal_patch_size", "rescale_factor",
                            "image_mean", "image_std", "size"}) {
    expect_refused(edited("image_processor", [&](json& s) { s.erase(field); }), "image_processor",
                   {kFile, std::string("image_processor.") + field}, std::string("no ") + field);
  }
  expect_refused(edited("video_processor", [](json& s) { s["size"].erase("shortest_edge"); }),
                 "video_processor", {kFile, "video_processor.size.shortest_edge"},
                 "no size.shortest_edge");
  json no_section = processor_json();
  no_section.erase("video_processor");
  expect_refused(no_section, "video_processor", {kFile, "video_processor"}, "no video section");
  json flat = processor_section();
  flat.erase("patch_size");
  expect_refused(flat, "", {kFile, "patch_size"}, "flat form without patch_size");
}

TEST(QwenProcessorConfig, RefusesWrongTypes) {
  expect_refused(edited("image_processor", [](json& s) { s["patch_size"] = "16"; }),
                 "image_processor", {kFile, "image_processor.patch_size"}, "patch_size as string");
  expect_refused(edited("image_processor", [](json& s) { s["merge_size"] = 2.5; }),
                 "image_processor", {kFile, "image_processor.merge_size"}, "fractional merge_size");
  expect_refused(edited("image_processor", [](json& s) { s["rescale_factor"] = "1/255"; }),
                 "image_processor", {kFile, "image_processor.rescale_factor"},
                 "rescale_factor as string");
  expect_refused(edited("image_processor", [](json& s) { s["image_mean"] = {0.5, 0.5}; }),
                 "image_processor", {kFile, "image_processor.image_mean", "3"},
                 "image_mean of 2 values");
  expect_refused(edited("image_processor", [](json& s) { s["image_std"] = {0.5, "x", 0.5}; }),
                 "image_processor", {kFile, "image_processor.image_std"}, "image_std with a string");
  expect_refused(edited("image_processor", [](json& s) { s["size"] = 448; }), "image_processor",
                 {kFile, "image_processor.size.shortest_edge"}, "size as a number");
  expect_refused(edited("image_processor", [](json& s) { s["resample"] = "bicubic"; }),
                 "image_processor", {kFile, "image_processor.resample"}, "resample as string");
}

TEST(QwenProcessorConfig, RefusesInconsistentValues) {
  expect_refused(edited("image_processor",
                        [](json& s) {
                          s["size"]["shortest_edge"] = 1 << 20;
                          s["size"]["longest_edge"] = 1 << 16;
                        }),
                 "image_processor",
                 {kFile, "image_processor.size.shortest_edge", "image_processor.size.longest_edge"},
                 "min_pixels > max_pixels");
  expect_refused(edited("image_processor", [](json& s) { s["size"]["shortest_edge"] = 0; }),
                 "image_processor", {kFile, "shortest_edge"}, "zero min_pixels");
  expect_refused(edited("image_processor", [](json& s) { s["patch_size"] = 0; }), "image_processor",
                 {kFile, "image_processor.patch_size"}, "zero patch_size");
  expect_refused(edited("video_processor", [](json& s) { s["temporal_patch_size"] = -2; }),
                 "video_processor", {kFile, "video_processor.temporal_patch_size"},
                 "negative temporal_patch_size");
  expect_refused(edited("image_processor", [](json& s) { s["image_std"] = {0.5, 0.0, 0.5}; }),
                 "image_processor", {kFile, "image_processor.image_std"}, "zero std");
  expect_refused(edited("image_processor", [](json& s) { s["rescale_factor"] = 0; }),
                 "image_processor", {kFile, "image_processor.rescale_factor"}, "zero rescale");
  expect_refused(edited("image_processor", [](json& s) { s["resample"] = 2; }), "image_processor",
                 {kFile, "image_processor.resample", "bicubic"}, "bilinear resample");
}

TEST(QwenProcessorConfig, MustMatchTheVisionTower) {
  const QwenProcessorConfig ok =
      QwenProcessorConfig::from_json(processor_json(), "image_processor", kFile);
  qwen3_vl::VisionConfig v;
  v.patch_size = 16;
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  check_processor_matches_vision(ok, v, kFile, "image_processor");  // consistent: no error
  struct Case {
    const char* field;
    void (*edit)(qwen3_vl::VisionConfig&);
  };
  const Case cases[] = {
      {"image_processor.patch_size", [](qwen3_vl::VisionConfig& c) { c.patch_size = 14; }},
      {"image_processor.temporal_patch_size",
       [](qwen3_vl::VisionConfig& c) { c.temporal_patch_size = 1; }},
      {"image_processor.merge_size", [](qwen3_vl::VisionConfig& c) { c.spatial_merge_size = 4; }},
  };
  for (const Case& c : cases) {
    qwen3_vl::VisionConfig bad = v;
    c.edit(bad);
    try {
      check_processor_matches_vision(ok, bad, kFile, "image_processor");
      ADD_FAILURE() << c.field << ": mismatch accepted";
    } catch (const Error& e) {
      std::printf("  %s mismatch -> %s\n", c.field, e.what());
      EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
      EXPECT_NE(e.message().find(kFile), std::string::npos) << e.what();
      EXPECT_NE(e.message().find(c.field), std::string::npos) << e.what();
      EXPECT_NE(e.message().find("vision_config"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace h3::media
