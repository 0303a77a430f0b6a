// --dit-dtype fp8 in the DiT (issue #15) where it needs no GPU: which tensors become E4M3, that
// they stand for the loaded weights within E4M3's rounding, and that streaming FP8 blocks is
// refused by name rather than run wrong. Parity against the golden is tests/golden/test_dit.cpp
// (DitGolden.Fp8EmulationAgainstBf16); the kernels are tests/ops/test_fp8.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "models/fp8_checkpoint.h"
#include "models/h3_dit/dit_model.h"
#include "models/schema.h"
#include "models/tiny_model.h"
#include "ops/fp8.h"
#include "support/fp8_files.h"
#include "support/temp_dir.h"

namespace h3 {
namespace {

class DitFp8Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("h3_dit_fp8");
    repo_ = (dir_->path() / "tiny").string();
    models::make_tiny(repo_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static dit::DitModel load(bool fp8,
                            ops::Fp8WeightScaling scaling = ops::Fp8WeightScaling::kPerChannel) {
    dit::DitOptions o;
    o.precision = dit::DitPrecision::kBF16;
    o.fp8 = fp8;
    o.fp8_scaling = scaling;
    return dit::DitModel::load(repo_ + "/transformer", o);
  }
  static std::unique_ptr<test::TempDir> dir_;
  static std::string repo_;
};
std::unique_ptr<test::TempDir> DitFp8Test::dir_;
std::string DitFp8Test::repo_;

// Each E4M3 value times its channel's (or 128 x 128 block's) scale is the loaded bf16 weight to
// within half a step of E4M3 (2^-4 relative for normal values, 2^-10 of the scale below them).
void expect_quantized(const Tensor& q, const Tensor& scale, const Tensor& w,
                      const std::string& what, ops::Fp8WeightScaling scaling) {
  ASSERT_EQ(q.dtype(), DType::kF8E4M3) << what;
  ASSERT_EQ(q.shape(), w.shape()) << what;
  const int64_t n = w.size(0), k = w.size(1), kb = (k + 127) / 128;
  const bool block = scaling == ops::Fp8WeightScaling::kPerBlock;
  const Shape want = block ? Shape{(n + 127) / 128, kb} : Shape{n};
  ASSERT_EQ(scale.shape(), want) << what;
  const std::vector<float> d =
      ops::dequantize_weight_fp8({q, scale, scaling}, DType::kF32).to_f32_vector();
  const std::vector<float> v = w.to_f32_vector(), s = scale.to_f32_vector();
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / k, c = static_cast<int64_t>(i) % k;
    const float sc = s[static_cast<size_t>(block ? r / 128 * kb + c / 128 : r)];
    ASSERT_LE(std::fabs(d[i] - v[i]), 0.0625f * std::fabs(v[i]) + sc * 0x1p-10f)
        << what << " [" << i << "]";
  }
}

TEST_F(DitFp8Test, BlockProjectionsAndAdalnBecomeE4M3AndNothingElse) {
  const dit::DitModel base = load(false);
  for (ops::Fp8WeightScaling scaling :
       {ops::Fp8WeightScaling::kPerChannel, ops::Fp8WeightScaling::kPerBlock}) {
    SCOPED_TRACE(ops::fp8_weight_scaling_name(scaling));
    const dit::DitModel m = load(true, scaling);
    const dit::DitWeights &a = base.weights(), &b = m.weights();
    ASSERT_EQ(a.blocks.size(), b.blocks.size());
    ASSERT_FALSE(b.blocks.empty());
    auto check = [&](const dit::DitAttentionWeights& wa, const dit::DitAttentionWeights& wb,
                     const dit::DitFeedForwardWeights& fa, const dit::DitFeedForwardWeights& fb,
                     const std::string& where) {
      expect_quantized(wb.to_q, wb.to_q_scale, wa.to_q, where + " to_q", scaling);
      expect_quantized(wb.to_k, wb.to_k_scale, wa.to_k, where + " to_k", scaling);
      expect_quantized(wb.to_v, wb.to_v_scale, wa.to_v, where + " to_v", scaling);
      expect_quantized(wb.to_out, wb.to_out_scale, wa.to_out, where + " to_out", scaling);
      expect_quantized(fb.fc_in, fb.fc_in_scale, fa.fc_in, where + " fc_in", scaling);
      expect_quantized(fb.fc_out, fb.fc_out_scale, fa.fc_out, where + " fc_out", scaling);
      EXPECT_EQ(wb.norm_q.dtype(), wa.norm_q.dtype()) << where;
    };
    for (size_t i = 0; i < b.blocks.size(); ++i) {
      check(a.blocks[i].attn, b.blocks[i].attn, a.blocks[i].ff, b.blocks[i].ff,
            "block " + std::to_string(i));
      expect_quantized(b.blocks[i].adaln_w, b.blocks[i].adaln_scale, a.blocks[i].adaln_w,
                       "block " + std::to_string(i) + " adaln", scaling);
      EXPECT_EQ(b.blocks[i].adaln_b.dtype(), a.blocks[i].adaln_b.dtype());
      EXPECT_EQ(b.blocks[i].norm1.dtype(), a.blocks[i].norm1.dtype());
    }
    for (size_t i = 0; i < b.refiner.size(); ++i)
      check(a.refiner[i].attn, b.refiner[i].attn, a.refiner[i].ff, b.refiner[i].ff,
            "refiner " + std::to_string(i));
    EXPECT_EQ(b.proj_in_w.dtype(), DType::kF32);  // float32 islands untouched
    EXPECT_EQ(b.context_w.dtype(), DType::kBF16);
  }
}

TEST_F(DitFp8Test, StreamingFp8BlocksIsRefusedByName) {
  dit::DitOptions o;
  o.fp8 = true;
  o.resident_blocks = 1;
  try {
    (void)dit::resolve_resident_blocks(o, 2);
    FAIL() << "expected kUnsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("--dit-dtype fp8"), std::string::npos) << e.what();
  }
  o.resident_blocks = 2;
  EXPECT_EQ(dit::resolve_resident_blocks(o, 2), 2);
}

// ---- FP8 checkpoints as publishers store them (models/fp8_checkpoint.h) ------------------------

using test::weight_stem;
using test::write_fp8_transformer;

// Every projection of a per-channel FP8 checkpoint (compressed-tensors' "channel" strategy:
// `weight_scale` [N, 1]) loads bit for bit as --dit-dtype fp8 quantizes the bf16 checkpoint, runs
// as FP8 without the flag, and says so.
TEST_F(DitFp8Test, PerChannelCheckpointLoadsAsTheQuantizedModel) {
  const std::string dir = write_fp8_transformer(
      repo_, (dir_->path() / "fp8_channel").string(),
      [](const std::string& name, const Tensor& w, std::vector<io::NamedTensor>& ts) {
        const ops::Fp8Weight q = ops::quantize_weight_fp8(w, ops::Fp8WeightScaling::kPerChannel);
        ts.push_back({name, q.data});
        ts.push_back({weight_stem(name) + ".weight_scale", q.scale.reshape({q.scale.size(0), 1})});
        ts.push_back({weight_stem(name) + ".input_scale", Tensor::from_f32({0.5f}, {1})});
      });
  dit::DitOptions o;
  o.precision = dit::DitPrecision::kBF16;
  const dit::DitModel m = dit::DitModel::load(dir, o);
  const dit::DitModel ref = load(true, ops::Fp8WeightScaling::kPerChannel);
  EXPECT_TRUE(m.fp8_weights());
  EXPECT_FALSE(load(false).fp8_weights());
  EXPECT_GT(m.weights().fp8_from_checkpoint, 0);
  auto same = [](const Tensor& a, const Tensor& b, const std::string& what) {
    ASSERT_EQ(a.dtype(), b.dtype()) << what;
    ASSERT_EQ(a.shape(), b.shape()) << what;
    EXPECT_EQ(a.to_f32_vector(), b.to_f32_vector()) << what;
  };
  for (size_t i = 0; i < ref.weights().blocks.size(); ++i) {
    const dit::DitBlockWeights &a = m.weights().blocks[i], &b = ref.weights().blocks[i];
    const std::string at = "block " + std::to_string(i);
    same(a.attn.to_q, b.attn.to_q, at + " to_q");
    same(a.attn.to_q_scale, b.attn.to_q_scale, at + " to_q scale");
    same(a.attn.to_out, b.attn.to_out, at + " to_out");
    same(a.ff.fc_in_scale, b.ff.fc_in_scale, at + " fc_in scale");
    same(a.ff.fc_out, b.ff.fc_out, at + " fc_out");
    same(a.adaln_w, b.adaln_w, at + " adaln");
    same(a.adaln_scale, b.adaln_scale, at + " adaln scale");
    same(a.norm1, b.norm1, at + " norm1");
  }
  same(m.weights().refiner.at(0).attn.to_k_scale, ref.weights().refiner.at(0).attn.to_k_scale,
       "refiner to_k scale");
  // `h3 info`'s schema check: the scales belong to their weights, nothing is unexpected.
  const io::Checkpoint ck = io::Checkpoint::open(dir + "/diffusion_pytorch_model.safetensors");
  std::ifstream cf(dir + "/config.json");
  const models::SchemaCheck sc =
      models::check_schema(models::dit_schema(nlohmann::json::parse(cf), "config.json"), ck);
  EXPECT_TRUE(sc.ok()) << (sc.unexpected.empty() ? std::string() : sc.unexpected[0]);
  EXPECT_EQ(sc.fp8_scales, 2 * m.weights().fp8_from_checkpoint);  // weight_scale + input_scale
  EXPECT_EQ(sc.fp8_weights, m.weights().fp8_from_checkpoint);
  EXPECT_TRUE(sc.dtype_warnings.empty()) << sc.dtype_warnings.size() << " warnings";
}

// One scale per tensor (ModelOpt, ComfyUI: `weight_scale` []) becomes that scale on every channel:
// the weight's values are exactly the checkpoint's.
TEST_F(DitFp8Test, PerTensorCheckpointScaleCoversEveryChannel) {
  std::vector<float> scales;
  const std::string dir = write_fp8_transformer(
      repo_, (dir_->path() / "fp8_tensor").string(),
      [&](const std::string& name, const Tensor& w, std::vector<io::NamedTensor>& ts) {
        // Per tensor: the per-token path of the activations on a [1, N*K] view gives one scale.
        const Tensor flat = w.reshape({1, w.numel()});
        const ops::Fp8Weight q =
            ops::quantize_weight_fp8(flat, ops::Fp8WeightScaling::kPerChannel);
        ts.push_back({name, q.data.reshape(w.shape())});
        ts.push_back({weight_stem(name) + ".weight_scale", q.scale.reshape({})});
        scales.push_back(q.scale.to_f32_vector()[0]);
      });
  dit::DitOptions o;
  const dit::DitModel m = dit::DitModel::load(dir, o);
  const dit::DitAttentionWeights& a = m.weights().blocks.at(0).attn;
  ASSERT_EQ(a.to_q.dtype(), DType::kF8E4M3);
  const std::vector<float> s = a.to_q_scale.to_f32_vector();
  ASSERT_EQ(static_cast<int64_t>(s.size()), a.to_q.size(0));
  for (float v : s) EXPECT_EQ(v, s[0]);
  EXPECT_NE(std::find(scales.begin(), scales.end(), s[0]), scales.end());
}

// 128 x 128 block scales (Qwen's and DeepSeek's `weight_scale_inv`) load as stored: the E4M3
// bytes and the block scales as written, no second rounding, and their GEMMs pair them with
// activations per token and 128 columns.
TEST_F(DitFp8Test, BlockScaledCheckpointKeepsItsBlocks) {
  std::map<std::string, ops::Fp8Weight> stored;
  const std::string dir = write_fp8_transformer(
      repo_, (dir_->path() / "fp8_block").string(),
      [&](const std::string& name, const Tensor& w, std::vector<io::NamedTensor>& ts) {
        const ops::Fp8Weight q = ops::quantize_weight_fp8(w, ops::Fp8WeightScaling::kPerBlock);
        const Tensor scale = q.scale.to(DType::kBF16).to(DType::kF32);
        ts.push_back({name, q.data});
        ts.push_back({weight_stem(name) + ".weight_scale_inv", scale});
        stored[name] = {q.data, scale, ops::Fp8WeightScaling::kPerBlock};
      });
  dit::DitOptions o;
  const dit::DitModel m = dit::DitModel::load(dir, o);
  EXPECT_TRUE(m.fp8_weights());
  const dit::DitBlockWeights& b = m.weights().blocks.at(1);
  const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> checks[] = {
      {"transformer_blocks.1.ff.net.0.proj.weight", {&b.ff.fc_in, &b.ff.fc_in_scale}},
      {"transformer_blocks.1.attn.to_v.weight", {&b.attn.to_v, &b.attn.to_v_scale}}};
  for (const auto& [name, loaded] : checks) {
    SCOPED_TRACE(name);
    const ops::Fp8Weight& want = stored.at(name);
    ASSERT_EQ(loaded.first->dtype(), DType::kF8E4M3);
    ASSERT_EQ(loaded.second->shape(), want.scale.shape());
    EXPECT_EQ(loaded.second->to_f32_vector(), want.scale.to_f32_vector());
    EXPECT_EQ(
        ops::dequantize_weight_fp8(ops::projection_fp8(*loaded.first, *loaded.second), DType::kF32)
            .to_f32_vector(),
        ops::dequantize_weight_fp8(want, DType::kF32).to_f32_vector());
    EXPECT_EQ(ops::projection_act_scaling(*loaded.second), ops::Fp8ActScaling::kPerGroup);
  }
}

// What cannot be read is refused with the checkpoint and tensor named.
TEST_F(DitFp8Test, MalformedFp8CheckpointsAreRefusedByName) {
  using Store = test::Fp8Store;
  auto per_channel = [](const std::string& name, const Tensor& w) {
    return ops::quantize_weight_fp8(w, ops::Fp8WeightScaling::kPerChannel);
  };
  struct Case {
    const char* tag;
    Store store;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"no_scale",
       [&](const std::string& n, const Tensor& w, std::vector<io::NamedTensor>& ts) {
         ts.push_back({n, per_channel(n, w).data});
       },
       "has no scale"},
      {"both_scales",
       [&](const std::string& n, const Tensor& w, std::vector<io::NamedTensor>& ts) {
         const ops::Fp8Weight q = per_channel(n, w);
         ts.push_back({n, q.data});
         ts.push_back({weight_stem(n) + ".weight_scale", q.scale});
         ts.push_back({weight_stem(n) + ".weight_scale_inv",
                       Tensor::from_f32(std::vector<float>(64, 1.0f), {8, 8})});
       },
       "one kind of scale"},
      {"wrong_shape",
       [&](const std::string& n, const Tensor& w, std::vector<io::NamedTensor>& ts) {
         const ops::Fp8Weight q = per_channel(n, w);
         ts.push_back({n, q.data});
         ts.push_back({weight_stem(n) + ".weight_scale", Tensor::from_f32({1.0f, 2.0f}, {2})});
       },
       "expected [] or [1]"},
      {"scale_beside_bf16",
       [&](const std::string& n, const Tensor& w, std::vector<io::NamedTensor>& ts) {
         ts.push_back({n, w});
         ts.push_back({weight_stem(n) + ".weight_scale", Tensor::from_f32({1.0f}, {1})});
       },
       "is not stored as F8_E4M3"},
      {"zero_scale",
       [&](const std::string& n, const Tensor& w, std::vector<io::NamedTensor>& ts) {
         const ops::Fp8Weight q = per_channel(n, w);
         ts.push_back({n, q.data});
         ts.push_back({weight_stem(n) + ".weight_scale", Tensor::from_f32({0.0f}, {})});
       },
       ".weight'"},
  };
  for (const Case& c : cases) {
    const std::string dir =
        write_fp8_transformer(repo_, (dir_->path() / c.tag).string(), c.store);
    try {
      (void)dit::DitModel::load(dir, dit::DitOptions{});
      ADD_FAILURE() << c.tag << ": loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << c.tag << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << c.tag << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("diffusion_pytorch_model.safetensors"),
                std::string::npos)
          << c.tag << ": " << e.what();
    }
  }
  // FP8 where the engine keeps float weights (a norm), and FP8 blocks streamed from host memory.
  const std::string norm_dir = (dir_->path() / "fp8_norm").string();
  {
    namespace fs = std::filesystem;
    fs::create_directories(norm_dir);
    fs::copy_file(repo_ + "/transformer/config.json", norm_dir + "/config.json",
                  fs::copy_options::overwrite_existing);
    const io::Checkpoint ckpt =
        io::Checkpoint::open(repo_ + "/transformer/diffusion_pytorch_model.safetensors");
    std::vector<io::NamedTensor> ts;
    for (const std::string& name : ckpt.names()) {
      const Tensor t = ckpt.tensor(name).to(ckpt.info(name).dtype);
      ts.push_back({name, name == "transformer_blocks.0.norm1.weight" ? t.to(DType::kF8E4M3) : t});
    }
    io::write_safetensors(norm_dir + "/diffusion_pytorch_model.safetensors", ts);
  }
  try {
    (void)dit::DitModel::load(norm_dir, dit::DitOptions{});
    ADD_FAILURE() << "an FP8 norm loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("transformer_blocks.0.norm1.weight"), std::string::npos)
        << e.what();
  }
}

TEST(Fp8Checkpoint, CompanionNamesMapToTheirWeight) {
  std::string w;
  EXPECT_TRUE(models::is_fp8_companion("a.b.weight_scale", &w));
  EXPECT_EQ(w, "a.b.weight");
  EXPECT_TRUE(models::is_fp8_companion("a.b.weight_scale_inv", &w));
  EXPECT_EQ(w, "a.b.weight");
  EXPECT_TRUE(models::is_fp8_companion("x.input_scale", &w));
  EXPECT_EQ(w, "x.weight");
  EXPECT_FALSE(models::is_fp8_companion("a.b.weight", &w));
  EXPECT_FALSE(models::is_fp8_companion(".weight_scale", &w));
  EXPECT_FALSE(models::is_fp8_companion("a.scale", &w));
}

}  // namespace
}  // namespace h3
