// The CPU bf16 emulation of the Qwen3-VL vision path (TOLERANCES.md "GPU paths": the floor that
// bounds the GPU run): the vision tower loaded in bfloat16 rounds where the released bf16
// encoder rounds (§1.5: bf16 patch embedding and blocks, float32 ViT rotary cast back, float32
// position interpolation cast once). Prints the floor per tensor for the presentation cases
// (merged tokens, DeepStack features, hidden_states[50] of the prompt) and checks a sanity
// ceiling; the text-only figure is printed by test_conditioner.cpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "models/qwen3_vl/qwen3_vl_model.h"
#include "models/qwen3_vl/qwen3_vl_vision.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3 {
namespace {

constexpr double kSanityL2 = 5e-2;  // bf16 emulation vs float32 golden: sanity ceiling only

std::vector<qwen3_vl::GridThw> grids(const io::SafetensorsFile& f, const std::string& name) {
  std::vector<qwen3_vl::GridThw> out;
  if (!f.has(name)) return out;
  const std::vector<int64_t> v = f.tensor(name).to_i64_vector();
  for (size_t i = 0; i + 2 < v.size(); i += 3) out.push_back({v[i], v[i + 1], v[i + 2]});
  return out;
}

void print_floor(const std::string& name, const Tensor& got, const Tensor& ref) {
  EXPECT_EQ(got.dtype(), DType::kBF16) << name;
  const test::Metrics d = test::compare(got.to(DType::kF32), ref);
  std::printf("  %-32s bf16 emulation floor: %s (sanity ceiling rel_l2 %.0e)\n", name.c_str(),
              test::format_metrics(d).c_str(), kSanityL2);
  EXPECT_LE(d.rel_l2, kSanityL2) << name;
  EXPECT_GT(d.rel_l2, 0.0) << name << ": no rounding happened";
  EXPECT_EQ(d.nonfinite, 0) << name;
}

TEST(ConditionerBf16Golden, VisionEmulationFloor) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "conditioner_presentation");
  H3_GOLDEN_OUTPUTS_APPLY_OR_SKIP("text_encoder");
  const std::string dir = test::Golden::get()->checkpoint_dir() + "/text_encoder";
  const qwen3_vl::Qwen3VlModel m = qwen3_vl::Qwen3VlModel::load(dir, DType::kBF16);
  int vision_cases = 0;
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    std::printf("%s:\n", c.file.c_str());
    const Tensor pv = f->has("pixel_values") ? f->tensor("pixel_values") : Tensor();
    const Tensor pvv = f->has("pixel_values_videos") ? f->tensor("pixel_values_videos") : Tensor();
    const auto image_grids = grids(*f, "image_grid_thw");
    if (pv.defined() && f->has("visual.pooler_output")) {
      ++vision_cases;
      const qwen3_vl::VisionOutput out = m.vision().forward(pv, image_grids);
      for (size_t i = 0; i < out.deepstack.size(); ++i) {
        const std::string name = "visual.deepstack_features." + std::to_string(i);
        if (f->has(name)) print_floor(name, out.deepstack[i], f->tensor(name));
      }
      print_floor("visual.pooler_output", out.tokens, f->tensor("visual.pooler_output"));
    }
    const Tensor out = m.encode(f->tensor("input_ids").to_i64_vector(), pv, image_grids, pvv,
                                grids(*f, "video_grid_thw"));
    const Tensor ref = f->tensor("hidden_state_50");
    print_floor("hidden_state_50", out, ref.dim() == 3 ? ref.select(0, 0) : ref);
  }
  std::printf("vision tower figures for %d case(s)\n", vision_cases);
}

}  // namespace
}  // namespace h3
