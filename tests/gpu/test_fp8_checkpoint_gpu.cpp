// FP8 checkpoints (models/fp8_checkpoint.h) loaded onto the GPU: the E4M3 bytes go to the device
// as stored and the scales follow (per channel, or per 128 x 128 block as published), bit for bit
// as on the CPU. Skips visibly without a CUDA device.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "models/h3_dit/dit_model.h"
#include "models/tiny_model.h"
#include "ops/fp8.h"
#include "support/fp8_files.h"
#include "support/temp_dir.h"

namespace h3 {
namespace {

#define H3_REQUIRE_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine"

dit::DitModel load(const std::string& dir, Device dev) {
  dit::DitOptions o;
  o.device = dev;
  o.precision = dit::DitPrecision::kBF16;
  return dit::DitModel::load(dir, o);
}

void expect_same(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_TRUE(gpu.device().is_cuda()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  EXPECT_EQ(gpu.to(Device::cpu()).to_f32_vector(), cpu.to_f32_vector()) << what;
}

TEST(GpuFp8Checkpoint, PerChannelAndBlockScaledFilesLoadAsOnTheCpu) {
  H3_REQUIRE_CUDA();
  test::TempDir dir("h3_fp8_ckpt_gpu");
  const std::string repo = (dir.path() / "tiny").string();
  models::make_tiny(repo, {});
  for (ops::Fp8WeightScaling ws :
       {ops::Fp8WeightScaling::kPerChannel, ops::Fp8WeightScaling::kPerBlock}) {
    const bool block = ws == ops::Fp8WeightScaling::kPerBlock;
    const std::string tag = block ? "block" : "channel";
    const std::string path = test::write_fp8_transformer(
        repo, (dir.path() / tag).string(),
        [&](const std::string& name, const Tensor& w, std::vector<io::NamedTensor>& ts) {
          const ops::Fp8Weight q = ops::quantize_weight_fp8(w, ws);
          ts.push_back({name, q.data});
          ts.push_back(
              {test::weight_stem(name) + (block ? ".weight_scale_inv" : ".weight_scale"), q.scale});
        });
    const dit::DitModel cpu = load(path, Device::cpu());
    const dit::DitModel gpu = load(path, Device::cuda(0));
    EXPECT_TRUE(gpu.fp8_weights()) << tag;
    for (size_t i = 0; i < cpu.weights().blocks.size(); ++i) {
      const dit::DitBlockWeights &g = gpu.weights().blocks[i], &c = cpu.weights().blocks[i];
      const std::string at = tag + " block " + std::to_string(i);
      expect_same(g.attn.to_q, c.attn.to_q, at + " to_q");
      expect_same(g.attn.to_q_scale, c.attn.to_q_scale, at + " to_q scale");
      expect_same(g.ff.fc_in, c.ff.fc_in, at + " fc_in");
      expect_same(g.ff.fc_in_scale, c.ff.fc_in_scale, at + " fc_in scale");
      expect_same(g.adaln_w, c.adaln_w, at + " adaln");
      expect_same(g.adaln_scale, c.adaln_scale, at + " adaln scale");
    }
  }
}

}  // namespace
}  // namespace h3
