// Presets and how a checkpoint declares one (pipeline/presets.h): a base transformer is dense, one
// with the FastH3 gates is fasth3, fastvideo_inference.json refines the steps and sparsity, flags
// win, every value says where it came from, and malformed files are refused naming the field.
// Also the random benchmark weights (pipeline/random_weights.h): the scaling policy, and that a
// load under the fill changes values deterministically while the file stays untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <string>

#include "core/status.h"
#include "io/repo.h"
#include "io/safetensors.h"
#include "io/weight_fill.h"
#include "models/h3_dit/dit_config.h"
#include "models/tiny_model.h"
#include "pipeline/engine.h"
#include "pipeline/presets.h"
#include "pipeline/random_weights.h"
#include "support/temp_dir.h"

namespace h3::pipeline {
namespace {

class Presets : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("h3_presets");
    base_ = (dir_->path() / "base").string();
    fast_ = (dir_->path() / "fast").string();
    models::make_tiny(base_, {});
    models::MakeTinyOptions o;
    o.fasth3 = true;
    models::make_tiny(fast_, o);
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static void write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  static std::unique_ptr<test::TempDir> dir_;
  static std::string base_, fast_;
};
std::unique_ptr<test::TempDir> Presets::dir_;
std::string Presets::base_;
std::string Presets::fast_;

TEST_F(Presets, BaseCheckpointIsDense) {
  const io::Repository repo = io::Repository::open(base_);
  const ResolvedSettings s = resolve_settings(repo, "t2va", {});
  EXPECT_EQ(s.preset, "dense");
  EXPECT_EQ(s.steps, 50);
  EXPECT_EQ(s.attention, dit::DitAttentionBackend::kDense);
  EXPECT_EQ(s.source.at("preset"), "default");
  std::printf("%s\n", s.describe().c_str());
}

TEST_F(Presets, GatedCheckpointRunsAsFastH3) {
  const io::Repository repo = io::Repository::open(fast_);
  const ResolvedSettings s = resolve_settings(repo, "t2va", {});
  EXPECT_EQ(s.preset, "fasth3");
  EXPECT_EQ(s.source.at("preset"), "checkpoint gates");
  EXPECT_EQ(s.steps, 5);  // 5 sigma points = 4 forwards
  EXPECT_EQ(s.attention, dit::DitAttentionBackend::kVsa);
  EXPECT_DOUBLE_EQ(s.vsa_sparsity, 0.9);
  EXPECT_EQ(s.vsa_tile_size, 64);
  EXPECT_EQ(s.source.at("steps"), "preset fasth3");
  // ref2va runs transformer_ref/, which has no gates here.
  EXPECT_EQ(resolve_settings(repo, "ref2va", {}).preset, "dense");
  std::printf("%s\n", s.describe().c_str());
}

TEST_F(Presets, FlagsWinAndSayso) {
  const io::Repository repo = io::Repository::open(fast_);
  SettingOverrides o;
  o.steps = 9;
  o.vsa_sparsity = 0.5;
  ResolvedSettings s = resolve_settings(repo, "t2va", o);
  EXPECT_EQ(s.steps, 9);
  EXPECT_EQ(s.source.at("steps"), "flag");
  EXPECT_DOUBLE_EQ(s.vsa_sparsity, 0.5);
  EXPECT_EQ(s.source.at("vsa_sparsity"), "flag");
  EXPECT_EQ(s.source.at("attention"), "preset fasth3");
  o = {};
  o.preset = "dense";
  s = resolve_settings(repo, "t2va", o);
  EXPECT_EQ(s.preset, "dense");
  EXPECT_EQ(s.steps, 50);
  EXPECT_EQ(s.attention, dit::DitAttentionBackend::kDense);
  o.preset = "turbo";
  EXPECT_THROW(resolve_settings(repo, "t2va", o), Error);
}

TEST_F(Presets, InferenceFileRefinesTheStudent) {
  const std::string dir = (dir_->path() / "v2").string();
  models::make_tiny(dir, {});
  const std::string file = dir + "/fastvideo_inference.json";
  write(file,
        R"({"schema_version": "fasth3-inference-contract-v1",
            "dmd_denoising_steps": [999, 874, 749, 624, 500, 375, 250, 125],
            "vsa_sparsity": 0.8})");
  const io::Repository repo = io::Repository::open(dir);
  const ResolvedSettings s = resolve_settings(repo, "t2va", {});
  EXPECT_EQ(s.preset, "fasth3");
  EXPECT_EQ(s.source.at("preset"), "fastvideo_inference.json");
  EXPECT_EQ(s.steps, 9);  // 8 forwards
  EXPECT_DOUBLE_EQ(s.vsa_sparsity, 0.8);
  EXPECT_EQ(s.source.at("vsa_sparsity"), "fastvideo_inference.json");

  write(file, R"({"dmd_denoising_steps": [999, 750], "num_inference_steps": 5})");
  try {
    resolve_settings(io::Repository::open(dir), "t2va", {});
    FAIL() << "disagreeing step counts accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find("num_inference_steps"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fastvideo_inference.json"), std::string::npos);
  }
  write(file, R"({"dmd_denoising_steps": "four"})");
  EXPECT_THROW(resolve_settings(io::Repository::open(dir), "t2va", {}), Error);
  write(file, R"({"vsa_sparsity": 1.5})");
  EXPECT_THROW(resolve_settings(io::Repository::open(dir), "t2va", {}), Error);
}

// A student's adapter that sets every block's FastH3 gate makes the base checkpoint a student: the
// preset follows it and says where it came from; at scale 0 it is not applied and changes nothing.
TEST_F(Presets, LoraAdapterWithGatesRunsTheBaseAsFastH3) {
  const io::Repository repo = io::Repository::open(base_);
  const dit::DitConfig c = dit::DitConfig::load(repo.component("transformer").folder);
  std::vector<io::NamedTensor> ts;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    ts.push_back({"transformer_blocks." + std::to_string(i) + ".attn.to_gate_compress.set_weight",
                  Tensor::zeros({c.inner_dim(), c.hidden_size}, DType::kF32)});
  }
  const std::string file = (dir_->path() / "student.safetensors").string();
  io::write_safetensors(file, ts);
  const std::vector<EngineLora> on = read_loras(repo, {{file, 1.0f}}, false);
  ASSERT_EQ(on.size(), 1u);
  EXPECT_TRUE(on[0].adapter->sets_vsa_gates);
  SettingOverrides o;
  o.adapter_gates = lora_gates_source(on);
  const ResolvedSettings s = resolve_settings(repo, "t2va", o);
  EXPECT_EQ(s.preset, "fasth3");
  EXPECT_EQ(s.attention, dit::DitAttentionBackend::kVsa);
  EXPECT_NE(s.source.at("preset").find("adapter gates"), std::string::npos) << s.describe();
  EXPECT_FALSE(lora_gates_source(read_loras(repo, {{file, 0.0f}}, false)).has_value());
  o.preset = "dense";
  EXPECT_EQ(resolve_settings(repo, "t2va", o).preset, "dense");
}

TEST(RandomWeights, RangesFollowTheModulesInitialisation) {
  FillRange r = random_weight_range("transformer_blocks.0.attn.to_q.weight", {5376, 5376});
  EXPECT_FLOAT_EQ(r.center, 0.0f);
  EXPECT_NEAR(r.half_width, 1.0 / std::sqrt(5376.0), 1e-7);
  r = random_weight_range("decoder.conv_in.weight", {64, 24, 3, 3, 3});
  EXPECT_NEAR(r.half_width, 1.0 / std::sqrt(24.0 * 27.0), 1e-7);
  r = random_weight_range("transformer_blocks.0.attn.norm_q.weight", {128});
  EXPECT_FLOAT_EQ(r.center, 1.0f);
  r = random_weight_range("proj_in.bias", {5376});
  EXPECT_FLOAT_EQ(r.center, 0.0f);
  EXPECT_FLOAT_EQ(r.half_width, 0.02f);
  r = random_weight_range("decoder.layers.3.scale1", {2048});
  EXPECT_FLOAT_EQ(r.center, 0.1f);
  EXPECT_FLOAT_EQ(r.half_width, 0.0f);
}

TEST(RandomWeights, LoadsUnderTheFillAreSeededAndLeaveTheFileAlone) {
  test::TempDir dir("h3_random_weights");
  const std::string path = (dir.path() / "w.safetensors").string();
  io::write_safetensors(path, {{"layer.weight", Tensor::zeros({8, 16}, DType::kBF16)},
                               {"layer.bias", Tensor::zeros({8}, DType::kF32)},
                               {"steps", Tensor::zeros({3}, DType::kI64)}});
  const io::Checkpoint ck = io::Checkpoint::open(path);
  Tensor a, b, c, ints;
  {
    RandomWeightsScope scope(7);
    a = ck.tensor("layer.weight");
    b = ck.tensor("layer.weight");
    ints = ck.tensor("steps");
    EXPECT_THROW(RandomWeightsScope(8), Error);  // one fill at a time
  }
  {
    RandomWeightsScope scope(8);
    c = ck.tensor("layer.weight");
  }
  const Tensor plain = ck.tensor("layer.weight");
  EXPECT_EQ(io::weight_fill(), nullptr);
  const std::vector<float> va = a.to(DType::kF32).to_f32_vector();
  const std::vector<float> vb = b.to(DType::kF32).to_f32_vector();
  const std::vector<float> vc = c.to(DType::kF32).to_f32_vector();
  const float bound = 0.25f;  // 1 / sqrt(16)
  int nonzero = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    EXPECT_LE(std::abs(va[i]), bound * 1.01f);
    nonzero += va[i] != 0.0f;
  }
  EXPECT_GT(nonzero, 100);
  EXPECT_EQ(va, vb);  // same seed, same name: same values
  EXPECT_NE(va, vc);  // another seed
  for (float v : plain.to(DType::kF32).to_f32_vector()) EXPECT_EQ(v, 0.0f);  // file untouched
  EXPECT_EQ(ints.dtype(), DType::kI64);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(ints.data<int64_t>()[i], 0);  // only floats are filled
}

}  // namespace
}  // namespace h3::pipeline
