// Video VAE unit tests: tile layouts (h3_components_spec.md §2.7 and the golden README's released
// tiling), temporal windows and exact frame counts (§2.8), blend weights, config validation, and
// a small random-weight model end to end (shapes, tiling, float16 autocast policy, bad input).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/video_vae/video_vae_decoder.h"
#include "models/video_vae/video_vae_model.h"
#include "models/video_vae/video_vae_tiling.h"
#include "ops/ops.h"
#include "support/golden.h"
#include "support/scoped_env.h"

namespace h3 {
namespace {

using video_vae::split_tiles;
using video_vae::TileAxis;
using video_vae::VideoVae;
using video_vae::VideoVaeConfig;

using V = std::vector<int64_t>;

TEST(VideoVaeTiling, ReleasedLayoutAt1344x768) {
  // 768 x 1344 pixels = 48 x 84 latents: 4 x 7 = 28 tiles of 256 px (16 x 16 latents).
  const TileAxis y = split_tiles(48 * 16, 256, 64, 16);
  EXPECT_EQ(y.starts, (V{0, 160, 336, 512}));
  EXPECT_EQ(y.overlaps, (V{96, 80, 80}));
  EXPECT_EQ(y.lengths, (V{256, 256, 256, 256}));
  const TileAxis x = split_tiles(84 * 16, 256, 64, 16);
  EXPECT_EQ(x.starts, (V{0, 176, 352, 528, 704, 896, 1088}));
  EXPECT_EQ(x.overlaps, (V{80, 80, 80, 80, 64, 64}));
  // Every tile is whole and the last one ends exactly at the edge.
  EXPECT_EQ(y.starts.back() + 256, 768);
  EXPECT_EQ(x.starts.back() + 256, 1344);
  for (int64_t o : x.overlaps) EXPECT_EQ(o % 16, 0);
}

TEST(VideoVaeTiling, ReleasedLayoutAt384x640) {
  const TileAxis y = split_tiles(384, 256, 64, 16);
  EXPECT_EQ(y.starts, (V{0, 128}));
  EXPECT_EQ(y.overlaps, (V{128}));
  const TileAxis x = split_tiles(640, 256, 64, 16);
  EXPECT_EQ(x.starts, (V{0, 192, 384}));
  EXPECT_EQ(x.overlaps, (V{64, 64}));
}

TEST(VideoVaeTiling, SmallAxesAndGoldenTiny) {
  // A tile covering the axis: one tile, no overlaps (tiling inactive below 256 px).
  const TileAxis one = split_tiles(192, 256, 64, 16);
  EXPECT_EQ(one.starts, (V{0}));
  EXPECT_EQ(one.lengths, (V{192}));
  EXPECT_TRUE(one.overlaps.empty());
  // The golden tiled cases: 32 px tiles, 16 px overlap on 64 and 96 px.
  EXPECT_EQ(split_tiles(64, 32, 16, 16).starts, (V{0, 16, 32}));
  EXPECT_EQ(split_tiles(96, 32, 16, 16).starts, (V{0, 16, 32, 48, 64}));
  EXPECT_THROW(split_tiles(0, 256, 64, 16), Error);
  EXPECT_THROW(split_tiles(512, 256, 256, 16), Error);
}

TEST(VideoVaeTiling, TileSettingsValidation) {
  video_vae::TileSettings t;
  EXPECT_NO_THROW(t.validate(16));
  t.tile_width = 250;
  EXPECT_THROW(t.validate(16), Error);
  t = {};
  t.min_overlap_height = 256;
  EXPECT_THROW(t.validate(16), Error);
}

TEST(VideoVaeFrames, EncodedLatentFrames) {
  const VideoVaeConfig c;  // released geometry: clip 17, token_drop 3, temporal x4
  EXPECT_EQ(c.clip_latent_frames(17), 5);
  EXPECT_EQ(c.clip_latent_frames(1), 1);
  EXPECT_EQ(c.encoded_latent_frames(1), 1);
  EXPECT_EQ(c.encoded_latent_frames(5), 2);
  EXPECT_EQ(c.encoded_latent_frames(22), 7);
  EXPECT_EQ(c.encoded_latent_frames(124), 37);
  EXPECT_EQ(c.encoded_latent_frames(192), 57);
  for (int64_t n = 1; n <= 12; ++n) EXPECT_EQ(c.encoded_latent_frames(17 * n + 5), 5 * n + 2);
  EXPECT_EQ(c.frame_pre_padding(), 3);
  EXPECT_EQ(c.tokens_chunk_size(), 5);
  EXPECT_EQ(c.token_overlap(), 2);
  EXPECT_EQ(c.frame_overlap(), 5);
}

TEST(VideoVaeFrames, TemporalDecodePlan) {
  const VideoVaeConfig c;
  // Every legal length: 5n+2 latents -> n windows, no padding, exactly 17n+5 frames.
  for (int64_t n = 1; n <= 12; ++n) {
    const auto p = video_vae::temporal_decode_plan(5 * n + 2, c);
    EXPECT_EQ(p.pad_tokens, 0) << n;
    EXPECT_EQ(p.num_chunks, n) << n;
    EXPECT_EQ(p.output_frames, 17 * n + 5) << n;
  }
  const auto p37 = video_vae::temporal_decode_plan(37, c);
  EXPECT_EQ(p37.num_chunks, 7);  // 7 windows x 28 tiles = 196 decoder calls at 768x1344 (§2.11)
  EXPECT_EQ(p37.output_frames, 124);
  EXPECT_EQ(p37.window_tokens, 7);
  EXPECT_EQ(p37.window_frames, 28);
  EXPECT_EQ(p37.main_frames, 17);
  EXPECT_EQ(p37.overlap_frames, 5);
  // Other lengths pad by repeating the last latent and cut the padded tail's frames.
  EXPECT_EQ(video_vae::temporal_decode_plan(3, c).output_frames, 9);
  EXPECT_EQ(video_vae::temporal_decode_plan(6, c).output_frames, 18);
  EXPECT_EQ(video_vae::temporal_decode_plan(13, c).output_frames, 43);
  const auto p13 = video_vae::temporal_decode_plan(13, c);
  EXPECT_EQ(p13.pad_tokens, 4);
  EXPECT_EQ(p13.num_chunks, 3);
  EXPECT_EQ(p13.trailing_cut, 13);
  // Below one window (the reference cannot decode these) one padded window is used.
  EXPECT_EQ(video_vae::temporal_decode_plan(1, c).output_frames, 1);
  EXPECT_EQ(video_vae::temporal_decode_plan(2, c).output_frames, 5);
  EXPECT_THROW(video_vae::temporal_decode_plan(0, c), Error);
}

TEST(VideoVaeBlend, WeightsAndRoundingPerDtype) {
  // a = 1, b = 0 over 4 columns: the blended columns are 1 - p/E for p = 0..E-1.
  Tensor a = Tensor::zeros({2, 4}, DType::kF32);
  a.fill(1.0);
  const Tensor b = Tensor::zeros({2, 4}, DType::kF32);
  const Tensor out = video_vae::blend(a, b, 3, -1);
  ASSERT_EQ(out.shape(), (Shape{2, 4}));
  const std::vector<float> v = out.to_f32_vector();
  EXPECT_FLOAT_EQ(v[0], 1.0f);
  EXPECT_FLOAT_EQ(v[1], 1.0f - 1.0f / 3.0f);
  EXPECT_FLOAT_EQ(v[2], 1.0f - 2.0f / 3.0f);
  EXPECT_FLOAT_EQ(v[3], 0.0f);  // past the overlap: b unchanged
  // float16: p/E and 1 - p/E are each rounded to float16 first.
  const Tensor out16 = video_vae::blend(a.to(DType::kF16), b.to(DType::kF16), 3, -1);
  EXPECT_EQ(out16.dtype(), DType::kF16);
  EXPECT_EQ(out16.to_f32_vector()[1], round_f16(1.0f - round_f16(1.0f / 3.0f)));
  // Along rows (dim -2) with an extent larger than the tiles: clipped to the smaller size.
  const Tensor rows = video_vae::blend(a, b, 10, -2);
  EXPECT_FLOAT_EQ(rows.to_f32_vector()[0], 1.0f);
  EXPECT_FLOAT_EQ(rows.to_f32_vector()[4], 0.5f);
  EXPECT_EQ(video_vae::blend(a, b, 0, -1).to_f32_vector(), b.to_f32_vector());
}

TEST(VideoVaeBlend, StitchCropsTrailingOverlaps) {
  // 2 x 2 tiles of 4 x 4 with overlaps 2 (rows) and 1 (cols): output (4+2) x (4+3) = 6 x 7.
  std::vector<std::vector<Tensor>> tiles(2);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      Tensor t = Tensor::zeros({1, 4, 4}, DType::kF32);
      t.fill(10.0 * i + j);
      tiles[i].push_back(t);
    }
  }
  const Tensor s = video_vae::stitch_tiles(tiles, {2}, {1});
  ASSERT_EQ(s.shape(), (Shape{1, 6, 7}));
  EXPECT_FLOAT_EQ(static_cast<float>(s.item_as_double({0, 0, 0})), 0.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(s.item_as_double({0, 0, 6})), 1.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(s.item_as_double({0, 5, 0})), 10.0f);
  // First blended row of the lower tiles: weight 0 for the new tile, so the upper tile's value.
  EXPECT_FLOAT_EQ(static_cast<float>(s.item_as_double({0, 2, 0})), 0.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(s.item_as_double({0, 3, 0})), 5.0f);
}

TEST(VideoVaeConfig, ValidationAndDefaults) {
  nlohmann::json j = VideoVaeConfig().to_json();
  const VideoVaeConfig c = VideoVaeConfig::from_json(j, "config.json");
  EXPECT_EQ(c.spatial_ratio(), 16);
  EXPECT_EQ(c.temporal_ratio(), 4);
  EXPECT_EQ(c.decoder_rotary_dim(), 48);
  EXPECT_EQ(c.decoder_width(), 2048);
  auto expect_bad = [](nlohmann::json bad, ErrorCode code) {
    try {
      VideoVaeConfig::from_json(bad, "vae/config.json");
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find("vae/config.json"), std::string::npos) << e.what();
    }
  };
  nlohmann::json b = j;
  b["_class_name"] = "AutoencoderKL";
  expect_bad(b, ErrorCode::kInvalidFile);
  b = j;
  b["latents_std"] = std::vector<double>(23, 1.0);
  expect_bad(b, ErrorCode::kInvalidFile);
  b = j;
  b["spatial_downsample_factors"] = {2, 2, 2};
  expect_bad(b, ErrorCode::kInvalidFile);
  b = j;
  b["spatial_downsample_factors"] = {3, 2, 2, 2, 1, 1};
  expect_bad(b, ErrorCode::kUnsupported);
  b = j;
  b["norm_num_groups"] = 7;
  expect_bad(b, ErrorCode::kInvalidFile);
  b = j;
  b["decoder_rope_dim_ratio"] = 0.5;  // 32 rotary channels: not a multiple of 6
  expect_bad(b, ErrorCode::kInvalidFile);
  b = j;
  b["spatial_padding_mode"] = "circular";
  expect_bad(b, ErrorCode::kInvalidFile);
}

TEST(VideoVaeDecoder, RopeTables) {
  VideoVaeConfig c;
  c.decoder_attention_head_dim = 32;  // 24 rotary channels: 4 frequencies per axis
  const auto r = video_vae::decoder_rope(c, 1, 2, 3);
  ASSERT_EQ(r.cos.shape(), (Shape{6 + 5, 24}));
  // t = 1: coordinate 0 on the time axis -> angle 0; suffix tokens are all at position 0.
  EXPECT_FLOAT_EQ(static_cast<float>(r.cos.item_as_double({0, 0})), 1.0f);
  EXPECT_FLOAT_EQ(static_cast<float>(r.cos.item_as_double({10, 7})), 1.0f);
  // y of row 0 of 2 is -0.5: angle 2*pi*(-0.5)*1 = -pi for frequency 0; duplicated at +12.
  EXPECT_NEAR(r.cos.item_as_double({0, 4}), -1.0, 1e-6);
  EXPECT_EQ(r.cos.item_as_double({0, 4}), r.cos.item_as_double({0, 16}));
  EXPECT_NEAR(r.sin.item_as_double({0, 8}), std::sin(2.0 * M_PI * (-2.0 / 3.0)), 1e-6);
}

// A small config with random weights: 2 levels (x4 space, x4 time), 1-layer decoder.
VideoVaeConfig small_config() {
  VideoVaeConfig c;
  c.block_out_channels = {8, 8};
  c.layers_per_block = 1;
  c.spatial_downsample_factors = {2, 2};
  c.temporal_downsample_factors = {2, 2};
  c.norm_num_groups = 4;
  c.latent_channels = 4;
  c.latents_mean = {0.1f, -0.2f, 0.0f, 0.3f};
  c.latents_std = {1.5f, 0.5f, 1.0f, 2.0f};
  c.decoder_num_layers = 1;
  c.decoder_num_attention_heads = 2;
  c.decoder_attention_head_dim = 8;  // 6 rotary channels
  c.decoder_num_register_tokens = 2;
  c.validate("small config");
  return c;
}

video_vae::VideoVae small_model(video_vae::VaePrecision precision, bool tiling, int64_t tile_batch = 0) {
  const VideoVaeConfig c = small_config();
  video_vae::VideoVaeWeightPolicy wp;
  wp.decoder_gemm_dtype = precision == video_vae::VaePrecision::kF16Autocast ? DType::kF16 : DType::kF32;
  video_vae::VideoVaeOptions opt;
  opt.precision = precision;
  opt.use_tiling = tiling;
  opt.tiles = {16, 16, 8, 8};
  opt.tile_batch = tile_batch;
  return video_vae::VideoVae::from_weights(c, video_vae::random_video_vae_weights(c, 7, wp), opt);
}

TEST(VideoVaeModel, SmallRandomEndToEnd) {
  const auto vae = small_model(video_vae::VaePrecision::kF32, false);
  // 22 frames at 24 x 32: two 17-frame clips, 5 latents each, minus 3 -> 7 latents of 6 x 8.
  Tensor pixels = Tensor::empty({1, 3, 22, 24, 32}, DType::kU8);
  for (int64_t i = 0; i < pixels.numel(); ++i) pixels.data<uint8_t>()[i] = static_cast<uint8_t>(i * 37 % 251);
  const Tensor moments = vae.encode_moments(video_vae::normalize_pixels(pixels));
  EXPECT_EQ(moments.shape(), (Shape{1, 8, 7, 6, 8}));
  const Tensor one = vae.encode_moments(video_vae::normalize_pixels(pixels.slice(2, 0, 1)));
  EXPECT_EQ(one.shape(), (Shape{1, 8, 1, 6, 8}));
  const Tensor noise = Tensor::zeros({1, 4, 7, 6, 8}, DType::kF32);
  const Tensor cond = video_vae::encode_condition(vae, pixels, noise);
  EXPECT_EQ(cond.shape(), (Shape{1, 4, 7, 6, 8}));
  // Normalization round trip.
  const Tensor back = vae.denormalize_latents(cond);
  const auto m = test::compare(vae.normalize_latents(back), cond);
  EXPECT_LE(m.rel_max, 1e-6);

  EXPECT_EQ(vae.attention_used(), ops::AttentionKernel::kAuto);  // nothing decoded yet
  const Tensor decoded = vae.decode(back);
  EXPECT_EQ(decoded.shape(), (Shape{1, 3, 22, 24, 32}));
  EXPECT_EQ(vae.attention_used(), ops::AttentionKernel::kCpu);
  const Tensor frames = video_vae::frames_to_uint8(video_vae::denormalize_pixels(decoded));
  EXPECT_EQ(frames.shape(), (Shape{1, 22, 24, 32, 3}));
  for (float v : decoded.to_f32_vector()) ASSERT_TRUE(std::isfinite(v));
  // Another output dtype is the float32 video rounded once, in both assemblies.
  for (const char* fused : {"1", "0"}) {
    test::ScopedEnv assembly("H3_VAE_FUSED_ASSEMBLY", fused);
    const Tensor half_out = vae.decode(back, nullptr, DType::kF16);
    EXPECT_EQ(half_out.dtype(), DType::kF16);
    EXPECT_EQ(test::count_bit_mismatches(half_out, decoded.to(DType::kF16)), 0)
        << "fused assembly " << fused;
  }

  // Tiled (16 px tiles, 8 px overlap) differs from untiled only through the blend, not in shape.
  const auto tiled = small_model(video_vae::VaePrecision::kF32, true);
  const Tensor dt = tiled.decode(back);
  EXPECT_EQ(dt.shape(), decoded.shape());
  const Tensor et = tiled.encode_moments(video_vae::normalize_pixels(pixels));
  EXPECT_EQ(et.shape(), moments.shape());

  // The float16 autocast policy stays close to float32 (same weights up to float16 rounding).
  const auto half = small_model(video_vae::VaePrecision::kF16Autocast, false);
  const auto mh = test::compare(half.decode(back), decoded);
  std::printf("small model f16-autocast vs f32 decode: %s\n", test::format_metrics(mh).c_str());
  EXPECT_LE(mh.rel_l2, 1e-2);
  EXPECT_GT(mh.rel_l2, 0.0);  // the policy really rounds
}

// The FP8 decode's distance from the f16 one on the small random model: 58.8 dB measured (min frame);
// the bound leaves room for BLAS summation orders, and fails if FP8 breaks the decode.
constexpr double kFp8MinPsnrDb = 25.0;

// --vae-dtype fp8: the blocks' six projections become E4M3 with per-channel scales, the decode
// keeps its shape, and the frames stay close to the f16-autocast decode of the same weights.
TEST(VideoVaeModel, Fp8DecoderStaysCloseToF16) {
  const VideoVaeConfig c = small_config();
  video_vae::VideoVaeWeightPolicy wp;
  wp.decoder_gemm_dtype = DType::kF16;
  video_vae::VideoVaeOptions opt;
  opt.precision = video_vae::VaePrecision::kF16Autocast;
  const VideoVae half = VideoVae::from_weights(c, video_vae::random_video_vae_weights(c, 7, wp), opt);
  wp.decoder_fp8 = opt.decoder_fp8 = true;
  const VideoVae fp8 = VideoVae::from_weights(c, video_vae::random_video_vae_weights(c, 7, wp), opt);
  const video_vae::DecoderBlockWeights& b = fp8.weights().decoder.blocks[0];
  for (const Tensor* w : {&b.q_w, &b.k_w, &b.v_w, &b.out_w, &b.ff_in_w, &b.ff_out_w}) EXPECT_EQ(w->dtype(), DType::kF8E4M3);
  EXPECT_EQ(b.ff_in_s.shape(), (Shape{b.ff_in_w.size(0)}));
  EXPECT_EQ(fp8.weights().decoder.proj_out_w.dtype(), DType::kF16);
  EXPECT_LT(video_vae::video_vae_weight_bytes(fp8.weights()), video_vae::video_vae_weight_bytes(half.weights()));
  Tensor z = Tensor::empty({1, 4, 7, 6, 8}, DType::kF32);
  for (int64_t i = 0; i < z.numel(); ++i) z.data<float>()[i] = static_cast<float>((i * 29 % 97) / 24.0 - 2.0);
  const Tensor d16 = half.decode(z), d8 = fp8.decode(z);
  ASSERT_EQ(d8.shape(), d16.shape());
  const std::vector<double> psnr = video_vae::frame_psnr(d8, d16);
  ASSERT_EQ(psnr.size(), static_cast<size_t>(d16.size(2)));
  double lo = psnr[0];
  for (double p : psnr) lo = std::min(lo, p);
  std::printf("small model fp8 vs f16-autocast decode: min PSNR %.2f dB over %zu frames\n", lo, psnr.size());
  EXPECT_GT(lo, kFp8MinPsnrDb);
  EXPECT_FALSE(std::isinf(lo)) << "the FP8 decode equals the f16 one: the projections did not change";
  // FP8 is a variant of the f16-autocast policy only.
  video_vae::VideoVaeOptions bad;
  bad.decoder_fp8 = true;
  EXPECT_THROW((void)VideoVae::from_weights(c, video_vae::random_video_vae_weights(c, 7, {}), bad), Error);
}

TEST(VideoVaeModel, BadInputsThrow) {
  const auto vae = small_model(video_vae::VaePrecision::kF32, false);
  auto code_of = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kInternal;
  };
  EXPECT_EQ(code_of([&] { vae.decode(Tensor::zeros({1, 5, 2, 2, 2}, DType::kF32)); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { vae.decode(Tensor::zeros({1, 4, 0, 2, 2}, DType::kF32)); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] {
              vae.decode(Tensor::zeros({1, 4, 2, 2, 2}, DType::kF32), nullptr, DType::kU8);
            }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { vae.encode_moments(Tensor::zeros({1, 4, 1, 8, 8}, DType::kF32)); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { vae.encode_moments(Tensor::zeros({1, 3, 1, 8, 8}, DType::kU8)); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { video_vae::normalize_pixels(Tensor::zeros({1, 4, 1, 2, 2}, DType::kU8)); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { video_vae::parse_precision("int8"); }), ErrorCode::kInvalidArgument);
  // An attention kernel by name: unknown names, and CUDA kernels on the CPU, are refused up front.
  EXPECT_EQ(code_of([] { ops::parse_attention_kernel("flash9", "--vae-attention"); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ops::parse_attention_kernel("hopper", "--vae-attention"), ops::AttentionKernel::kHopper);
  EXPECT_EQ(code_of([] { ops::parse_attention_kernel("cpu", "--vae-attention"); }), ErrorCode::kInvalidArgument);
  for (ops::AttentionKernel k : {ops::AttentionKernel::kHopper, ops::AttentionKernel::kMma}) {
    const VideoVaeConfig c = small_config();
    video_vae::VideoVaeOptions opt;
    opt.attention = k;
    try {
      (void)video_vae::VideoVae::from_weights(c, video_vae::random_video_vae_weights(c, 7, {}), opt);
      ADD_FAILURE() << ops::attention_kernel_name(k) << " accepted on the CPU";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      EXPECT_NE(std::string(e.what()).find(std::string("attention kernel '") + ops::attention_kernel_name(k) +
                                           "' is not available on cpu"),
                std::string::npos)
          << e.what();
    }
  }
  const video_vae::Posterior p = video_vae::posterior_from_moments(Tensor::zeros({1, 8, 1, 2, 2}, DType::kF32));
  EXPECT_EQ(code_of([&] { video_vae::posterior_sample(p, Tensor::zeros({1, 4, 2, 2, 2}, DType::kF32)); }),
            ErrorCode::kInvalidArgument);
}

TEST(VideoVaeModel, PosteriorClampsLogvar) {
  Tensor m = Tensor::zeros({1, 2, 1, 1, 2}, DType::kF32);
  m.data<float>()[0] = 0.5f;   // mean
  m.data<float>()[2] = 40.0f;  // logvar above 20
  m.data<float>()[3] = -50.0f;  // logvar below -30
  const auto p = video_vae::posterior_from_moments(m);
  EXPECT_FLOAT_EQ(p.logvar.to_f32_vector()[0], 20.0f);
  EXPECT_FLOAT_EQ(p.logvar.to_f32_vector()[1], -30.0f);
  EXPECT_FLOAT_EQ(p.std.to_f32_vector()[0], std::exp(10.0f));
  const Tensor s = video_vae::posterior_sample(p, Tensor::from_f32({1.0f, 2.0f}, {1, 1, 1, 1, 2}));
  EXPECT_FLOAT_EQ(s.to_f32_vector()[0], 0.5f + std::exp(10.0f));
}

TEST(VideoVaeModel, PixelConversions) {
  Tensor px = Tensor::empty({1, 3, 1, 1, 2}, DType::kU8);
  const uint8_t vals[6] = {0, 255, 128, 7, 200, 13};
  for (int i = 0; i < 6; ++i) px.data<uint8_t>()[i] = vals[i];
  const Tensor n = video_vae::normalize_pixels(px);
  EXPECT_FLOAT_EQ(n.to_f32_vector()[0], (0.0f - 0.485f) / 0.229f);
  const Tensor back = video_vae::denormalize_pixels(n);
  const Tensor u8 = video_vae::frames_to_uint8(back);
  ASSERT_EQ(u8.shape(), (Shape{1, 1, 1, 2, 3}));
  // Channels last: pixel 0 = (0, 128, 200), pixel 1 = (255, 7, 13).
  const uint8_t expect[6] = {0, 128, 200, 255, 7, 13};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(u8.data<uint8_t>()[i], expect[i]) << i;
  // Rounding to nearest and clamping: 0.4/255 -> 0, 1.6/255 -> 2, out-of-range values clamp.
  Tensor f = Tensor::from_f32({0.4f / 255.0f, 1.6f / 255.0f, 2.0f, -1.0f, 0.0f, 1.0f}, {1, 3, 1, 1, 2});
  const Tensor fu = video_vae::frames_to_uint8(f);
  EXPECT_EQ(fu.data<uint8_t>()[0], 0);
  EXPECT_EQ(fu.data<uint8_t>()[3], 2);
  EXPECT_EQ(fu.data<uint8_t>()[1], 255);
}

// Deterministic latents in [-2, 2) of the small model's shape.
Tensor small_latents(const Shape& shape) {
  Tensor z = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < z.numel(); ++i)
    z.data<float>()[i] = static_cast<float>((i * 7919) % 4001) / 1000.25f - 2.0f;
  return z;
}

// Tile batching (VideoVaeOptions::tile_batch) stacks the rows of several tiles. On the CPU every
// output bit equals tile-at-a-time decoding by construction, on any CPU and BLAS: the row-wise ops
// are per-row loops, attention runs per tile (cu_seqlens), and the GEMMs over the stacked rows run
// one BLAS call per tile (ops::linear_segmented), the call a lone tile makes. It does not rely on
// the BLAS summing a row the same way in a GEMM of another row count: OpenBLAS does not (Haswell
// and Zen kernels with 2 threads, Prescott with 2 threads: tens of thousands of last-bit
// differences in float32 when the stacked rows went through one GEMM).
TEST(VideoVaeModel, TileBatchIsBitIdenticalOnCpu) {
  unsetenv("H3_VAE_TILE_BATCH");
  // 6 x 8 latents at ratio 4: 24 x 32 pixels in 16 px tiles with 8 px overlaps = 2 x 3 tiles.
  const Tensor z = small_latents({2, 4, 7, 6, 8});
  for (const auto precision : {video_vae::VaePrecision::kF32, video_vae::VaePrecision::kF16Autocast}) {
    const auto one = small_model(precision, true, 1);
    video_vae::VideoDecodeProfile p1;
    const Tensor ref = one.decode(z, &p1);
    for (int64_t batch : {2, 4, 6, 64}) {
      const auto many = small_model(precision, true, batch);
      video_vae::VideoDecodeProfile pn;
      const Tensor got = many.decode(z, &pn);
      std::string first;
      const int64_t bad = test::count_bit_mismatches(got, ref, &first);
      std::printf("%s tile batch %lld: %lld forwards for %lld tiles (vs %lld), %lld values differ %s\n",
                  video_vae::precision_name(precision), static_cast<long long>(batch),
                  static_cast<long long>(pn.decoder.calls), static_cast<long long>(pn.decoder.tiles),
                  static_cast<long long>(p1.decoder.calls), static_cast<long long>(bad), first.c_str());
      EXPECT_EQ(bad, 0) << "tile batch " << batch;
      EXPECT_EQ(pn.decoder.tiles, p1.decoder.tiles);
      EXPECT_LT(pn.decoder.calls, p1.decoder.calls) << "tile batch " << batch << " did not batch";
    }
  }
}

TEST(VideoVaeModel, BatchedForwardOfUnequalTilesMatchesSingleForwards) {
  const VideoVaeConfig c = small_config();
  video_vae::VideoVaeWeightPolicy wp;
  const video_vae::VideoVaeWeights w = video_vae::random_video_vae_weights(c, 11, wp);
  const std::vector<Tensor> tiles = {small_latents({4, 3, 4, 5}), small_latents({4, 3, 2, 6}),
                                     small_latents({4, 2, 3, 3})};
  video_vae::DecoderProfile prof;
  const std::vector<Tensor> batched = video_vae::decoder_forward_batch(c, w.decoder, DType::kF32, tiles, &prof);
  ASSERT_EQ(batched.size(), tiles.size());
  EXPECT_EQ(prof.calls, 1);
  EXPECT_EQ(prof.tiles, 3);
  EXPECT_EQ(prof.rows, 60 + 36 + 18 + 3 * (c.decoder_num_register_tokens + 1));
  for (size_t i = 0; i < tiles.size(); ++i) {
    const Tensor single = video_vae::decoder_forward(c, w.decoder, DType::kF32, tiles[i]);
    ASSERT_EQ(batched[i].shape(), single.shape());
    // Bit for bit, by construction (decoder_forward_batch: per-tile GEMM calls and attention).
    test::expect_bits_equal("tile " + std::to_string(i) + " batched vs alone", batched[i], single);
  }
  EXPECT_THROW(video_vae::decoder_forward_batch(c, w.decoder, DType::kF32, {}), Error);
}

// decode_streaming hands out each window's frames once final; concatenated they are decode()'s
// output bit for bit, in order, without the padded tail, for every item of the batch.
TEST(VideoVaeModel, StreamingDecodeEqualsWholeDecode) {
  unsetenv("H3_VAE_TILE_BATCH");
  // 7 latents: 2 windows, no padding; 4 latents: padded, the tail cut; 12 latents: 3 windows.
  for (const Shape& shape : {Shape{1, 4, 7, 6, 8}, Shape{2, 4, 4, 6, 8}, Shape{1, 4, 12, 6, 8}}) {
    for (const auto precision : {video_vae::VaePrecision::kF32, video_vae::VaePrecision::kF16Autocast}) {
      const auto vae = small_model(precision, true);
      const Tensor z = small_latents(shape);
      const Tensor whole = vae.decode(z);
      std::vector<std::vector<Tensor>> pieces(static_cast<size_t>(shape[0]));
      std::vector<int64_t> next(static_cast<size_t>(shape[0]), 0);
      int64_t last_item = 0;
      vae.decode_streaming(z, [&](int64_t item, int64_t first, const Tensor& frames) {
        ASSERT_GE(item, last_item) << "items out of order";
        last_item = item;
        EXPECT_EQ(first, next[item]) << "frames out of order";
        EXPECT_EQ(frames.dtype(), DType::kF32);
        next[item] += frames.size(1);
        pieces[item].push_back(frames);
      });
      const video_vae::TemporalPlan plan = video_vae::temporal_decode_plan(shape[2], vae.config());
      for (int64_t b = 0; b < shape[0]; ++b) {
        ASSERT_FALSE(pieces[b].empty());
        EXPECT_EQ(next[b], plan.output_frames);
        const Tensor streamed = pieces[b].size() == 1 ? pieces[b][0] : ops::concat(pieces[b], 1);
        std::printf("T=%lld %s item %lld: %zu pieces, %lld frames\n", static_cast<long long>(shape[2]),
                    video_vae::precision_name(precision), static_cast<long long>(b), pieces[b].size(),
                    static_cast<long long>(streamed.size(1)));
        EXPECT_GE(pieces[b].size(), static_cast<size_t>(plan.num_chunks));
        test::expect_bits_equal("streamed item " + std::to_string(b), streamed, whole.select(0, b).contiguous());
      }
    }
  }
  const auto vae = small_model(video_vae::VaePrecision::kF32, false);
  EXPECT_THROW(vae.decode_streaming(small_latents({1, 4, 7, 6, 8}), video_vae::FrameSink()), Error);
}

TEST(VideoVaeModel, TileBatchSettingIsValidated) {
  const auto vae = small_model(video_vae::VaePrecision::kF32, true, 3);
  unsetenv("H3_VAE_TILE_BATCH");
  EXPECT_EQ(vae.resolve_tile_batch(6, 100), 3);
  EXPECT_EQ(vae.resolve_tile_batch(2, 100), 2);
  EXPECT_EQ(vae.resolve_tile_batch(1, 100), 1);
  setenv("H3_VAE_TILE_BATCH", "5", 1);
  EXPECT_EQ(vae.resolve_tile_batch(6, 100), 5);
  setenv("H3_VAE_TILE_BATCH", "x", 1);
  EXPECT_THROW(vae.resolve_tile_batch(6, 100), Error);
  unsetenv("H3_VAE_TILE_BATCH");
  // Automatic on the CPU: one tile at a time.
  EXPECT_EQ(small_model(video_vae::VaePrecision::kF32, true, 0).resolve_tile_batch(6, 100), 1);
}

}  // namespace
}  // namespace h3
