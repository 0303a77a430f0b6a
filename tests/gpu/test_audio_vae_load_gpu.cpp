// The audio VAE's weights loaded onto the GPU equal the CPU load: on CUDA the stored tensors are
// read straight to the device into one allocation and the weight-norm fold runs there, in place
// (ops::weight_norm_into), where the CPU folds on the host. Biases, Snake parameters, the attention
// bias and the anti-aliasing filters must be the same bits; folded weights the same bits but where
// a norm lies on a float32 rounding boundary (the device's float64 sum of squares is taken in
// another order than the host's): there at most one ulp. The count of such elements is printed
// (expected 0). The same holds with the benchmarks' random weights (io::WeightFill), which fill on
// the device for the device load and on the host for the host's filters. Skips visibly without a
// CUDA device or golden data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "io/device_loader.h"
#include "models/audio_vae/audio_vae_model.h"
#include "models/audio_vae/audio_vae_weights.h"
#include "ops/ops.h"
#include "pipeline/random_weights.h"
#include "support/golden.h"

namespace h3::audio_vae {
namespace {

#define H3_REQUIRE_CUDA() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device in this build/machine"

struct UlpStats {
  int64_t count = 0;
  int64_t differing = 0;
  int64_t max_ulps = 0;
};

int64_t ordered(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof(i));
  return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : static_cast<int64_t>(i);
}

// Compares two float32 tensors element by element in ulps; shapes must agree.
void add_ulps(UlpStats& s, const std::string& what, const Tensor& host, const Tensor& device) {
  ASSERT_TRUE(host.defined() && device.defined()) << what;
  ASSERT_EQ(host.shape(), device.shape()) << what;
  ASSERT_EQ(device.dtype(), DType::kF32) << what << " " << device.desc();
  ASSERT_TRUE(device.device().is_cuda()) << what << " " << device.desc();
  const std::vector<float> a = host.to_f32_vector();
  const std::vector<float> b = device.to(Device::cpu()).to_f32_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t d = std::llabs(ordered(a[i]) - ordered(b[i]));
    s.differing += d != 0;
    s.max_ulps = std::max(s.max_ulps, d);
  }
  s.count += static_cast<int64_t>(a.size());
}

void expect_exact(const std::string& what, const Tensor& host, const Tensor& device) {
  UlpStats s;
  add_ulps(s, what, host, device);
  EXPECT_EQ(s.differing, 0) << what << ": " << s.differing << " of " << s.count
                            << " elements differ (max " << s.max_ulps << " ulps)";
}

TEST(GpuAudioVaeLoad, WeightNormFoldMatchesHostAtReleasedShapes) {
  H3_REQUIRE_CUDA();
  // Released decoder shapes: conv_pre [1024, 2048, 7], an upsampler [1024, 512, 9] (norm per input
  // channel), a resblock conv [64, 64, 11], conv_post [1, 8, 7].
  const std::vector<Shape> shapes = {{1024, 2048, 7}, {1024, 512, 9}, {64, 64, 11}, {1, 8, 7}};
  UlpStats s;
  uint64_t seed = 1;
  for (const Shape& shape : shapes) {
    Tensor v = Tensor::empty(shape, DType::kF32);
    Tensor g = Tensor::empty({shape[0], 1, 1}, DType::kF32);
    ops::fill_random(v, seed++, 0.0f, 0.05f);
    ops::fill_random(g, seed++, 1.0f, 0.5f);
    const Tensor host = fold_weight_norm(g, v);
    const Tensor dev = fold_weight_norm(g.to(Device::cuda(0)), v.to(Device::cuda(0)));
    add_ulps(s, shape_str(shape), host, dev);
    // The device fold is deterministic: the same bits again.
    const Tensor again = fold_weight_norm(g.to(Device::cuda(0)), v.to(Device::cuda(0)));
    expect_exact(shape_str(shape) + " (repeat)", dev.to(Device::cpu()), again);
    // Folded over v where it lies (the device load's way): the same bits.
    Tensor in_place = v.to(Device::cuda(0));
    ops::weight_norm_into(in_place, g.to(Device::cuda(0)), in_place);
    expect_exact(shape_str(shape) + " (in place)", dev.to(Device::cpu()), in_place);
  }
  std::printf(
      "[gpu weight_norm fold] %lld elements, %lld differ from the host fold, max %lld ulps "
      "(bound 1; expected 0)\n",
      static_cast<long long>(s.count), static_cast<long long>(s.differing),
      static_cast<long long>(s.max_ulps));
  EXPECT_LE(s.max_ulps, 1);
}

// Every tensor of two loads of the same checkpoint: folded weights within one ulp, the rest exact.
void compare_loads(const AudioVaeWeights& h, const AudioVaeWeights& d) {
  UlpStats folded;
  auto conv = [&](const std::string& what, const ConvWeights& a, const ConvWeights& b, bool wn) {
    if (wn) {
      add_ulps(folded, what + ".w", a.w, b.w);
    } else {
      expect_exact(what + ".w", a.w, b.w);
    }
    ASSERT_EQ(a.b.defined(), b.b.defined()) << what;
    if (a.b.defined()) expect_exact(what + ".b", a.b, b.b);
  };
  auto act = [&](const std::string& what, const ActivationWeights& a, const ActivationWeights& b) {
    expect_exact(what + ".log_alpha", a.log_alpha, b.log_alpha);
    expect_exact(what + ".log_beta", a.log_beta, b.log_beta);
    expect_exact(what + ".up_filter", a.up_filter, b.up_filter);
    expect_exact(what + ".down_filter", a.down_filter, b.down_filter);
  };
  ASSERT_EQ(h.has_encoder, d.has_encoder);
  ASSERT_EQ(h.has_decoder, d.has_decoder);
  if (h.has_encoder) {
    const EncoderWeights &a = h.encoder, &b = d.encoder;
    conv("encoder.conv_in", a.conv_in, b.conv_in, true);
    ASSERT_EQ(a.blocks.size(), b.blocks.size());
    for (size_t i = 0; i < a.blocks.size(); ++i) {
      const std::string p = "encoder.block" + std::to_string(i);
      for (size_t u = 0; u < a.blocks[i].units.size(); ++u) {
        const ResidualUnitWeights &x = a.blocks[i].units[u], &y = b.blocks[i].units[u];
        expect_exact(p + ".alpha1", x.alpha1, y.alpha1);
        conv(p + ".conv1", x.conv1, y.conv1, true);
        expect_exact(p + ".alpha2", x.alpha2, y.alpha2);
        conv(p + ".conv2", x.conv2, y.conv2, true);
      }
      expect_exact(p + ".alpha", a.blocks[i].alpha, b.blocks[i].alpha);
      conv(p + ".down", a.blocks[i].down, b.blocks[i].down, true);
    }
    expect_exact("encoder.alpha_out", a.alpha_out, b.alpha_out);
    conv("encoder.conv_out", a.conv_out, b.conv_out, true);
    const PreBlockWeights &x = a.pre_block, &y = b.pre_block;
    const Tensor* hx[] = {&x.norm1_w,     &x.norm1_b, &x.norm3_w, &x.norm3_b,    &x.norm2_w,
                          &x.norm2_b,     &x.qkv_w,   &x.qkv_b,   &x.head_pool,  &x.attn_proj_w,
                          &x.attn_proj_b, &x.proj_w,  &x.proj_b,  &x.mlp_norm_w, &x.mlp_norm_b,
                          &x.w0,          &x.b0,      &x.w1,      &x.b1,         &x.w2,
                          &x.b2};
    const Tensor* dy[] = {&y.norm1_w,     &y.norm1_b, &y.norm3_w, &y.norm3_b,    &y.norm2_w,
                          &y.norm2_b,     &y.qkv_w,   &y.qkv_b,   &y.head_pool,  &y.attn_proj_w,
                          &y.attn_proj_b, &y.proj_w,  &y.proj_b,  &y.mlp_norm_w, &y.mlp_norm_b,
                          &y.w0,          &y.b0,      &y.w1,      &y.b1,         &y.w2,
                          &y.b2};
    for (size_t i = 0; i < sizeof(hx) / sizeof(hx[0]); ++i)
      expect_exact("pre_block tensor " + std::to_string(i), *hx[i], *dy[i]);
    conv("mean_proj", a.mean_proj, b.mean_proj, false);
    conv("logs_proj", a.logs_proj, b.logs_proj, false);
  }
  if (h.has_decoder) {
    const DecoderWeights &a = h.decoder, &b = d.decoder;
    conv("dec_in_proj", a.in_proj, b.in_proj, false);
    conv("conv_pre", a.conv_pre, b.conv_pre, true);
    ASSERT_EQ(a.ups.size(), b.ups.size());
    for (size_t i = 0; i < a.ups.size(); ++i)
      conv("ups" + std::to_string(i), a.ups[i], b.ups[i], true);
    ASSERT_EQ(a.resblocks.size(), b.resblocks.size());
    for (size_t i = 0; i < a.resblocks.size(); ++i) {
      const std::string p = "resblock" + std::to_string(i);
      const AmpBlockWeights &x = a.resblocks[i], &y = b.resblocks[i];
      for (size_t m = 0; m < x.convs1.size(); ++m) {
        conv(p + ".convs1." + std::to_string(m), x.convs1[m], y.convs1[m], true);
        conv(p + ".convs2." + std::to_string(m), x.convs2[m], y.convs2[m], true);
      }
      for (size_t m = 0; m < x.acts.size(); ++m)
        act(p + ".act" + std::to_string(m), x.acts[m], y.acts[m]);
    }
    act("act_post", a.act_post, b.act_post);
    conv("conv_post", a.conv_post, b.conv_post, true);
  }
  std::printf(
      "[gpu audio VAE load] folded weights: %lld elements, %lld differ from the host load, "
      "max %lld ulps (bound 1; expected 0); every other tensor exact\n",
      static_cast<long long>(folded.count), static_cast<long long>(folded.differing),
      static_cast<long long>(folded.max_ulps));
  EXPECT_LE(folded.max_ulps, 1);
}

std::string golden_audio_vae_dir() {
  const test::Golden* g = test::Golden::get();
  return g ? g->checkpoint_dir() + "/audio_vae" : std::string();
}

#define AUDIO_VAE_DIR_OR_SKIP(var)                                                                 \
  const std::string var = golden_audio_vae_dir();                                                  \
  if (var.empty()) {                                                                               \
    if (test::golden_required()) FAIL() << "golden folder missing: " << test::golden_dir();        \
    GTEST_SKIP() << "golden folder not found at " << test::golden_dir() << " (set H3_GOLDEN_DIR)"; \
  }

TEST(GpuAudioVaeLoad, DeviceLoadEqualsHostLoad) {
  H3_REQUIRE_CUDA();
  AUDIO_VAE_DIR_OR_SKIP(dir);
  const AudioVaeConfig config = AudioVaeConfig::load(dir);
  const io::Checkpoint ckpt = io::Checkpoint::open(dir);
  AudioVaeWeightPolicy host, dev;
  dev.device = Device::cuda(0);
  const io::LoadStats before = io::device_load_totals();
  const AudioVaeWeights d = load_audio_vae_weights(config, ckpt, dev);
  const io::LoadStats after = io::device_load_totals();
  // The loader's bytes are the checkpoint's (the 12-tap filters, read on the host, included), and
  // the method the device pass's.
  EXPECT_EQ(after.bytes - before.bytes, ckpt.total_bytes());
  EXPECT_NE(after.method, io::LoadMethod::kMmap);
  std::printf("[gpu audio VAE load] %s (totals since the process started)\n", after.str().c_str());
  // One allocation holds the device pass: weights used as stored and folds written over their v.
  const std::shared_ptr<Storage>& pack = d.decoder.in_proj.w.storage();
  EXPECT_EQ(d.decoder.conv_pre.w.storage(), pack);
  EXPECT_EQ(d.decoder.conv_post.w.storage(), pack);
  EXPECT_EQ(d.decoder.resblocks.back().acts.back().log_beta.storage(), pack);
  EXPECT_EQ(d.encoder.conv_in.w.storage(), pack);
  compare_loads(load_audio_vae_weights(config, ckpt, host), d);
  // Decoder only: the encoder's tensors are not read.
  dev.load_encoder = host.load_encoder = false;
  compare_loads(load_audio_vae_weights(config, ckpt, host),
                load_audio_vae_weights(config, ckpt, dev));
  io::release_device_staging();
}

TEST(GpuAudioVaeLoad, RandomWeightsFillTheSameOnBothLoads) {
  H3_REQUIRE_CUDA();
  AUDIO_VAE_DIR_OR_SKIP(dir);
  const AudioVaeConfig config = AudioVaeConfig::load(dir);
  const io::Checkpoint ckpt = io::Checkpoint::open(dir);
  AudioVaeWeightPolicy host, dev;
  dev.device = Device::cuda(0);
  AudioVaeWeights h, d, plain;
  {
    const pipeline::RandomWeightsScope random(7);
    h = load_audio_vae_weights(config, ckpt, host);
    d = load_audio_vae_weights(config, ckpt, dev);
  }
  compare_loads(h, d);
  // The fill did replace the stored values.
  plain = load_audio_vae_weights(config, ckpt, host);
  const std::vector<float> a = plain.decoder.in_proj.b.to_f32_vector();
  const std::vector<float> b = h.decoder.in_proj.b.to_f32_vector();
  EXPECT_NE(a, b);
  io::release_device_staging();
}

}  // namespace
}  // namespace h3::audio_vae
