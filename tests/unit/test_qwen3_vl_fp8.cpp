// FP8 checkpoints of the conditioner as Qwen and llm-compressor publish them (models/
// fp8_checkpoint.h): the decoder projections stored in E4M3 with per-channel or 128 x 128 block
// scales load and run without --text-encoder-dtype fp8, and a per-channel file gives the very
// output of quantizing the bf16 checkpoint at load.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "models/qwen3_vl/qwen3_vl_model.h"
#include "models/tiny_model.h"
#include "ops/fp8.h"
#include "support/fp8_files.h"
#include "support/golden.h"
#include "support/temp_dir.h"

namespace h3 {
namespace {

namespace fs = std::filesystem;

using Store = test::Fp8Store;

bool is_decoder_projection(const std::string& name) {
  return name.find(".layers.") != std::string::npos &&
         test::ends_with_any(name,
                             {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                              "gate_proj.weight", "up_proj.weight", "down_proj.weight"});
}

using test::weight_stem;

class Qwen3VlFp8Checkpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>("h3_qwen_fp8");
    repo_ = (dir_->path() / "tiny").string();
    models::make_tiny(repo_, {});
  }
  static void TearDownTestSuite() { dir_.reset(); }

  // The tiny text encoder with every tensor passed through `edit`.
  static std::string write_all(const std::string& tag, const Store& edit) {
    const std::string src = repo_ + "/text_encoder", out = (dir_->path() / tag).string();
    fs::create_directories(out);
    for (const auto& e : fs::directory_iterator(src))
      if (e.path().extension() == ".json")
        fs::copy_file(e.path(), fs::path(out) / e.path().filename(),
                      fs::copy_options::overwrite_existing);
    const io::Checkpoint ckpt = io::Checkpoint::open(src + "/model.safetensors");
    std::vector<io::NamedTensor> ts;
    for (const std::string& name : ckpt.names())
      edit(name, ckpt.tensor(name).to(ckpt.info(name).dtype), ts);
    io::write_safetensors(out + "/model.safetensors", ts);
    return out;
  }
  // ... with every decoder projection stored by `store`, everything else as it was.
  static std::string write(const std::string& tag, const Store& store) {
    return write_all(tag,
                     [&](const std::string& n, const Tensor& t, std::vector<io::NamedTensor>& ts) {
                       if (is_decoder_projection(n))
                         store(n, t, ts);
                       else
                         ts.push_back({n, t});
                     });
  }
  static qwen3_vl::Qwen3VlModel load(const std::string& dir, bool fp8) {
    qwen3_vl::Qwen3VlLoadOptions o;
    o.fp8 = fp8;
    o.vision = false;
    return qwen3_vl::Qwen3VlModel::load(dir, DType::kBF16, Device::cpu(), o);
  }
  static std::unique_ptr<test::TempDir> dir_;
  static std::string repo_;
};
std::unique_ptr<test::TempDir> Qwen3VlFp8Checkpoint::dir_;
std::string Qwen3VlFp8Checkpoint::repo_;

const std::vector<int64_t> kIds = {1, 5, 9, 2, 7, 3};

// compressed-tensors' "channel" strategy: `weight_scale` [N, 1] in bf16, as llm-compressor writes.
// The scales are bf16-exact here, so the file holds exactly what quantizing at load computes.
TEST_F(Qwen3VlFp8Checkpoint, PerChannelFileRunsAsQuantizingAtLoad) {
  const std::string dir = write(
      "channel", [](const std::string& name, const Tensor& w, std::vector<io::NamedTensor>& ts) {
        ops::Fp8Weight q = ops::quantize_weight_fp8(w, ops::Fp8WeightScaling::kPerChannel);
        ts.push_back({name, q.data});
        ts.push_back({weight_stem(name) + ".weight_scale", q.scale.reshape({q.scale.size(0), 1})});
      });
  const qwen3_vl::Qwen3VlModel m = load(dir, false);
  EXPECT_GT(m.fp8_from_checkpoint(), 0);
  EXPECT_EQ(load(repo_ + "/text_encoder", true).fp8_from_checkpoint(), 0);
  const Tensor got = m.encode_text(kIds);
  const Tensor want = load(repo_ + "/text_encoder", true).encode_text(kIds);
  EXPECT_EQ(got.to_f32_vector(), want.to_f32_vector());
}

// Qwen's own FP8 release: `weight_scale_inv` [ceil(N/128), ceil(K/128)] (blocks of 128 x 128),
// kept as blocks at load (activations per token and 128 columns). The output stays within what
// FP8 costs against bf16.
TEST_F(Qwen3VlFp8Checkpoint, BlockScaledFileLoadsAndStaysNearBf16) {
  const std::string dir = write(
      "block", [](const std::string& name, const Tensor& w, std::vector<io::NamedTensor>& ts) {
        ops::Fp8Weight q = ops::quantize_weight_fp8(w, ops::Fp8WeightScaling::kPerBlock);
        ts.push_back({name, q.data});
        ts.push_back({weight_stem(name) + ".weight_scale_inv", q.scale.to(DType::kBF16)});
      });
  const qwen3_vl::Qwen3VlModel m = load(dir, false);
  EXPECT_GT(m.fp8_from_checkpoint(), 0);
  const Tensor bf16 = load(repo_ + "/text_encoder", false).encode_text(kIds);
  const Tensor fp8 = load(repo_ + "/text_encoder", true).encode_text(kIds);
  const Tensor got = m.encode_text(kIds);
  const double fp8_err = test::compare(fp8, bf16).rel_l2;
  const double err = test::compare(got, bf16).rel_l2;
  std::printf("block-scaled file vs bf16: rel_l2 %.4f (quantized at load: %.4f)\n", err, fp8_err);
  EXPECT_GT(err, 0.0);
  // The file's one E4M3 rounding on block scales (bf16-rounded), with activations per token and
  // 128 columns: measured 0.274 against 0.222 for one per-channel rounding on this random model
  // (1.23x; quantizing the blocks again per channel, as loads did before, gave 0.348). The bound
  // is that earlier 1.57x with 1.6x of margin; a lost or misplaced block scale gives O(1) errors.
  EXPECT_LT(err, 2.5 * fp8_err + 1e-3);
}

TEST_F(Qwen3VlFp8Checkpoint, Fp8EmbeddingsAndStreamedFp8LayersAreRefused) {
  const std::string dir = write(
      "streamed", [](const std::string& name, const Tensor& w, std::vector<io::NamedTensor>& ts) {
        ops::Fp8Weight q = ops::quantize_weight_fp8(w, ops::Fp8WeightScaling::kPerChannel);
        ts.push_back({name, q.data});
        ts.push_back({weight_stem(name) + ".weight_scale", q.scale});
      });
  qwen3_vl::Qwen3VlLoadOptions o;
  o.stream_layers = true;
  o.vision = false;
  try {
    (void)qwen3_vl::Qwen3VlModel::load(dir, DType::kBF16, Device::cpu(), o);
    FAIL() << "streamed FP8 layers loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
  }
  // An FP8 embedding table: no scale convention covers it.
  const std::string out = write_all(
      "embed", [](const std::string& n, const Tensor& t, std::vector<io::NamedTensor>& ts) {
        ts.push_back({n, n.find("embed_tokens") != std::string::npos ? t.to(DType::kF8E4M3) : t});
      });
  try {
    (void)load(out, false);
    FAIL() << "an FP8 embedding table loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("embed_tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace h3
