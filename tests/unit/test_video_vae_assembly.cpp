// The video VAE's single-pass output assembly (models/video_vae/video_vae_assembly.h) against the
// op composition it replaces (slice, blend, concat, cut, cast; H3_VAE_FUSED_ASSEMBLY=0): decode()
// and decode_streaming() must give the same bits, for padded and unpadded lengths, batches, and
// both precision policies; plus the assembly's own argument checks and blend arithmetic.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/status.h"
#include "models/video_vae/video_vae_assembly.h"
#include "models/video_vae/video_vae_model.h"
#include "models/video_vae/video_vae_tiling.h"
#include "ops/ops.h"
#include "support/golden.h"

namespace h3 {
namespace {

using video_vae::VideoVaeConfig;

// A small random-weight model: 2 levels (x4 space, x4 time), 1-layer decoder, 16 px tiles.
video_vae::VideoVae small_model(video_vae::VaePrecision precision) {
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
  c.decoder_attention_head_dim = 8;
  c.decoder_num_register_tokens = 2;
  c.validate("small config");
  video_vae::VideoVaeWeightPolicy wp;
  wp.decoder_gemm_dtype = precision == video_vae::VaePrecision::kF16Autocast ? DType::kF16 : DType::kF32;
  video_vae::VideoVaeOptions opt;
  opt.precision = precision;
  opt.use_tiling = true;
  opt.tiles = {16, 16, 8, 8};
  return video_vae::VideoVae::from_weights(c, video_vae::random_video_vae_weights(c, 5, wp), opt);
}

Tensor latents(const Shape& shape) {
  Tensor z = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < z.numel(); ++i)
    z.data<float>()[i] = static_cast<float>((i * 7919) % 4001) / 1000.25f - 2.0f;
  return z;
}

// Restores the switch whatever the test's outcome.
struct AssemblySwitch {
  explicit AssemblySwitch(bool fused) {
    if (fused) unsetenv("H3_VAE_FUSED_ASSEMBLY");
    else setenv("H3_VAE_FUSED_ASSEMBLY", "0", 1);
  }
  ~AssemblySwitch() { unsetenv("H3_VAE_FUSED_ASSEMBLY"); }
};

TEST(VideoVaeAssembly, FusedDecodeEqualsOpComposition) {
  unsetenv("H3_VAE_TILE_BATCH");
  // 7 latents: 2 windows; 4: padded and cut; 12: 3 windows; batch of 2.
  for (const Shape& shape : {Shape{1, 4, 7, 6, 8}, Shape{2, 4, 4, 6, 8}, Shape{1, 4, 12, 6, 8}, Shape{1, 4, 1, 6, 8}}) {
    for (const auto precision : {video_vae::VaePrecision::kF32, video_vae::VaePrecision::kF16Autocast}) {
      const auto vae = small_model(precision);
      const Tensor z = latents(shape);
      Tensor legacy, fused;
      {
        AssemblySwitch s(false);
        EXPECT_FALSE(video_vae::fused_assembly_enabled());
        legacy = vae.decode(z);
      }
      {
        AssemblySwitch s(true);
        EXPECT_TRUE(video_vae::fused_assembly_enabled());
        fused = vae.decode(z);
      }
      ASSERT_EQ(fused.shape(), legacy.shape());
      EXPECT_EQ(fused.dtype(), DType::kF32);
      std::string first;
      const int64_t bad = test::count_bit_mismatches(fused, legacy, &first);
      std::printf("T=%lld %s: %s, %lld of %lld values differ %s\n", static_cast<long long>(shape[2]),
                  video_vae::precision_name(precision), shape_str(fused.shape()).c_str(),
                  static_cast<long long>(bad), static_cast<long long>(fused.numel()), first.c_str());
      EXPECT_EQ(bad, 0);

      // Streaming through the fused path, concatenated, equals the legacy whole decode.
      AssemblySwitch s(true);
      std::vector<std::vector<Tensor>> pieces(static_cast<size_t>(shape[0]));
      vae.decode_streaming(z, [&](int64_t item, int64_t at, const Tensor& frames) {
        int64_t have = 0;
        for (const Tensor& p : pieces[item]) have += p.size(1);
        EXPECT_EQ(at, have);
        EXPECT_EQ(frames.dtype(), DType::kF32);
        pieces[item].push_back(frames);
      });
      for (int64_t b = 0; b < shape[0]; ++b) {
        ASSERT_FALSE(pieces[b].empty());
        const Tensor streamed = pieces[b].size() == 1 ? pieces[b][0] : ops::concat(pieces[b], 1);
        test::expect_bits_equal("fused streaming item " + std::to_string(b), streamed,
                                legacy.select(0, b).contiguous());
      }
    }
  }
}

// The blend arithmetic on hand-made frames, against blend() of video_vae_tiling.h.
TEST(VideoVaeAssembly, BlendMatchesTilingBlend) {
  for (const DType dt : {DType::kF32, DType::kF16}) {
    std::vector<float> cv(2 * 9 * 3 * 2), pv(2 * 5 * 3 * 2);
    for (size_t i = 0; i < cv.size(); ++i) cv[i] = static_cast<float>(static_cast<int>(i * 37 % 101) - 50) / 7.0f;
    for (size_t i = 0; i < pv.size(); ++i) pv[i] = static_cast<float>(static_cast<int>(i * 53 % 97) - 48) / 3.0f;
    const Tensor clip = Tensor::from_f32(cv, {2, 9, 3, 2}, dt);
    const Tensor prev = Tensor::from_f32(pv, {2, 5, 3, 2}, dt);
    // Frames [2, 8) of clip, the first 4 blended with prev's last 4.
    const Tensor ref = video_vae::blend(prev, clip.slice(1, 2, 8).contiguous(), 4, 1).to(DType::kF32);
    std::vector<float> wa, wb;
    video_vae::blend_weights(4, dt, &wa, &wb);
    Tensor out = Tensor::zeros({2, 10, 3, 2}, DType::kF32);
    video_vae::assemble_frames(out, 3, clip, 2, 6, &prev, 1, wa, wb);
    test::expect_bits_equal(std::string("assembled vs blend() in ") + dtype_name(dt),
                            out.slice(1, 3, 9).contiguous(), ref);
    // Frames outside [3, 9) are untouched.
    EXPECT_EQ(out.data<float>()[0], 0.0f);
    // Bad arguments throw instead of writing out of bounds.
    EXPECT_THROW(video_vae::assemble_frames(out, 5, clip, 2, 6, &prev, 1, wa, wb), Error);
    EXPECT_THROW(video_vae::assemble_frames(out, 0, clip, 2, 6, &prev, 2, wa, wb), Error);
    EXPECT_THROW(video_vae::assemble_frames(out, 0, clip, 2, 6, nullptr, 0, wa, wb), Error);
  }
}

}  // namespace
}  // namespace h3
