// The memory planner against released-shape repositories (`h3 make-tiny --released-shapes`:
// exact headers over sparse files) and fake device budgets (PlanOptions::device_free_override).
#include <gtest/gtest.h>

#include <memory>

#include "core/status.h"
#include "models/tiny_model.h"
#include "pipeline/memory_plan.h"
#include "support/temp_dir.h"

namespace h3::pipeline {
namespace {

constexpr uint64_t kGB = 1'000'000'000;

class MemoryPlanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("h3_plan");
    released_ = (dir_->path() / "released").string();
    tiny_ = (dir_->path() / "tiny").string();
    models::MakeTinyOptions o;
    o.released_shapes = true;
    models::make_tiny(released_, o);
    models::make_tiny(tiny_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }

  // The CUDA defaults: bf16 DiT and conditioner, released request 1344x768x124.
  static PlanOptions h200(uint64_t free_bytes) {
    PlanOptions o;
    o.device = Device::cuda(0);
    o.dit_bf16 = true;
    o.conditioner_bf16 = true;
    o.device_free_override = free_bytes;
    o.device_total_override = 150'000'000'000;
    o.unified_memory_override = false;
    return o;
  }
  static void print(const MemoryPlan& p) { std::printf("plan: %s\n", describe(p).c_str()); }

  static std::unique_ptr<test::TempDir> dir_;
  static std::string released_, tiny_;
};
std::unique_ptr<test::TempDir> MemoryPlanTest::dir_;
std::string MemoryPlanTest::released_;
std::string MemoryPlanTest::tiny_;

TEST_F(MemoryPlanTest, ReleasedModelOnH200ChoosesSequential) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan p = plan_memory(repo, h200(140 * kGB));
  print(p);
  const ComponentBytes* dit = p.find("transformer");
  const ComponentBytes* cond = p.find("conditioner");
  ASSERT_TRUE(dit && cond);
  // h3_dit_spec.md §1.2 / h3_components_spec.md §1.2: ~33B and ~32B parameters in bf16.
  EXPECT_GT(dit->weights, 60 * kGB);
  EXPECT_LT(dit->weights, 72 * kGB);
  EXPECT_GT(cond->weights, 58 * kGB);
  EXPECT_LT(cond->weights, 70 * kGB);
  EXPECT_GT(dit->activations, 1 * kGB);
  EXPECT_GT(p.peak_together, 140 * kGB);
  EXPECT_LE(p.peak_sequential, 140 * kGB);
  EXPECT_TRUE(p.sequential) << p.reason;
  EXPECT_EQ(p.peak_bytes, p.peak_sequential);
  EXPECT_NO_THROW(check_fits(p));
}

TEST_F(MemoryPlanTest, EverythingFitsOnALargeDevice) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan p = plan_memory(repo, h200(400 * kGB));
  print(p);
  EXPECT_FALSE(p.sequential) << p.reason;
  EXPECT_EQ(p.peak_bytes, p.peak_together);
  EXPECT_NO_THROW(check_fits(p));
}

TEST_F(MemoryPlanTest, PlanThatCannotFitIsRefusedWithNumbersAndHints) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan p = plan_memory(repo, h200(48 * kGB));
  print(p);
  EXPECT_TRUE(p.sequential);
  EXPECT_GT(p.peak_bytes, 48 * kGB);
  try {
    check_fits(p);
    FAIL() << "expected kOutOfMemory";
  } catch (const Error& e) {
    const std::string m = e.what();
    std::printf("message: %s\n", m.c_str());
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(m.find("48.0 GB"), std::string::npos) << m;
    EXPECT_NE(m.find("free"), std::string::npos) << m;
    EXPECT_NE(m.find("smaller canvas"), std::string::npos) << m;
    EXPECT_EQ(m.find("--sequential-load on would need"), std::string::npos) << m;  // already on
  }
}

TEST_F(MemoryPlanTest, ForcedOffSuggestsSequential) {
  const io::Repository repo = io::Repository::open(released_);
  PlanOptions o = h200(140 * kGB);
  o.sequential = SequentialLoad::kOff;
  const MemoryPlan p = plan_memory(repo, o);
  EXPECT_FALSE(p.sequential);
  try {
    check_fits(p);
    FAIL() << "expected kOutOfMemory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("--sequential-load on would need"), std::string::npos)
        << e.what();
  }
}

TEST_F(MemoryPlanTest, UnifiedMemoryTurnsAutoSequentialOn) {
  const io::Repository repo = io::Repository::open(tiny_);
  PlanOptions o = h200(400 * kGB);
  o.unified_memory_override = true;
  const MemoryPlan p = plan_memory(repo, o);
  print(p);
  EXPECT_TRUE(p.unified_memory);
  EXPECT_TRUE(p.sequential);
  EXPECT_NE(p.reason.find("unified"), std::string::npos) << p.reason;
  o.unified_memory_override = false;
  EXPECT_FALSE(plan_memory(repo, o).sequential);
}

TEST_F(MemoryPlanTest, CpuOffloadShrinksTheResidentDit) {
  const io::Repository repo = io::Repository::open(released_);
  PlanOptions o = h200(140 * kGB);
  const MemoryPlan full = plan_memory(repo, o);
  o.cpu_offload = true;
  const MemoryPlan off = plan_memory(repo, o);
  print(off);
  const uint64_t before = full.find("transformer")->weights;
  const uint64_t after = off.find("transformer")->weights;
  std::printf("DiT resident %.2f GB -> %.2f GB with --cpu-offload\n", before / 1e9, after / 1e9);
  EXPECT_EQ(before, full.dit_weights_full);
  EXPECT_EQ(after, off.dit_weights_offload);
  // 50 blocks, two resident: well under a tenth of the DiT stays on the device.
  EXPECT_LT(after, before / 10);
  EXPECT_LT(off.peak_together, full.peak_together);
  EXPECT_EQ(off.find("transformer")->file_bytes, full.find("transformer")->file_bytes);
}

TEST_F(MemoryPlanTest, ActivationsGrowWithTheRequest) {
  const io::Repository repo = io::Repository::open(released_);
  PlanOptions o = h200(140 * kGB);
  o.request.height = 480;
  o.request.width = 832;
  o.request.num_frames = 124;
  const MemoryPlan small = plan_memory(repo, o);
  o.request.height = 768;
  o.request.width = 1344;
  o.request.num_frames = 192;
  const MemoryPlan large = plan_memory(repo, o);
  const uint64_t a = small.find("transformer")->activations, b = large.find("transformer")->activations;
  std::printf("DiT activations 832x480x124: %.2f GB, 1344x768x192: %.2f GB\n", a / 1e9, b / 1e9);
  EXPECT_GT(b, 3 * a);
  EXPECT_GT(large.find("vae")->activations, small.find("vae")->activations);
  EXPECT_GT(large.find("audio_vae")->activations, small.find("audio_vae")->activations);
  o.request.width = 0;
  EXPECT_THROW(plan_memory(repo, o), Error);
}

TEST_F(MemoryPlanTest, Float32WeightsCountDouble) {
  const io::Repository repo = io::Repository::open(released_);
  PlanOptions o = h200(140 * kGB);
  const uint64_t bf16 = plan_memory(repo, o).find("transformer")->weights;
  o.dit_bf16 = false;
  const uint64_t f32 = plan_memory(repo, o).find("transformer")->weights;
  EXPECT_GT(f32, bf16 * 19 / 10);
  EXPECT_LE(f32, bf16 * 2);
}

TEST_F(MemoryPlanTest, CpuPlans) {
  const io::Repository repo = io::Repository::open(tiny_);
  PlanOptions o;  // CPU, float32
  const MemoryPlan p = plan_memory(repo, o);
  print(p);
  EXPECT_FALSE(p.sequential) << p.reason;  // a tiny model fits in any host
  EXPECT_GT(p.peak_bytes, 0u);
  EXPECT_NO_THROW(check_fits(p));
  o.sequential = SequentialLoad::kOn;
  const MemoryPlan s = plan_memory(repo, o);
  EXPECT_TRUE(s.sequential);
  EXPECT_LE(s.peak_bytes, p.peak_bytes);
}

TEST(SequentialLoadFlag, ParsesAndRejects) {
  EXPECT_EQ(parse_sequential_load("auto"), SequentialLoad::kAuto);
  EXPECT_EQ(parse_sequential_load("on"), SequentialLoad::kOn);
  EXPECT_EQ(parse_sequential_load("off"), SequentialLoad::kOff);
  EXPECT_STREQ(sequential_load_name(SequentialLoad::kOn), "on");
  EXPECT_THROW(parse_sequential_load("yes"), Error);
}

}  // namespace
}  // namespace h3::pipeline
