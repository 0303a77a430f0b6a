// The memory planner against released-shape repositories (`h3 make-tiny --released-shapes`:
// exact headers over sparse files) and injected device and host sizes (PlanOptions overrides).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "models/tiny_model.h"
#include "pipeline/memory_plan.h"
#include "support/fp8_files.h"
#include "support/temp_dir.h"

namespace h3::pipeline {
namespace {

constexpr uint64_t kGB = 1'000'000'000;
constexpr uint64_t kGiB = uint64_t{1} << 30;

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

  // The engine's CUDA defaults (bf16 DiT and conditioner, fp16-autocast VAE decoder), the released
  // request 1344x768x124, a device with `device_gib` free and a host with `host_gib` available.
  static PlanOptions cuda(uint64_t device_gib, uint64_t host_gib = 128) {
    PlanOptions o;
    o.device = Device::cuda(0);
    o.dit_bf16 = true;
    o.conditioner_bf16 = true;
    o.vae_f16_gemm = true;
    o.device_free_override = device_gib * kGiB;
    o.device_total_override = device_gib * kGiB;
    o.unified_memory_override = false;
    o.host_available_override = host_gib * kGiB;
    return o;
  }
  static void print(const MemoryPlan& p) { std::printf("plan: %s\n", describe(p).c_str()); }
  static double gib(uint64_t b) { return static_cast<double>(b) / static_cast<double>(kGiB); }
  static bool has(const std::string& text, const std::string& what) {
    return text.find(what) != std::string::npos;
  }

  static std::unique_ptr<test::TempDir> dir_;
  static std::string released_, tiny_;
};
std::unique_ptr<test::TempDir> MemoryPlanTest::dir_;
std::string MemoryPlanTest::released_;
std::string MemoryPlanTest::tiny_;

TEST_F(MemoryPlanTest, ComponentsAreCountedAsTheyRun) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan p = plan_memory(repo, cuda(140));
  print(p);
  const ComponentPlan* cond = p.find("conditioner");
  const ComponentPlan* dit = p.find("transformer");
  const ComponentPlan* vae = p.find("vae");
  const ComponentPlan* avae = p.find("audio_vae");
  ASSERT_TRUE(cond && dit && vae && avae);
  for (const ComponentPlan* c : {cond, dit, vae, avae})
    std::printf("%-12s %s weights, %s work, %s read\n", c->name.c_str(),
                format_bytes(c->full_bytes).c_str(), format_bytes(c->work_bytes).c_str(),
                format_bytes(c->file_bytes).c_str());
  // h3_components_spec.md §6.1: embeddings (1.56 GB) + 50 layers of 0.975 GB in bf16 = 50.3 GB =
  // 46.9 GiB; no vision tower for t2va, no layer past the tap, no final norm or LM head.
  EXPECT_NEAR(gib(cond->full_bytes), 46.86, 0.05);
  EXPECT_EQ(cond->file_bytes, cond->full_bytes);  // stored bf16, runs bf16
  // The DiT in bf16 with float32 islands: 66.3 GB = 61.7 GiB.
  EXPECT_NEAR(gib(dit->full_bytes), 61.7, 0.2);
  EXPECT_EQ(dit->folder, "transformer");
  EXPECT_EQ(p.dit_num_blocks, 50);
  // t2va decodes only: the decoder (9.69 GB in float32) with its GEMM operands in float16; no
  // encoder (0.72 GB).
  EXPECT_LT(vae->full_bytes, 5 * kGB);
  EXPECT_GT(vae->full_bytes, 4 * kGB);
  EXPECT_LT(vae->file_bytes, 10 * kGB);  // the decoder's tensors only
  // The audio decoder alone (64.9 M parameters, float32), not the 0.61 GB of the whole VAE.
  EXPECT_LT(avae->full_bytes, 300'000'000u);
  EXPECT_GT(avae->full_bytes, 200'000'000u);

  // Float32 runs (the CPU's policy) double the bf16-stored tensors.
  PlanOptions f32 = cuda(400);
  f32.dit_bf16 = false;
  f32.conditioner_bf16 = false;
  f32.vae_f16_gemm = false;
  const MemoryPlan q = plan_memory(repo, f32);
  EXPECT_GT(q.find("transformer")->full_bytes, dit->full_bytes * 19 / 10);
  EXPECT_LE(q.find("transformer")->full_bytes, dit->full_bytes * 2);
  EXPECT_EQ(q.find("conditioner")->full_bytes, 2 * cond->full_bytes);
  EXPECT_NEAR(static_cast<double>(q.find("vae")->full_bytes) / 1e9, 9.69, 0.05);
}

// --dit-dtype fp8: the blocks' seven projections and AdaLN weights count one byte per value,
// everything else of the DiT (embedders, biases, norms, the float32 islands) as before.
TEST_F(MemoryPlanTest, Fp8DitCountsProjectionsAtOneByte) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan bf16 = plan_memory(repo, cuda(140));
  PlanOptions o = cuda(140);
  o.dit_fp8 = true;
  const MemoryPlan fp8 = plan_memory(repo, o);
  uint64_t projections = 0;
  const io::Checkpoint& ck = repo.checkpoint("transformer");
  for (const std::string& name : ck.names()) {
    for (const char* s :
         {".attn.to_q.weight", ".attn.to_k.weight", ".attn.to_v.weight", ".attn.to_out.0.weight",
          ".ff.net.0.proj.weight", ".ff.net.2.weight", ".adaln_proj.linear.weight"}) {
      const std::string suffix = s;
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        projections += static_cast<uint64_t>(shape_numel(ck.info(name).shape));
    }
  }
  const uint64_t b = bf16.find("transformer")->full_bytes, f = fp8.find("transformer")->full_bytes;
  std::printf("DiT bf16 %.2f GiB, fp8 %.2f GiB (%.2f G projection values)\n", gib(b), gib(f),
              static_cast<double>(projections) / 1e9);
  EXPECT_GT(projections, 0u);
  EXPECT_EQ(f, b - projections);
  EXPECT_EQ(fp8.decision, PlanDecision::kResident) << fp8.reason;
  EXPECT_LT(fp8.peak_bytes, bf16.peak_bytes);
}

// A transformer that stores its block projections in FP8 (models/fp8_checkpoint.h) plans as
// --dit-dtype fp8 does: one byte per projection value (its scale tensors counted too), resident
// blocks only.
TEST_F(MemoryPlanTest, StoredFp8DitPlansAsTheDtypeFlag) {
  namespace fs = std::filesystem;
  const fs::path dir = dir_->path() / "fp8_stored";
  fs::create_directories(dir / "transformer");
  for (const auto& e : fs::directory_iterator(released_)) {
    if (e.path().filename() == "transformer") continue;
    if (e.is_directory())
      fs::create_directory_symlink(e.path(), dir / e.path().filename());
    else
      fs::copy_file(e.path(), dir / e.path().filename());
  }
  fs::copy_file(fs::path(released_) / "transformer" / "config.json",
                dir / "transformer" / "config.json");
  const io::Checkpoint ck = io::Checkpoint::open(released_ + "/transformer");
  std::vector<io::TensorInfo> infos;
  uint64_t scale_values = 0;
  for (const std::string& name : ck.names()) {
    io::TensorInfo info = ck.info(name);
    const bool projection = test::is_dit_projection(name) ||
                            name.find("to_gate_compress.weight") != std::string::npos;
    if (projection) info.dtype = DType::kF8E4M3;
    infos.push_back(info);
    if (projection) {
      infos.push_back({test::weight_stem(name) + ".weight_scale", DType::kF32, {info.shape[0]}});
      scale_values += static_cast<uint64_t>(info.shape[0]);
    }
  }
  io::write_safetensors_sparse((dir / "transformer" / "diffusion_pytorch_model.safetensors").string(),
                               infos);
  const io::Repository stored_repo = io::Repository::open(dir.string());
  const io::Repository bf16_repo = io::Repository::open(released_);
  for (uint64_t device_gib : {140, 80}) {
    const MemoryPlan stored = plan_memory(stored_repo, cuda(device_gib));
    PlanOptions o = cuda(device_gib);
    o.dit_fp8 = true;
    const MemoryPlan flag = plan_memory(bf16_repo, o);
    // The stored float32 scales are counted beside the values (4 bytes each).
    EXPECT_EQ(stored.find("transformer")->full_bytes,
              flag.find("transformer")->full_bytes + 4 * scale_values)
        << device_gib;
    EXPECT_EQ(stored.decision, flag.decision) << describe(stored) << "\n" << describe(flag);
    const PlanAlternative* offload = stored.alternative(PlanDecision::kCpuOffload);
    ASSERT_NE(offload, nullptr);
    EXPECT_FALSE(offload->possible) << "FP8 blocks are never streamed";
  }
  EXPECT_EQ(plan_memory(stored_repo, cuda(140)).decision, PlanDecision::kResident);
}

// Issue #15: with the DiT and the conditioner in FP8 the released model is resident on an 80 GiB
// card (in bf16 it is not); FP8 weights never stream, so the plan does not offer it.
TEST_F(MemoryPlanTest, Fp8ReleasedModelIsResidentAt80GiB) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan bf16 = plan_memory(repo, cuda(80));
  print(bf16);
  EXPECT_NE(bf16.decision, PlanDecision::kResident);
  PlanOptions o = cuda(80);
  o.dit_fp8 = true;
  o.conditioner_fp8 = true;
  const MemoryPlan fp8 = plan_memory(repo, o);
  print(fp8);
  std::printf("conditioner %.2f GiB, DiT %.2f GiB, peak %.2f GiB\n",
              gib(fp8.find("conditioner")->full_bytes), gib(fp8.find("transformer")->full_bytes),
              gib(fp8.peak_bytes));
  EXPECT_EQ(fp8.decision, PlanDecision::kResident) << fp8.reason;
  EXPECT_LE(fp8.peak_bytes, 80 * kGiB);
  EXPECT_FALSE(fp8.conditioner_streamed);
  EXPECT_FALSE(fp8.cpu_offload);
}

TEST_F(MemoryPlanTest, VisionAndEncodersOnlyWhenTheWorkflowNeedsThem) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan t2va = plan_memory(repo, cuda(140));
  PlanOptions o = cuda(140);
  o.request.workflow = "fl2va";
  const MemoryPlan fl2va = plan_memory(repo, o);
  o.request.workflow = "ref2va";
  const MemoryPlan ref2va = plan_memory(repo, o);
  print(fl2va);
  print(ref2va);
  // The vision tower: 0.595 B parameters, 1.19 GB in bf16 (§6.1), less its host-side position
  // table.
  const uint64_t vision =
      fl2va.find("conditioner")->full_bytes - t2va.find("conditioner")->full_bytes;
  EXPECT_GT(vision, 1'100'000'000u);
  EXPECT_LT(vision, 1'200'000'000u);
  // The video VAE's encoder (0.72 GB, float32) for keyframes and references.
  const uint64_t encoder = fl2va.find("vae")->full_bytes - t2va.find("vae")->full_bytes;
  EXPECT_NEAR(static_cast<double>(encoder) / 1e9, 0.72, 0.03);
  // ref2va: transformer_ref/ and the audio encoder as well.
  EXPECT_EQ(ref2va.find("transformer")->folder, "transformer_ref");
  EXPECT_GT(ref2va.find("audio_vae")->full_bytes,
            t2va.find("audio_vae")->full_bytes + 300'000'000u);
  EXPECT_EQ(fl2va.find("audio_vae")->full_bytes, t2va.find("audio_vae")->full_bytes);
  // Stages: encodes only where something is encoded.
  EXPECT_EQ(t2va.stage("vae encode"), nullptr);
  ASSERT_NE(fl2va.stage("vae encode"), nullptr);
  EXPECT_EQ(fl2va.stage("audio encode"), nullptr);
  ASSERT_NE(ref2va.stage("audio encode"), nullptr);
  // Condition rows lengthen the packed sequence.
  EXPECT_GT(fl2va.stage("denoise")->work_bytes, t2va.stage("denoise")->work_bytes);
  EXPECT_THROW(([&] {
                 PlanOptions bad = cuda(140);
                 bad.request.workflow = "i2v";
                 (void)plan_memory(repo, bad);
               })(),
               Error);
}

TEST_F(MemoryPlanTest, ReleasedModelIsResidentOnAnH200) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan p = plan_memory(repo, cuda(140));
  print(p);
  EXPECT_EQ(p.decision, PlanDecision::kResident) << p.reason;
  EXPECT_FALSE(p.sequential);
  EXPECT_FALSE(p.cpu_offload);
  EXPECT_FALSE(p.conditioner_streamed);
  EXPECT_EQ(p.dit_resident_blocks, 50);
  EXPECT_EQ(p.host_pinned_bytes, 0u);
  EXPECT_LE(p.peak_bytes, 140 * kGiB);
  for (const ComponentPlan& c : p.components) {
    EXPECT_EQ(c.placement, Placement::kDevice) << c.name;
    EXPECT_EQ(c.weights_bytes, c.full_bytes) << c.name;
  }
  // The peak is the heaviest stage with everything resident, plus the reserve.
  uint64_t heaviest = 0;
  for (const StagePeak& s : p.stage_peaks) {
    std::printf("stage %-13s weights %s + work %s\n", s.name.c_str(),
                format_bytes(s.weights_bytes).c_str(), format_bytes(s.work_bytes).c_str());
    heaviest = std::max(heaviest, s.device_bytes());
  }
  EXPECT_EQ(p.peak_bytes, heaviest + p.reserve);
  EXPECT_NO_THROW(check_fits(p));
  EXPECT_TRUE(has(p.reason, "fits")) << p.reason;
}

TEST_F(MemoryPlanTest, StagePeaksAreNamedFigures) {
  const io::Repository repo = io::Repository::open(released_);
  PlanOptions o = cuda(140);
  o.request.text_tokens = 256;  // 37,966 packed rows
  const MemoryPlan p = plan_memory(repo, o);
  for (const char* name : {"conditioner", "denoise", "vae decode", "audio decode"})
    ASSERT_NE(p.stage(name), nullptr) << name;
  // The eager bf16 DiT block at 37,966 rows keeps 4 x 5376 + 6 x 14336 bf16 values per row at its
  // SwiGLU (8.16 GB), plus RoPE tables, indices and the float32 rows in and out.
  const double denoise = static_cast<double>(p.stage("denoise")->work_bytes) / 1e9;
  std::printf(
      "denoise work %.3f GB, vae decode %.3f GB, audio decode %.3f GB, conditioner %.3f GB\n",
      denoise, p.stage("vae decode")->work_bytes / 1e9, p.stage("audio decode")->work_bytes / 1e9,
      p.stage("conditioner")->work_bytes / 1e9);
  EXPECT_GT(denoise, 8.16);
  EXPECT_LT(denoise, 8.4);
  o.dit_fused_rounding = true;  // 5 x 5376 + 3 x 14336 per row
  EXPECT_LT(plan_memory(repo, o).stage("denoise")->work_bytes,
            p.stage("denoise")->work_bytes * 7 / 10);
  // The video decode: batches of 4 tiles within the 1 GiB automatic budget (228 MB of activations
  // per 1,797-row tile), the window's pixels and the video in float16 while decoding (2.16 GB);
  // then that video and its float32 widening (2.30 GB), the peak. On one H200 this decode's memory
  // pool rose 3.85 GB above the weights (`h3 bench vae`, bench/RESULTS.md 2026-12-04) while the
  // bench still held the previous repetition's float32 video, 1.54 GB of it; the plan stays within
  // a tenth of the 2.31 GB left. Asking for 14 tiles (--vae-tile-batch 14) adds ten tiles'
  // activations, and then the decoding moment is the peak.
  const uint64_t vae4 = p.stage("vae decode")->work_bytes;
  const uint64_t video16 = 3ULL * 124 * 768 * 1344 * 2;
  EXPECT_EQ(vae4, video16 * 3);  // the float16 video and its float32 copy
  EXPECT_NEAR(static_cast<double>(vae4), (3.85 - 1.54) * kGB, 0.231 * kGB);
  PlanOptions o14 = o;
  o14.dit_fused_rounding = false;
  o14.vae_tile_batch = 14;
  const double per_tile = 1797.0 * (5 * 2048 * 4 + (9 * 2048 + 3 * 8192) * 2);
  const double window_px =
      28.0 * 3 * 28 * 256 * 256 * 2 + 3.0 * 28 * 768 * 1344 * 2;  // tiles, clip
  EXPECT_NEAR(static_cast<double>(plan_memory(repo, o14).stage("vae decode")->work_bytes),
              14 * per_tile + window_px + static_cast<double>(video16), 1e6);
  EXPECT_LT(p.stage("audio decode")->work_bytes, 1 * kGB);
  EXPECT_LT(p.stage("conditioner")->work_bytes, 1 * kGB);
}

TEST_F(MemoryPlanTest, On80GiBWarmGenerationsReadNothingFromDisk) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan p = plan_memory(repo, cuda(80));
  print(p);
  EXPECT_TRUE(p.decision == PlanDecision::kStreamConditioner ||
              p.decision == PlanDecision::kCpuOffload)
      << plan_decision_name(p.decision) << ": " << p.reason;
  EXPECT_FALSE(p.sequential);
  EXPECT_TRUE(p.conditioner_streamed);
  EXPECT_EQ(p.find("conditioner")->placement, Placement::kStreamed);
  EXPECT_LE(p.peak_bytes, 80 * kGiB);
  // The pinned conditioner layers: 50 x 0.975 GB.
  EXPECT_GE(p.host_pinned_bytes, 48 * kGB);
  EXPECT_NO_THROW(check_fits(p));
}

TEST_F(MemoryPlanTest, On24GiBTheDitStreamsToo) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan p = plan_memory(repo, cuda(24));
  print(p);
  EXPECT_EQ(p.decision, PlanDecision::kCpuOffload) << p.reason;
  EXPECT_TRUE(p.cpu_offload);
  EXPECT_TRUE(p.conditioner_streamed);
  EXPECT_FALSE(p.sequential);
  EXPECT_EQ(p.find("transformer")->placement, Placement::kOffload);
  EXPECT_GE(p.dit_resident_blocks, 0);
  EXPECT_LT(p.dit_resident_blocks, p.dit_num_blocks);
  std::printf("DiT blocks resident: %lld of %lld, pinned %s\n",
              static_cast<long long>(p.dit_resident_blocks),
              static_cast<long long>(p.dit_num_blocks), format_bytes(p.host_pinned_bytes).c_str());
  EXPECT_LE(p.peak_bytes, 24 * kGiB);
  // One more resident block would not fit.
  EXPECT_GT(p.peak_bytes + p.find("transformer")->full_bytes / 50, 24 * kGiB - 2 * kGiB);
  EXPECT_EQ(p.host_pinned_bytes,
            p.find("conditioner")->host_bytes + p.find("transformer")->host_bytes);
  EXPECT_NO_THROW(check_fits(p));
}

TEST_F(MemoryPlanTest, RefusedWithNumbersWhenTheHostIsShortToo) {
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan p = plan_memory(repo, cuda(24, 16));
  print(p);
  EXPECT_EQ(p.decision, PlanDecision::kRefused);
  try {
    check_fits(p);
    FAIL() << "expected kOutOfMemory";
  } catch (const Error& e) {
    const std::string m = e.what();
    std::printf("message: %s\n", m.c_str());
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_TRUE(has(m, "cuda:0 has 24.0 GiB free")) << m;
    EXPECT_TRUE(has(m, "host: 16.0 GiB available")) << m;
    for (const char* alt :
         {"resident ", "stream-conditioner ", "cpu-offload ", "sequential ", "pinned"})
      EXPECT_TRUE(has(m, alt)) << alt << " in " << m;
    EXPECT_TRUE(has(m, "smaller canvas")) << m;
  }
}

TEST_F(MemoryPlanTest, ShortHostFallsBackToSequential) {
  // 80 GiB of device but too little host memory to pin the conditioner: each stage alone fits.
  const io::Repository repo = io::Repository::open(released_);
  const MemoryPlan p = plan_memory(repo, cuda(80, 16));
  print(p);
  EXPECT_EQ(p.decision, PlanDecision::kSequential) << p.reason;
  EXPECT_TRUE(p.sequential);
  EXPECT_TRUE(has(p.reason, "warm generations read the weights from disk")) << p.reason;
  for (const ComponentPlan& c : p.components)
    EXPECT_EQ(c.placement, Placement::kReleased) << c.name;
  EXPECT_EQ(p.stage("conditioner")->weights_bytes, p.find("conditioner")->full_bytes);
  EXPECT_NO_THROW(check_fits(p));
}

TEST_F(MemoryPlanTest, ForcedFlags) {
  const io::Repository repo = io::Repository::open(released_);
  PlanOptions o = cuda(140);
  o.sequential = SequentialLoad::kOn;
  MemoryPlan p = plan_memory(repo, o);
  EXPECT_EQ(p.decision, PlanDecision::kSequential);
  EXPECT_TRUE(has(p.reason, "--sequential-load")) << p.reason;
  EXPECT_LT(p.peak_bytes, p.alternative(PlanDecision::kResident)->peak_bytes);

  // --cpu-offload: at least cpu-offload, and every DiT block streams.
  o = cuda(140);
  o.cpu_offload = true;
  p = plan_memory(repo, o);
  print(p);
  EXPECT_EQ(p.decision, PlanDecision::kCpuOffload) << p.reason;
  EXPECT_TRUE(p.cpu_offload);
  EXPECT_EQ(p.dit_resident_blocks, 0);
  // Two block slots and the non-block parts: well under a tenth of the DiT stays on the device.
  EXPECT_LT(p.find("transformer")->weights_bytes, p.find("transformer")->full_bytes / 10);
  EXPECT_EQ(p.find("transformer")->file_bytes,
            plan_memory(repo, cuda(140)).find("transformer")->file_bytes);

  // --sequential-load --cpu-offload: sequential with the DiT's blocks streamed.
  o.sequential = SequentialLoad::kOn;
  p = plan_memory(repo, o);
  EXPECT_EQ(p.decision, PlanDecision::kSequential);
  EXPECT_TRUE(p.sequential && p.cpu_offload);
  EXPECT_EQ(p.find("transformer")->placement, Placement::kOffload);

  // --no-sequential-load where only sequential would fit: refused, naming the flag.
  o = cuda(80, 16);
  o.sequential = SequentialLoad::kOff;
  p = plan_memory(repo, o);
  EXPECT_EQ(p.decision, PlanDecision::kRefused);
  EXPECT_TRUE(has(p.reason, "--no-sequential-load")) << p.reason;
  EXPECT_THROW(check_fits(p), Error);

  // --sequential-load where even one stage alone does not fit: refused.
  o = cuda(40);
  o.sequential = SequentialLoad::kOn;
  p = plan_memory(repo, o);
  EXPECT_EQ(p.decision, PlanDecision::kRefused) << p.reason;
  EXPECT_TRUE(has(p.reason, "excluded by --sequential-load")) << p.reason;
}

TEST_F(MemoryPlanTest, UnifiedMemoryTurnsAutoSequential) {
  const io::Repository repo = io::Repository::open(tiny_);
  PlanOptions o = cuda(400);
  o.unified_memory_override = true;
  MemoryPlan p = plan_memory(repo, o);
  print(p);
  EXPECT_TRUE(p.unified_memory);
  EXPECT_EQ(p.decision, PlanDecision::kSequential);
  EXPECT_TRUE(has(p.reason, "unified")) << p.reason;
  o.sequential = SequentialLoad::kOff;
  p = plan_memory(repo, o);
  EXPECT_EQ(p.decision, PlanDecision::kResident) << p.reason;
  o.sequential = SequentialLoad::kAuto;
  o.unified_memory_override = false;
  EXPECT_EQ(plan_memory(repo, o).decision, PlanDecision::kResident);

  // The released model on a GB10-like 120 GiB shared pool: sequential.
  const io::Repository released = io::Repository::open(released_);
  o = cuda(120, 120);
  o.unified_memory_override = true;
  p = plan_memory(released, o);
  EXPECT_EQ(p.decision, PlanDecision::kSequential) << p.reason;
  EXPECT_EQ(p.host_pinned_bytes, 0u);
}

TEST_F(MemoryPlanTest, WorkGrowsWithTheRequest) {
  const io::Repository repo = io::Repository::open(released_);
  PlanOptions o = cuda(140);
  o.request.height = 480;
  o.request.width = 832;
  o.request.num_frames = 124;
  const MemoryPlan small = plan_memory(repo, o);
  o.request.height = 768;
  o.request.width = 1344;
  o.request.num_frames = 192;
  const MemoryPlan large = plan_memory(repo, o);
  const uint64_t a = small.find("transformer")->work_bytes,
                 b = large.find("transformer")->work_bytes;
  std::printf("DiT work 832x480x124: %.2f GB, 1344x768x192: %.2f GB\n", a / 1e9, b / 1e9);
  EXPECT_GT(b, 3 * a);
  EXPECT_GT(large.find("vae")->work_bytes, small.find("vae")->work_bytes);
  EXPECT_GT(large.find("audio_vae")->work_bytes, small.find("audio_vae")->work_bytes);
  o.request.width = 0;
  EXPECT_THROW(plan_memory(repo, o), Error);
}

TEST_F(MemoryPlanTest, CpuPlans) {
  const io::Repository repo = io::Repository::open(tiny_);
  PlanOptions o;  // CPU, float32
  o.host_available_override = 16 * kGiB;
  const MemoryPlan p = plan_memory(repo, o);
  print(p);
  EXPECT_EQ(p.decision, PlanDecision::kResident) << p.reason;  // a tiny model fits any host
  EXPECT_FALSE(p.sequential);
  EXPECT_GT(p.peak_bytes, 0u);
  EXPECT_EQ(p.device_free, 16 * kGiB);
  for (const ComponentPlan& c : p.components) EXPECT_EQ(c.placement, Placement::kHost) << c.name;
  EXPECT_NO_THROW(check_fits(p));
  o.sequential = SequentialLoad::kOn;
  const MemoryPlan s = plan_memory(repo, o);
  EXPECT_TRUE(s.sequential);
  EXPECT_LE(s.peak_bytes, p.peak_bytes);
  // The released model in float32 does not fit 64 GiB of host memory: sequential, never refused.
  const io::Repository released = io::Repository::open(released_);
  PlanOptions big;
  big.host_available_override = 64 * kGiB;
  const MemoryPlan r = plan_memory(released, big);
  print(r);
  EXPECT_EQ(r.decision, PlanDecision::kSequential);
  EXPECT_NO_THROW(check_fits(r));
  // --cpu-offload is for CUDA devices.
  o.cpu_offload = true;
  EXPECT_THROW(plan_memory(repo, o), Error);
}

TEST_F(MemoryPlanTest, HostMemoryDefaultsToTheMachine) {
  const io::Repository repo = io::Repository::open(tiny_);
  PlanOptions o = cuda(400);
  o.host_available_override.reset();
  const MemoryPlan p = plan_memory(repo, o);
  uint64_t avail = 0, total = 0;
  host_memory_info(&avail, &total);
  EXPECT_GT(total, 0u);
  EXPECT_GT(avail, 0u);
  EXPECT_LE(avail, total);
  EXPECT_EQ(p.host_total, total);
  EXPECT_GT(p.host_available, 0u);
}

TEST(MemorySize, ParsesAndRejects) {
  EXPECT_EQ(parse_memory_size("140GiB", "--device-memory"), 140 * kGiB);
  EXPECT_EQ(parse_memory_size("80GB", "--device-memory"), 80 * kGB);
  EXPECT_EQ(parse_memory_size("24 gib", "--device-memory"), 24 * kGiB);
  EXPECT_EQ(parse_memory_size("1.5TiB", "--host-memory"), 1536 * kGiB);
  EXPECT_EQ(parse_memory_size("512MiB", "--host-memory"), uint64_t{512} << 20);
  for (const char* bad : {"", "140", "GiB", "12XB", "-4GiB", "1.2.3GB", "0GiB", "4 G"}) {
    try {
      (void)parse_memory_size(bad, "--device-memory");
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_TRUE(std::string(e.what()).find("--device-memory") != std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(46 * kGiB + kGiB / 2), "46.5 GiB");
}

TEST(SequentialLoadFlag, ParsesAndRejects) {
  EXPECT_EQ(parse_sequential_load("auto"), SequentialLoad::kAuto);
  EXPECT_EQ(parse_sequential_load("on"), SequentialLoad::kOn);
  EXPECT_EQ(parse_sequential_load("off"), SequentialLoad::kOff);
  EXPECT_STREQ(sequential_load_name(SequentialLoad::kOn), "on");
  EXPECT_THROW(parse_sequential_load("yes"), Error);
  EXPECT_STREQ(plan_decision_name(PlanDecision::kStreamConditioner), "stream-conditioner");
  EXPECT_STREQ(plan_decision_name(PlanDecision::kCpuOffload), "cpu-offload");
  EXPECT_STREQ(placement_name(Placement::kReleased), "released");
}

}  // namespace
}  // namespace h3::pipeline
