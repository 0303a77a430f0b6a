// Audio VAE building blocks (h3_components_spec.md §3): config parsing and validation, legacy
// weight-norm folding (§3.2), the head-averaging map of the attention projection (§3.3), the
// Kaiser-sinc anti-aliasing filter (§3.4, checked against the stored buffers of the golden
// checkpoint when it is present) and the DiT row layout (§3.5).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/part_timer.h"
#include "core/status.h"
#include "io/safetensors.h"
#include "models/audio_vae/audio_vae_config.h"
#include "models/audio_vae/audio_vae_filters.h"
#include "models/audio_vae/audio_vae_model.h"
#include "models/audio_vae/audio_vae_weights.h"
#include "support/golden.h"

namespace h3::audio_vae {
namespace {

template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.what();
    std::printf("  error: %s\n", e.what());
  }
}

nlohmann::json tiny_config() {
  return nlohmann::json::parse(R"({
    "_class_name": "AutoencoderKLMiniMaxH3Audio", "decoder_dim": 128,
    "decoder_kernel_sizes": [9, 9, 4, 4, 4, 4, 4], "decoder_rates": [5, 5, 2, 2, 2, 2, 2],
    "encoder_dim": 2, "encoder_rates": [2, 4, 4, 5, 5], "latent_channels": 32, "latent_dim": 64,
    "latents_mean": null, "latents_std": null, "num_attention_heads": 1,
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "resblock_kernel_sizes": [3, 7, 11], "sampling_rate": 32000})");
}

TEST(AudioVaeConfig, DefaultsAreTheRelease) {
  const AudioVaeConfig c = AudioVaeConfig::from_json(nlohmann::json::object(), "config.json");
  EXPECT_EQ(c.hop_length(), 800);
  EXPECT_EQ(c.head_dim(), 256);
  EXPECT_EQ(c.encoder_trunk_width(), 2048);
  EXPECT_EQ(c.decoder_channels(0), 512);
  EXPECT_EQ(c.decoder_channels(6), 8);
  // §3.1: N_a = round(num_frames / 24 * 40), Python rounding (half to even).
  EXPECT_EQ(c.latent_frames_for_video_frames(124), 207);
  EXPECT_EQ(c.latent_frames_for_video_frames(192), 320);
  EXPECT_EQ(c.latent_frames_for_video_frames(22), 37);
  EXPECT_EQ(c.latent_frames_for_video_frames(3), 5);  // 5.0 exactly
  // 9/24*40 = 15 exactly; 21/24*40 = 35; 15.5-type ties cannot occur with 24 fps, so check the
  // rounding direction on a non-tie: 13/24*40 = 21.67 -> 22.
  EXPECT_EQ(c.latent_frames_for_video_frames(13), 22);
}

TEST(AudioVaeConfig, ParsesTinyConfigAndNullStatistics) {
  const AudioVaeConfig c = AudioVaeConfig::from_json(tiny_config(), "config.json");
  EXPECT_EQ(c.latent_dim, 64);
  EXPECT_EQ(c.head_dim(), 64);
  EXPECT_EQ(c.decoder_channels(6), 1);
  ASSERT_EQ(c.latents_mean.size(), 32u);
  EXPECT_EQ(c.latents_mean[5], 0.0f);
  EXPECT_EQ(c.latents_std[5], 1.0f);
  // Round trip through to_json.
  const AudioVaeConfig d = AudioVaeConfig::from_json(c.to_json(), "roundtrip");
  EXPECT_EQ(d.decoder_rates, c.decoder_rates);
  EXPECT_EQ(d.resblock_dilation_sizes, c.resblock_dilation_sizes);
}

TEST(AudioVaeConfig, RejectsBadFields) {
  auto with = [](const char* key, const nlohmann::json& v) {
    nlohmann::json j = tiny_config();
    j[key] = v;
    return j;
  };
  expect_error([&] { AudioVaeConfig::from_json(with("decoder_rates", {5, 5, 2, 2, 2, 2, 4}), "c.json"); },
               ErrorCode::kInvalidFile, "hop length 800");
  expect_error([&] { AudioVaeConfig::from_json(with("latent_dim", 48), "c.json"); },
               ErrorCode::kInvalidFile, "latent_channels");
  expect_error([&] { AudioVaeConfig::from_json(with("num_attention_heads", 3), "c.json"); },
               ErrorCode::kInvalidFile, "num_attention_heads");
  expect_error([&] { AudioVaeConfig::from_json(with("decoder_kernel_sizes", {9, 9, 4, 4}), "c.json"); },
               ErrorCode::kInvalidFile, "equal length");
  expect_error([&] { AudioVaeConfig::from_json(with("decoder_kernel_sizes", {8, 9, 4, 4, 4, 4, 4}), "c.json"); },
               ErrorCode::kUnsupported, "kernel 8 and rate 5");
  expect_error([&] { AudioVaeConfig::from_json(with("resblock_kernel_sizes", {3, 6, 11}), "c.json"); },
               ErrorCode::kUnsupported, "kernel 6");
  expect_error([&] { AudioVaeConfig::from_json(with("latents_std", std::vector<double>(31, 1.0)), "c.json"); },
               ErrorCode::kInvalidFile, "latents_mean and latents_std");
  expect_error([&] { AudioVaeConfig::from_json(with("encoder_dim", "2"), "c.json"); },
               ErrorCode::kInvalidFile, "'encoder_dim'");
  expect_error([&] { AudioVaeConfig::from_json(with("_class_name", "AutoencoderKLMiniMaxH3"), "c.json"); },
               ErrorCode::kInvalidFile, "_class_name");
  expect_error([&] { AudioVaeConfig::from_json(with("resblock_dilation_sizes", {{1, 3}, {1}}), "c.json"); },
               ErrorCode::kInvalidFile, "one list per entry");
}

TEST(AudioVaeWeightNorm, FoldsPerSliceOfDimZero) {
  // Two output channels: v rows (3, 4 | 0, 0, ...) with norms 5 and 13.
  const Tensor v = Tensor::from_f32({3, 0, 4, 0, 5, 0, 12, 0}, {2, 2, 2});
  const Tensor g = Tensor::from_f32({10, -26}, {2, 1, 1});
  const std::vector<float> w = fold_weight_norm(g, v).to_f32_vector();
  const std::vector<float> expect = {6, 0, 8, 0, -10, 0, -24, 0};
  ASSERT_EQ(w.size(), expect.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_FLOAT_EQ(w[i], expect[i]) << "element " << i;
}

TEST(AudioVaeWeightNorm, RowNormEqualsGainAndDirectionIsKept) {
  // A ConvTranspose1d layout [in=3, out=4, k=5]: the norm is per input channel (dim 0).
  std::vector<float> vv(60), gv = {0.5f, 2.0f, 7.25f};
  for (size_t i = 0; i < vv.size(); ++i) vv[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f);
  const Tensor w = fold_weight_norm(Tensor::from_f32(gv, {3, 1, 1}), Tensor::from_f32(vv, {3, 4, 5}));
  EXPECT_EQ(w.shape(), (Shape{3, 4, 5}));
  const std::vector<float> wv = w.to_f32_vector();
  double worst = 0;
  for (int r = 0; r < 3; ++r) {
    double nw = 0, nv = 0;
    for (int i = 0; i < 20; ++i) {
      nw += static_cast<double>(wv[r * 20 + i]) * wv[r * 20 + i];
      nv += static_cast<double>(vv[r * 20 + i]) * vv[r * 20 + i];
    }
    worst = std::max(worst, std::abs(std::sqrt(nw) - gv[r]) / gv[r]);
    for (int i = 0; i < 20; ++i) {
      const double expect = vv[r * 20 + i] * gv[r] / std::sqrt(nv);
      EXPECT_NEAR(wv[r * 20 + i], expect, 1e-6 * gv[r]) << "row " << r << " element " << i;
    }
  }
  std::printf("  folded row norm vs gain: max rel err %.2e (bound 1e-6)\n", worst);
  EXPECT_LE(worst, 1e-6);
}

TEST(AudioVaeWeightNorm, RejectsMismatchedGain) {
  expect_error([] { fold_weight_norm(Tensor::from_f32({1, 2, 3}, {3, 1, 1}), Tensor::zeros({2, 3, 1}, DType::kF32)); },
               ErrorCode::kInvalidArgument, "one gain per slice");
}

TEST(AudioVaeHeadPool, AveragesHeadsThenAdaptiveWindows) {
  // 2 heads of 5 features pooled to 3: torch windows [0,2) [1,4) [3,5).
  const Tensor m = head_pool_matrix(2, 5, 3);
  ASSERT_EQ(m.shape(), (Shape{3, 10}));
  const std::vector<float> v = m.to_f32_vector();
  const std::vector<std::vector<int>> windows = {{0, 1}, {1, 2, 3}, {3, 4}};
  for (int o = 0; o < 3; ++o) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 5; ++d) {
        bool in = false;
        for (int x : windows[o]) in = in || x == d;
        const float expect = in ? static_cast<float>(1.0 / (2.0 * windows[o].size())) : 0.0f;
        EXPECT_FLOAT_EQ(v[o * 10 + h * 5 + d], expect) << "o=" << o << " h=" << h << " d=" << d;
      }
    }
  }
  // The release: 8 heads of 256 pooled to 32 averages groups of 8 consecutive features.
  const std::vector<float> r = head_pool_matrix(8, 256, 32).to_f32_vector();
  EXPECT_FLOAT_EQ(r[0 * 2048 + 3 * 256 + 7], 1.0f / 64.0f);
  EXPECT_FLOAT_EQ(r[0 * 2048 + 3 * 256 + 8], 0.0f);
  EXPECT_FLOAT_EQ(r[1 * 2048 + 5 * 256 + 8], 1.0f / 64.0f);
}

TEST(AudioVaeFilter, KaiserSincConstruction) {
  // §3.4: A = 2.285*5*pi*1.2 + 7.95 ~ 51.02 > 50, beta = 0.1102 (A - 8.7).
  const double a = 2.285 * 5 * 3.141592653589793 * 1.2 + 7.95;
  EXPECT_NEAR(kaiser_beta(0.3, 12), 0.1102 * (a - 8.7), 1e-12);
  // Kaiser window: symmetric, 1 at the centre of an odd window, I0(0)/I0(beta) at the ends.
  const std::vector<double> w = kaiser_window(5, 3.0);
  EXPECT_NEAR(w[2], 1.0, 1e-15);
  EXPECT_NEAR(w[0], w[4], 1e-15);
  EXPECT_NEAR(w[0], 1.0 / 4.880792585865024, 1e-12);  // 1/I0(3)
  const std::vector<float> f = alias_free_filter();
  ASSERT_EQ(f.size(), 12u);
  double sum = 0;
  for (size_t i = 0; i < 12; ++i) {
    sum += f[i];
    EXPECT_FLOAT_EQ(f[i], f[11 - i]) << "tap " << i;  // even length, symmetric about 5.5
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_GT(f[5], 0.4f);     // main lobe
  EXPECT_LT(f[3], 0.0f);     // first side lobe of sinc(0.5 t) at t = -2.5
  expect_error([] { kaiser_sinc_filter1d(0.0, 0.3, 12); }, ErrorCode::kInvalidArgument, "cutoff");
}

TEST(AudioVaeFilter, MatchesStoredBuffersOfGoldenCheckpoint) {
  const test::Golden* g = test::Golden::get();
  if (!g) {
    if (test::golden_required()) FAIL() << "golden folder missing: " << test::golden_dir();
    GTEST_SKIP() << "golden folder not found at " << test::golden_dir();
  }
  const io::Checkpoint ckpt = io::Checkpoint::open(g->checkpoint_dir() + "/audio_vae");
  const std::vector<float> built = alias_free_filter();
  int checked = 0;
  double worst = 0;
  for (const std::string& name : ckpt.names()) {
    if (name.size() < 7 || name.compare(name.size() - 7, 7, ".filter") != 0) continue;
    const std::vector<float> stored = ckpt.tensor(name).to_f32_vector();
    ASSERT_EQ(stored.size(), built.size()) << name;
    for (size_t i = 0; i < built.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(stored[i]) - built[i]));
    ++checked;
  }
  // A float32 construction in the reference, a float64 one rounded once here: a few ulps apart.
  std::printf("  %d stored filters vs construction: max abs diff %.2e (bound 1e-7)\n", checked, worst);
  EXPECT_GT(checked, 0);
  EXPECT_LE(worst, 1e-7);
}

// The golden checkpoint's model, for the input checks below (skips without the golden folder).
const AudioVae* golden_model() {
  static std::unique_ptr<AudioVae> vae;
  const test::Golden* g = test::Golden::get();
  if (!g) return nullptr;
  if (!vae) vae = std::make_unique<AudioVae>(AudioVae::load(g->checkpoint_dir() + "/audio_vae"));
  return vae.get();
}

#define AUDIO_VAE_OR_SKIP(var)                                                             \
  const AudioVae* var = golden_model();                                                    \
  if (!var) {                                                                              \
    if (test::golden_required()) FAIL() << "golden folder missing: " << test::golden_dir(); \
    GTEST_SKIP() << "golden folder not found at " << test::golden_dir();                   \
  }

TEST(AudioVaeModel, RejectsBadInputs) {
  AUDIO_VAE_OR_SKIP(vae);
  expect_error([&] { vae->decode(Tensor::zeros({2, 31, 4}, DType::kF32)); }, ErrorCode::kInvalidArgument,
               "expected float latents [B, 32, frames]");
  expect_error([&] { vae->decode(Tensor::zeros({2, 32, 0}, DType::kF32)); }, ErrorCode::kInvalidArgument,
               "expected float latents");
  expect_error([&] { vae->decode(Tensor::zeros({2, 32, 4}, DType::kI64)); }, ErrorCode::kInvalidArgument,
               "expected float latents");
  expect_error([&] { vae->encode(Tensor::zeros({2, 2, 800}, DType::kF32)); }, ErrorCode::kInvalidArgument,
               "[B, 1, samples]");
  expect_error([&] { vae->encode(Tensor::zeros({2, 0}, DType::kF32)); }, ErrorCode::kInvalidArgument,
               "empty");
  expect_error([&] { vae->encode_reference_rows(Tensor::zeros({800}, DType::kF32)); },
               ErrorCode::kInvalidArgument, "[channels, samples]");
  expect_error([&] { vae->normalize_latents(Tensor::zeros({2, 16, 3}, DType::kF32)); },
               ErrorCode::kInvalidArgument, "normalize_latents");
}

TEST(AudioVaeModel, ShapesPaddingAndClamp) {
  AUDIO_VAE_OR_SKIP(vae);
  // 801 samples pad to 1600: two latent frames; [B, S] and [B, 1, S] are the same request.
  std::vector<float> wave(2 * 801);
  for (size_t i = 0; i < wave.size(); ++i) wave[i] = 0.5f * std::sin(0.01f * static_cast<float>(i));
  const AudioPosterior a = vae->encode(Tensor::from_f32(wave, {2, 801}));
  const AudioPosterior b = vae->encode(Tensor::from_f32(wave, {2, 1, 801}));
  EXPECT_EQ(a.mean.shape(), (Shape{2, 32, 2}));
  EXPECT_EQ(a.mean.to_f32_vector(), b.mean.to_f32_vector());
  // Latents far outside the training range still decode to [-1, 1].
  const Tensor out = vae->decode(Tensor::from_f32(std::vector<float>(2 * 32 * 2, 40.0f), {2, 32, 2}));
  EXPECT_EQ(out.shape(), (Shape{2, 1, 1600}));
  for (float v : out.to_f32_vector()) ASSERT_TRUE(v >= -1.0f && v <= 1.0f) << v;
  // Normalization round trip.
  const Tensor z = Tensor::from_f32(std::vector<float>(32 * 3, 0.25f), {1, 32, 3});
  const std::vector<float> back = vae->denormalize_latents(vae->normalize_latents(z)).to_f32_vector();
  for (float v : back) EXPECT_NEAR(v, 0.25f, 1e-6f);
}

// A timed decode (h3 bench vae --profile) gives the same waveform, bit for bit, and marks every
// kind of pass the decoder makes.
TEST(AudioVaeModel, TimedDecodeIsTheSameDecodeWithItsParts) {
  AUDIO_VAE_OR_SKIP(vae);
  // The golden folder's width, whatever it is.
  const int64_t c = vae->config().latent_channels;
  std::vector<float> z(static_cast<size_t>(2 * c * 3));
  for (size_t i = 0; i < z.size(); ++i) z[i] = std::sin(0.37f * static_cast<float>(i));
  const Tensor zn = Tensor::from_f32(z, {2, c, 3});
  const std::vector<float> plain = vae->decode_normalized(zn).to_f32_vector();
  PartTimer timer(Device::cpu());
  timer.begin();
  const std::vector<float> timed = vae->decode_normalized(zn, &timer).to_f32_vector();
  std::map<std::string, double> parts;
  timer.collect(&parts);
  ASSERT_EQ(plain.size(), timed.size());
  EXPECT_EQ(std::memcmp(plain.data(), timed.data(), plain.size() * sizeof(float)), 0);
  for (const char* name : {kDecodePartInput, kDecodePartUpsample, kDecodePartActivation,
                           kDecodePartResConv, kDecodePartSum, kDecodePartOutput}) {
    ASSERT_TRUE(parts.count(name)) << name;
    EXPECT_GE(parts.at(name), 0.0) << name;
  }
  EXPECT_EQ(parts.size(), kDecodeParts.size());  // the parts above and the latents' upload
}

TEST(AudioVaeModel, CheckpointMustMatchConfig) {
  const test::Golden* g = test::Golden::get();
  if (!g) GTEST_SKIP() << "golden folder not found at " << test::golden_dir();
  const std::string dir = g->checkpoint_dir() + "/audio_vae";
  AudioVaeConfig c = AudioVaeConfig::load(dir);
  c.decoder_dim = 256;  // every decoder tensor changes shape
  expect_error([&] { AudioVae::from_checkpoint(c, io::Checkpoint::open(dir)); }, ErrorCode::kInvalidFile,
               "does not match its config");
  // Loading only the decoder leaves encode unavailable, with a clear error.
  AudioVaeOptions opt;
  opt.load_encoder = false;
  const AudioVae dec = AudioVae::load(dir, opt);
  expect_error([&] { dec.encode(Tensor::zeros({1, 800}, DType::kF32)); }, ErrorCode::kInvalidArgument,
               "without its encoder");
}

TEST(AudioVaeLayout, RowsAreChannelMajor) {
  // latents [2, 3, 4]: value = 100 c + 10 l + n.
  std::vector<float> v;
  for (int c = 0; c < 2; ++c)
    for (int l = 0; l < 3; ++l)
      for (int n = 0; n < 4; ++n) v.push_back(static_cast<float>(100 * c + 10 * l + n));
  const Tensor z = Tensor::from_f32(v, {2, 3, 4});
  const Tensor rows = latents_to_rows(z);
  ASSERT_EQ(rows.shape(), (Shape{8, 3}));
  // Row r = channel r / 4, frame r % 4; feature l.
  for (int r = 0; r < 8; ++r)
    for (int l = 0; l < 3; ++l)
      EXPECT_EQ(rows.item_as_double({r, l}), 100 * (r / 4) + 10 * l + (r % 4)) << "row " << r;
  const Tensor back = rows_to_latents(rows, 2);
  EXPECT_EQ(back.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(back.to_f32_vector(), v);
  expect_error([&] { rows_to_latents(Tensor::zeros({7, 3}, DType::kF32), 2); }, ErrorCode::kInvalidArgument,
               "rows_to_latents");
}

}  // namespace
}  // namespace h3::audio_vae
