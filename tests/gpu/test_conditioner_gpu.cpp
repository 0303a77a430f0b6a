// The Qwen3-VL conditioner on the GPU against the golden `conditioner_text` and
// `conditioner_presentation` cases (TOLERANCES.md, "GPU paths"): per tensor, rel_l2 <= 3x the
// rel_l2 that the CPU oracle makes in bf16 emulation on the same case (the floor, measured here
// with the same weights and inputs, not assumed). The table's extra 2e-2 ceiling is per DiT call;
// it is not applied here: the tiny encoder's 50 random layers put the emulation floor of
// hidden_states[50] itself at 1.9e-2..2.8e-2 (test_conditioner*.cpp print it), so a 2e-2 cap
// would ask the GPU to beat the emulation. The tensors: text
// hidden_states[50], the vision tower's merged tokens and DeepStack features for the keyframe /
// reference images, and hidden_states[50] of the prompts that carry them.
// Also: the float32 policy on the GPU meets the float32 bound (1e-5), and release() gives the
// device memory back (repeated load/release cycles do not lose memory). Skips visibly without a
// CUDA device or golden data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "io/safetensors.h"
#include "models/qwen3_vl/qwen3_vl_model.h"
#include "models/qwen3_vl/qwen3_vl_vision.h"
#include "support/golden.h"

namespace h3 {
namespace {

using qwen3_vl::GridThw;
using qwen3_vl::Qwen3VlModel;

#define H3_REQUIRE_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine"

constexpr double kF32Bound = 1e-5;  // float32 engine bound (rel_max and rel_l2)

std::string encoder_dir() { return test::Golden::get()->checkpoint_dir() + "/text_encoder"; }

// One model per (device, dtype), loaded once for the whole binary.
const Qwen3VlModel& model(Device dev, DType dtype) {
  static std::map<std::string, std::unique_ptr<Qwen3VlModel>> cache;
  const std::string key = dev.str() + dtype_name(dtype);
  auto it = cache.find(key);
  if (it == cache.end()) {
    it = cache
             .emplace(key, std::make_unique<Qwen3VlModel>(
                               Qwen3VlModel::load(encoder_dir(), dtype, dev)))
             .first;
  }
  return *it->second;
}

Tensor host(const Tensor& t) { return t.to(Device::cpu()).to(DType::kF32); }
// [1, L, C] golden tensor as [L, C].
Tensor unbatch(const Tensor& t) { return t.dim() == 3 ? t.select(0, 0) : t; }

std::vector<GridThw> grids(const io::SafetensorsFile& f, const std::string& name) {
  std::vector<GridThw> out;
  if (!f.has(name)) return out;
  const std::vector<int64_t> v = f.tensor(name).to_i64_vector();
  for (size_t i = 0; i + 2 < v.size(); i += 3) out.push_back({v[i], v[i + 1], v[i + 2]});
  return out;
}

// Judges one GPU tensor against the golden reference with the CPU bf16-emulation floor.
void expect_within_floor(const std::string& name, const Tensor& gpu, const Tensor& cpu_bf16,
                         const Tensor& ref) {
  EXPECT_TRUE(gpu.device().is_cuda()) << name << ": result is on " << gpu.device().str();
  const Tensor r = host(ref);
  const test::Metrics floor = test::compare(host(cpu_bf16), r);
  const test::Metrics got = test::compare(host(gpu), r);
  const double bound = 3.0 * floor.rel_l2;
  std::printf("  %-40s gpu rel_l2=%.3e  cpu-bf16 floor=%.3e  bound=%.3e\n", name.c_str(),
              got.rel_l2, floor.rel_l2, bound);
  EXPECT_LE(got.rel_l2, bound) << name;
  EXPECT_EQ(got.nonfinite, 0) << name;
  // A floor of zero would make the bound meaningless (and means the emulation did not round).
  EXPECT_GT(floor.rel_l2, 0.0) << name << ": the bf16 emulation matched float32 exactly";
}

TEST(GpuConditionerGolden, TextBf16WithinThreeTimesEmulationFloor) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "conditioner_text");
  const Qwen3VlModel& cpu = model(Device::cpu(), DType::kBF16);
  const Qwen3VlModel& gpu = model(Device::cuda(0), DType::kBF16);
  for (const test::GoldenCase& c : cases) {
    SCOPED_TRACE(c.file);
    const auto f = c.open();
    const std::vector<int64_t> ids = f->tensor("input_ids").to_i64_vector();
    std::printf("[gpu conditioner bf16] %s: L=%zu\n", c.file.c_str(), ids.size());
    const Tensor out = gpu.encode_text(ids);
    EXPECT_EQ(out.dtype(), DType::kBF16);
    expect_within_floor("hidden_state_50", out, cpu.encode_text(ids),
                        unbatch(f->tensor("hidden_state_50")));
  }
}

TEST(GpuConditionerGolden, VisionBf16WithinThreeTimesEmulationFloor) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "conditioner_presentation");
  const Qwen3VlModel& cpu = model(Device::cpu(), DType::kBF16);
  const Qwen3VlModel& gpu = model(Device::cuda(0), DType::kBF16);
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    SCOPED_TRACE(c.file);
    const auto f = c.open();
    const Tensor pv = f->has("pixel_values") ? f->tensor("pixel_values") : Tensor();
    const Tensor pvv = f->has("pixel_values_videos") ? f->tensor("pixel_values_videos") : Tensor();
    const auto image_grids = grids(*f, "image_grid_thw");
    const auto video_grids = grids(*f, "video_grid_thw");
    std::printf("[gpu conditioner bf16] %s: %zu image grid(s), %zu video grid(s)\n",
                c.file.c_str(), image_grids.size(), video_grids.size());
    // The vision tower alone (keyframe / reference images): merged tokens and DeepStack.
    if (pv.defined() && f->has("visual.pooler_output")) {
      ++ran;
      const qwen3_vl::VisionOutput g = gpu.vision().forward(pv, image_grids);
      const qwen3_vl::VisionOutput e = cpu.vision().forward(pv, image_grids);
      ASSERT_EQ(g.deepstack.size(), e.deepstack.size());
      for (size_t i = 0; i < g.deepstack.size(); ++i) {
        const std::string name = "visual.deepstack_features." + std::to_string(i);
        ASSERT_TRUE(f->has(name)) << name;
        expect_within_floor(name, g.deepstack[i], e.deepstack[i], f->tensor(name));
      }
      expect_within_floor("visual.pooler_output", g.tokens, e.tokens,
                          f->tensor("visual.pooler_output"));
    }
    // The whole prompt: vision tokens scattered, DeepStack injected, hidden_states[50].
    const std::vector<int64_t> ids = f->tensor("input_ids").to_i64_vector();
    const Tensor out = gpu.encode(ids, pv, image_grids, pvv, video_grids);
    const Tensor emu = cpu.encode(ids, pv, image_grids, pvv, video_grids);
    expect_within_floor("hidden_state_50", out, emu, unbatch(f->tensor("hidden_state_50")));
  }
  std::printf("vision tower compared on %d case(s)\n", ran);
}

TEST(GpuConditionerGolden, Float32PolicyMeetsFloat32Bound) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "conditioner_text");
  const Qwen3VlModel& gpu = model(Device::cuda(0), DType::kF32);
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    const Tensor out = gpu.encode_text(f->tensor("input_ids").to_i64_vector());
    test::expect_close("[gpu conditioner f32] " + c.file + ":hidden_state_50", host(out),
                       unbatch(f->tensor("hidden_state_50")), kF32Bound, kF32Bound);
  }
  const test::Golden* g = test::Golden::get();
  for (const test::GoldenCase& c : g->cases("conditioner_presentation")) {
    const auto f = c.open();
    const Tensor pv = f->has("pixel_values") ? f->tensor("pixel_values") : Tensor();
    const Tensor pvv = f->has("pixel_values_videos") ? f->tensor("pixel_values_videos") : Tensor();
    const Tensor out = gpu.encode(f->tensor("input_ids").to_i64_vector(), pv,
                                  grids(*f, "image_grid_thw"), pvv, grids(*f, "video_grid_thw"));
    test::expect_close("[gpu conditioner f32] " + c.file + ":hidden_state_50", host(out),
                       unbatch(f->tensor("hidden_state_50")), kF32Bound, kF32Bound);
  }
}

// release() must hand the device memory back (the sequential start loads the DiT after it).
// Small allocations may be pooled by the driver, so a single cycle's figure is only printed; the
// check is that repeated load/run/release cycles do not lose memory: a leak of the weights would
// cost weight_bytes per cycle.
TEST(GpuConditionerGolden, ReleaseGivesDeviceMemoryBack) {
  H3_REQUIRE_CUDA();
  H3_GOLDEN_CASES_OR_SKIP(cases, "conditioner_text");
  const std::vector<int64_t> ids = cases.front().open()->tensor("input_ids").to_i64_vector();
  constexpr int kCycles = 6;
  size_t total = 0, free_after_first = 0, free_after_last = 0;
  uint64_t weights = 0;
  for (int i = 0; i < kCycles; ++i) {
    size_t free_before = 0, free_loaded = 0, free_released = 0;
    cuda_memory_info(0, &free_before, &total);
    Qwen3VlModel m = Qwen3VlModel::load(encoder_dir(), DType::kF32, Device::cuda(0));
    weights = m.weight_bytes();
    (void)host(m.encode_text(ids));
    cuda_memory_info(0, &free_loaded, &total);
    m.release();
    EXPECT_EQ(m.weight_bytes(), 0u);
    EXPECT_FALSE(m.loaded());
    cuda_memory_info(0, &free_released, &total);
    std::printf("  cycle %d: free before load %zu MiB, loaded %zu MiB, after release %zu MiB "
                "(weights %llu bytes)\n",
                i, free_before >> 20, free_loaded >> 20, free_released >> 20,
                static_cast<unsigned long long>(weights));
    EXPECT_GE(free_released, free_loaded) << "release() freed nothing";
    if (i == 0) free_after_first = free_released;
    free_after_last = free_released;
  }
  // Allow 4 MiB of driver granularity; a leak would lose (kCycles - 1) * weights.
  const double lost = static_cast<double>(free_after_first) - static_cast<double>(free_after_last);
  const double slack = 4.0 * 1024 * 1024;
  std::printf("free after first release %zu bytes, after the last %zu bytes: lost %.0f bytes "
              "(bound %.0f; a leak of the weights would lose %.0f)\n",
              free_after_first, free_after_last, lost, slack,
              static_cast<double>(weights) * (kCycles - 1));
  EXPECT_LE(lost, slack);
  EXPECT_GT(static_cast<double>(weights) * (kCycles - 1), slack)
      << "the model is too small for this check to see a leak";
}

}  // namespace
}  // namespace h3
