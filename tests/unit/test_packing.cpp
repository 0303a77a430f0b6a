// Packing and geometry unit tests: the worked values of h3_dit_spec.md §4.1-4.2 and
// h3_components_spec.md §4.3 / Appendix A, row orders, tags and indices of small T2VA / FL2VA /
// Ref2VA layouts, row timesteps, patchify and audio-row data movement, and the request checks.
// No golden folder needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/status.h"
#include "pipeline/geometry.h"
#include "pipeline/packing.h"

namespace h3::pipeline {
namespace {

std::vector<double> pos_row(const PackedLayout& l, int64_t r) {
  const double* p = l.position_ids.data<double>();
  return {p[3 * r], p[3 * r + 1], p[3 * r + 2]};
}

// ---- geometry --------------------------------------------------------------------------------

TEST(Geometry, RoundHalfEvenLikePython) {
  EXPECT_EQ(round_half_even(0.5), 0.0);
  EXPECT_EQ(round_half_even(1.5), 2.0);
  EXPECT_EQ(round_half_even(2.5), 2.0);
  EXPECT_EQ(round_half_even(63.5), 64.0);
  EXPECT_EQ(round_half_even(2.4999999), 2.0);
  EXPECT_EQ(round_half_even(-0.5), -0.0);
  EXPECT_EQ(round_half_even(-1.5), -2.0);
}

TEST(Geometry, CanvasRules) {
  EXPECT_EQ(resolve_canvas_size(16, 9), (Canvas{768, 1344}));
  EXPECT_EQ(resolve_canvas_size(9, 16), (Canvas{1344, 768}));
  EXPECT_EQ(resolve_canvas_size(1, 1), (Canvas{768, 768}));
  EXPECT_EQ(resolve_canvas_size(4, 3), (Canvas{768, 1024}));
  EXPECT_EQ(resolve_canvas_size(21, 9), (Canvas{672, 1536}));
  EXPECT_EQ(resolve_canvas_size(4, 1), (Canvas{512, 2016}));  // 63.5 rounds to 64 (even)
  EXPECT_EQ(resolve_canvas_size(1, 4), (Canvas{2016, 512}));
  EXPECT_EQ(resolve_canvas_size(56, 40), (Canvas{768, 1088}));
  // The tiny checkpoint's settings (golden README).
  EXPECT_EQ(resolve_canvas_size(16, 9, CanvasConfig{64, 8192, 64}), (Canvas{64, 128}));
  EXPECT_THROW(resolve_canvas_size(5, 1), Error);
  EXPECT_THROW(resolve_canvas_size(0, 1), Error);
  EXPECT_THROW(resolve_canvas_size(1, -1), Error);

  EXPECT_EQ(resolve_target_canvas(std::nullopt, std::nullopt, 16, 9), (Canvas{768, 1344}));
  EXPECT_EQ(resolve_target_canvas(64, 96, 16, 9), (Canvas{64, 96}));
  EXPECT_THROW(resolve_target_canvas(64, std::nullopt, 16, 9), Error);
  EXPECT_THROW(resolve_target_canvas(48, 96, 16, 9), Error);  // not a multiple of 32
  EXPECT_THROW(resolve_target_canvas(0, 96, 16, 9), Error);
  try {
    resolve_target_canvas(100, 96, 16, 9);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--height"), std::string::npos) << e.message();
  }
}

// The canvas multiple follows the VAE (the reference's `canvas_multiple` = spatial compression x
// the DiT patch): 16 for a VAE that compresses 8x, with the latent grid it implies.
TEST(Geometry, CanvasMultipleFollowsTheVaeRatio) {
  const CanvasConfig c8 = canvas_config_for_vae(CanvasConfig{64, 8192, 64}, 8);
  EXPECT_EQ(c8.vae_spatial_ratio, 8);
  EXPECT_EQ(c8.multiple, 16);
  EXPECT_EQ(canvas_config_for_vae(CanvasConfig{}, 16).multiple, kCanvasMultiple);
  EXPECT_EQ(resolve_canvas_size(16, 9, c8), (Canvas{64, 112}));  // 113.8 px wide: 7 x 16, not 4 x 32
  EXPECT_EQ(resolve_target_canvas(48, 80, 16, 9, c8), (Canvas{48, 80}));
  EXPECT_THROW(resolve_target_canvas(40, 80, 16, 9, c8), Error);
  EXPECT_THROW(resolve_target_canvas(48, 80, 16, 9), Error);  // the release's multiple is 32
  EXPECT_EQ(resolve_reference_image_size(40, 24, 64, 16), (Canvas{64, 112}));
  const TargetGeometry g = make_target_geometry({48, 80}, 22, 8);
  EXPECT_EQ(g.latent_height, 6);
  EXPECT_EQ(g.latent_width, 10);
  EXPECT_EQ(g.rows_per_frame(), 15);
  EXPECT_THROW(make_target_geometry({48, 80}, 22, 16), Error);
  EXPECT_THROW(canvas_config_for_vae(CanvasConfig{}, 0), Error);
  EXPECT_THROW(resolve_reference_image_size(40, 24, 64, 0), Error);
}

TEST(Geometry, ReferenceImageCanvas) {
  // Golden README: a 40x24 image at short edge 64 -> 96x64 (W x H).
  EXPECT_EQ(resolve_reference_image_size(40, 24, 64), (Canvas{64, 96}));
  EXPECT_EQ(resolve_reference_image_size(96, 64, 64), (Canvas{64, 96}));
  EXPECT_EQ(resolve_reference_image_size(1920, 1080, 2048), (Canvas{2048, 3648}));
  EXPECT_THROW(resolve_reference_image_size(100, 20, 2048), Error);  // beyond 4:1
  EXPECT_THROW(resolve_reference_image_size(0, 20, 2048), Error);
}

TEST(Geometry, FrameSnappingAndLatentCounts) {
  EXPECT_EQ(align_num_frames(124), 124);
  EXPECT_EQ(align_num_frames(120), 124);
  EXPECT_EQ(align_num_frames(125), 141);
  EXPECT_EQ(align_num_frames(1), 5);
  EXPECT_EQ(align_num_frames(23), 39);
  EXPECT_THROW(align_num_frames(0), Error);

  EXPECT_EQ(video_latent_frames(124), 37);
  EXPECT_EQ(video_latent_frames(192), 57);
  EXPECT_EQ(video_latent_frames(345), 102);
  EXPECT_EQ(video_latent_frames(22), 7);
  EXPECT_THROW(video_latent_frames(123), Error);

  EXPECT_EQ(audio_latent_count(124), 207);
  EXPECT_EQ(audio_latent_count(192), 320);
  EXPECT_EQ(audio_latent_count(22), 37);
  EXPECT_EQ(audio_latent_count(362), 603);
  EXPECT_EQ(audio_latent_count(345), 575);

  EXPECT_EQ(reference_video_frame_limit(13), 22);
  EXPECT_EQ(reference_video_frame_limit(3), 22);
  EXPECT_EQ(reference_video_frame_limit(60), 56);
  EXPECT_EQ(reference_audio_sample_limit(22, 44100), 40425);
  EXPECT_EQ(reference_audio_sample_limit(22, 32000), 29333);
}

TEST(Geometry, DurationLimits) {
  const FrameCount a = resolve_num_frames(120);
  EXPECT_EQ(a.frames, 124);
  EXPECT_NE(a.note.find("124"), std::string::npos) << a.note;
  const FrameCount b = resolve_num_frames(124);
  EXPECT_TRUE(b.note.empty());
  EXPECT_EQ(resolve_num_frames(345).frames, 345);
  EXPECT_THROW(resolve_num_frames(100), Error);  // 107 frames < 5 s
  EXPECT_THROW(resolve_num_frames(346), Error);  // 362 frames > 15 s
  try {
    resolve_num_frames(22);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("5-15 s"), std::string::npos) << e.message();
  }
  EXPECT_EQ(resolve_num_frames(22, true).frames, 22);  // the flag lifts the limit
  EXPECT_EQ(resolve_num_frames(362, true).frames, 362);
}

TEST(Geometry, TargetGeometryOfDefaults) {
  // h3_components_spec.md Appendix A.
  const TargetGeometry t = make_target_geometry({768, 1344}, 124);
  EXPECT_EQ(t.latent_frames, 37);
  EXPECT_EQ(t.latent_height, 48);
  EXPECT_EQ(t.latent_width, 84);
  EXPECT_EQ(t.rows_per_frame(), 1008);
  EXPECT_EQ(t.video_rows(), 37296);
  EXPECT_EQ(t.audio_rows(), 414);
  const TargetGeometry f = make_target_geometry({768, 1344}, 192);
  EXPECT_EQ(f.video_rows(), 57456);
  EXPECT_EQ(f.audio_latents, 320);
  EXPECT_THROW(make_target_geometry({784, 1344}, 124), Error);  // 49 latent rows: odd
}

// ---- coordinates -----------------------------------------------------------------------------

TEST(Packing, SpatialGridWorkedValues) {
  // h3_dit_spec.md §4.2 worked values for 768x1344 (48x84 latents).
  const double sqrt_area = std::sqrt(48.0 * 84.0);
  EXPECT_EQ(sqrt_area, 63.49803146555018);
  const std::vector<double> h = spatial_position_grid(48, 2, sqrt_area);
  const std::vector<double> w = spatial_position_grid(84, 2, sqrt_area);
  ASSERT_EQ(h.size(), 24u);
  ASSERT_EQ(w.size(), 42u);
  EXPECT_EQ(h[0], 3.9051368637047297);
  EXPECT_EQ(h[1], 4.913042125062669);
  EXPECT_EQ(h[23], 27.08695787493733);
  EXPECT_EQ(w[0], -5.166010488516722);
  EXPECT_EQ(w[1], -4.158105227158783);
  EXPECT_EQ(w[41], 36.15810522715877);
}

TEST(Packing, TemporalGridAndSpans) {
  const std::vector<double> t = temporal_position_grid(8, 0.0);
  const std::vector<double> want = {0, 5.0 / 3, 25.0 / 3, 15, 65.0 / 3, 85.0 / 3, 30, 110.0 / 3};
  ASSERT_EQ(t.size(), want.size());
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], want[i], 1e-12) << i;
  EXPECT_NEAR(temporal_position_span_pairwise(37), 620.0 / 3, 1e-12);
  EXPECT_NEAR(temporal_position_span_pairwise(57), 320.0, 1e-12);
  // Pairwise and sequential sums agree to rounding, and in bits below 16 latent frames; at 17
  // (the golden Ref2VA video reference) they differ in the last ulp.
  for (int64_t f : {1, 2, 7, 8, 15, 37, 107, 200}) {
    EXPECT_NEAR(temporal_position_span_pairwise(f), temporal_position_span_sequential(f), 1e-9);
  }
  for (int64_t f = 1; f < 16; ++f) {
    EXPECT_EQ(temporal_position_span_pairwise(f), temporal_position_span_sequential(f)) << f;
  }
  EXPECT_EQ(temporal_position_span_pairwise(17), 93.33333333333334);
  EXPECT_EQ(temporal_position_span_sequential(17), 93.33333333333336);
}

TEST(Packing, NumpyPairwiseSumOrder) {
  // Values where the summation order shows: 1e16 absorbs 1.0 when added sequentially.
  std::vector<double> v(9, 1.0);
  v[0] = 1e16;
  double seq = 0;
  for (double x : v) seq += x;
  // Pairwise (n = 9): r = a[0..7], ((r0+r1)+(r2+r3)) + ((r4+r5)+(r6+r7)) = (1e16 + 2) + 4, then
  // the tail a[8]: 1e16 + 7 is a tie (ulp 2 here) and rounds to the even 1e16 + 8.
  EXPECT_EQ(seq, 1e16);
  EXPECT_EQ(numpy_pairwise_sum(v.data(), 9), 1e16 + 8.0);
  std::vector<double> big(300);
  std::iota(big.begin(), big.end(), 1.0);
  EXPECT_EQ(numpy_pairwise_sum(big.data(), 300), 300.0 * 301.0 / 2.0);
}

// ---- layouts ---------------------------------------------------------------------------------

TEST(Packing, T2vaLayout) {
  const std::vector<int64_t> text = {1, 1, 1, 1, 1};
  const LatentGrid g{7, 4, 6};  // 22 frames at 64x96
  const PackedLayout l = build_packed_sequence(text, g, 37);
  const int64_t rows = 7 * 2 * 3;
  ASSERT_EQ(l.sequence_length, 5 + 74 + rows);
  EXPECT_EQ(l.num_condition_video_rows, 0);
  EXPECT_EQ(l.num_condition_audio_rows, 0);
  const std::vector<int64_t> vid = l.video_indices.to_i64_vector();
  const std::vector<int64_t> aud = l.audio_indices.to_i64_vector();
  ASSERT_EQ(vid.size(), static_cast<size_t>(rows));
  ASSERT_EQ(aud.size(), 74u);
  EXPECT_EQ(aud.front(), 5);
  EXPECT_EQ(vid.front(), 5 + 74);
  EXPECT_EQ(vid.back(), l.sequence_length - 1);
  const std::vector<int64_t> tags = l.token_tags.to_i64_vector();
  EXPECT_EQ(tags[4], kTagText);
  EXPECT_EQ(tags[5], kTagAudio);
  EXPECT_EQ(tags[5 + 74], kTagVideo);
  EXPECT_EQ(pos_row(l, 3), (std::vector<double>{3, 0, 0}));
  // Audio: channel L at the first width column, R at the last, time T + n.
  const std::vector<double> w = spatial_position_grid(6, 2, std::sqrt(24.0));
  const std::vector<double> h = spatial_position_grid(4, 2, std::sqrt(24.0));
  EXPECT_EQ(pos_row(l, 5 + 2), (std::vector<double>{7, 0, w.front()}));
  EXPECT_EQ(pos_row(l, 5 + 37 + 2), (std::vector<double>{7, 0, w.back()}));
  // Video row (frame 1, y 1, x 2): t = T + 5/3.
  const int64_t r = 5 + 74 + (1 * 2 + 1) * 3 + 2;
  EXPECT_EQ(pos_row(l, r), (std::vector<double>{5.0 + 5.0 / 3.0, h[1], w[2]}));
}

TEST(Packing, Fl2vaAnchors) {
  const std::vector<int64_t> text = {1, 0, 0, 0, 1, 1};
  const LatentGrid g{7, 4, 4};
  const PackedLayout l =
      build_packed_sequence(text, g, 37, {KeyframeAnchor::kFirst, KeyframeAnchor::kLast});
  const int64_t per_frame = 4;
  EXPECT_EQ(l.num_condition_video_rows, 2 * per_frame);
  ASSERT_EQ(l.sequence_length, 6 + 8 + 74 + 28);
  const std::vector<int64_t> vid = l.video_indices.to_i64_vector();
  EXPECT_EQ(vid[0], 6);                                   // condition rows first
  EXPECT_EQ(vid[8], 6 + 8 + 74);                          // then the target rows after the audio
  EXPECT_EQ(l.token_tags.to_i64_vector()[1], kTagVideo);  // vision placeholder keeps tag 0
  EXPECT_EQ(pos_row(l, 6)[0], 6.0);                       // first: t = T
  // Golden README: "last" = T + 35 for 7 latent frames (beyond the last frame's T + 30).
  // (float64: (6 + 110/3·...) - 5/3 lands within an ulp of 41, not on it.)
  EXPECT_NEAR(pos_row(l, 6 + per_frame)[0], 6.0 + 35.0, 1e-12);
  EXPECT_EQ(pos_row(l, 6 + 8 + 74 + 6 * per_frame)[0], 6.0 + 30.0);
  EXPECT_THROW(build_packed_sequence({1, 2}, g, 37), Error);  // tag 2 is not a text tag
  EXPECT_THROW(build_packed_sequence(text, LatentGrid{7, 3, 4}, 37), Error);
  EXPECT_THROW(build_packed_sequence(text, g, 0), Error);
}

TEST(Packing, Ref2vaClockAndOrder) {
  const std::vector<int64_t> text(10, 1);
  const LatentGrid target{7, 4, 4};
  std::vector<ReferenceLayout> refs(3);
  refs[0].kind = ReferenceKind::kVideo;  // 2 latent frames 4x4 with a 4-latent soundtrack
  refs[0].grid = {2, 4, 4};
  refs[0].audio_latents = 4;
  refs[1].kind = ReferenceKind::kAudio;
  refs[1].audio_latents = 4;
  refs[2].kind = ReferenceKind::kImage;
  refs[2].grid = {1, 4, 6};
  const PackedLayout l = build_ref2va_packed_sequence(text, refs, target, 37);
  EXPECT_EQ(l.num_condition_video_rows, 8 + 6);
  EXPECT_EQ(l.num_condition_audio_rows, 8 + 8);
  ASSERT_EQ(l.sequence_length, 10 + 8 + 8 + 8 + 6 + 74 + 28);
  const std::vector<int64_t> aud = l.audio_indices.to_i64_vector();
  const std::vector<int64_t> vid = l.video_indices.to_i64_vector();
  EXPECT_EQ(aud[0], 10);  // the soundtrack precedes its video rows
  EXPECT_EQ(vid[0], 18);
  EXPECT_EQ(aud[8], 26);        // the audio reference
  EXPECT_EQ(vid[8], 34);        // the image
  EXPECT_EQ(aud[16], 40);       // target audio
  EXPECT_EQ(vid[14], 40 + 74);  // target video
  // Clock: 10 -> video: max(4, 25/3) -> audio: +4 -> image: +1.
  const double after_video = 10.0 + std::max(4.0, temporal_position_span_pairwise(2));
  EXPECT_EQ(pos_row(l, 26)[0], after_video);
  EXPECT_EQ(pos_row(l, 34)[0], after_video + 4.0);
  EXPECT_EQ(pos_row(l, 40)[0], after_video + 5.0);
  EXPECT_EQ(pos_row(l, 40 + 74)[0], after_video + 5.0);
  // The soundtrack sits on its video's own width grid; the audio reference on the target's.
  EXPECT_EQ(pos_row(l, 10)[2], spatial_position_grid(4, 2, 4.0).front());
  EXPECT_EQ(pos_row(l, 26 + 4)[2], spatial_position_grid(4, 2, 4.0).back());
}

TEST(Packing, Ref2vaLimits) {
  auto kinds = [](int images, int videos, int audios) {
    std::vector<ReferenceKind> k;
    for (int i = 0; i < images; ++i) k.push_back(ReferenceKind::kImage);
    for (int i = 0; i < videos; ++i) k.push_back(ReferenceKind::kVideo);
    for (int i = 0; i < audios; ++i) k.push_back(ReferenceKind::kAudio);
    return k;
  };
  EXPECT_NO_THROW(check_reference_counts(kinds(9, 0, 3)));
  EXPECT_NO_THROW(check_reference_counts(kinds(6, 3, 3)));
  EXPECT_THROW(check_reference_counts(kinds(10, 0, 0)), Error);
  EXPECT_THROW(check_reference_counts(kinds(1, 4, 0)), Error);
  EXPECT_THROW(check_reference_counts(kinds(1, 0, 4)), Error);
  EXPECT_THROW(check_reference_counts(kinds(7, 3, 3)), Error);  // 13 in all
  EXPECT_THROW(check_reference_counts(kinds(0, 0, 2)), Error);  // audio-only
  EXPECT_THROW(check_reference_counts(kinds(0, 0, 0)), Error);
  try {
    check_reference_counts(kinds(0, 0, 1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("audio-only"), std::string::npos) << e.message();
  }
}

TEST(Packing, RowTimestepsAndAdaLNRows) {
  const std::vector<int64_t> text = {1, 0, 1};
  const LatentGrid g{7, 4, 4};
  const PackedLayout t2va = build_packed_sequence(text, g, 37);
  const RowTimesteps step0 = plan_step_timesteps(t2va, 0.0f, 0.0f);
  EXPECT_EQ(step0.unique.to_f32_vector(), (std::vector<float>{0.0f}));
  const RowTimesteps mid = plan_step_timesteps(t2va, 0.25f, 0.6f);
  EXPECT_EQ(mid.unique.to_f32_vector(), (std::vector<float>{0.25f, 0.6f}));
  const std::vector<int64_t> idx = mid.indices.to_i64_vector();
  EXPECT_EQ(idx[0], 0);  // text -> video t
  EXPECT_EQ(idx[3], 1);  // audio
  EXPECT_EQ(idx.back(), 0);
  const std::vector<int64_t> ada = adaln_row_indices(mid, t2va).to_i64_vector();
  EXPECT_EQ(ada[0], 0 * 3 + kTagText);
  EXPECT_EQ(ada[1], 0 * 3 + kTagVideo);
  EXPECT_EQ(ada[3], 1 * 3 + kTagAudio);

  std::vector<ReferenceLayout> refs(2);
  refs[0].kind = ReferenceKind::kImage;
  refs[0].grid = {1, 4, 4};
  refs[1].kind = ReferenceKind::kAudio;
  refs[1].audio_latents = 3;
  const PackedLayout ref = build_ref2va_packed_sequence(text, refs, g, 37);
  const RowTimesteps four = plan_step_timesteps(ref, 0.25f, 0.6f);
  EXPECT_EQ(four.unique.to_f32_vector(), (std::vector<float>{0.25f, 0.6f, 0.999f, 1.0f}));
  const std::vector<int64_t> fi = four.indices.to_i64_vector();
  EXPECT_EQ(fi[3], 2);          // image rows: max(t, 0.999)
  EXPECT_EQ(fi[3 + 4], 3);      // reference audio: 1.0
  EXPECT_EQ(fi[3 + 4 + 6], 1);  // target audio
}

// ---- data movement ---------------------------------------------------------------------------

TEST(Packing, PatchifyIsChannelMajorAndInvertible) {
  const int64_t c = 3, f = 2, h = 4, w = 6;
  std::vector<float> v(static_cast<size_t>(c * f * h * w));
  std::iota(v.begin(), v.end(), 0.0f);
  const Tensor lat = Tensor::from_f32(v, {1, c, f, h, w});
  const Tensor rows = patchify_video(lat);
  ASSERT_EQ(rows.shape(), (Shape{f * (h / 2) * (w / 2), c * 4}));
  const float* r = rows.data<float>();
  for (int64_t fi = 0; fi < f; ++fi)
    for (int64_t y = 0; y < h / 2; ++y)
      for (int64_t x = 0; x < w / 2; ++x)
        for (int64_t ci = 0; ci < c; ++ci)
          for (int64_t dy = 0; dy < 2; ++dy)
            for (int64_t dx = 0; dx < 2; ++dx) {
              const int64_t row = (fi * (h / 2) + y) * (w / 2) + x;
              const int64_t feat = ci * 4 + dy * 2 + dx;
              const float want =
                  v[static_cast<size_t>(((ci * f + fi) * h + 2 * y + dy) * w + 2 * x + dx)];
              ASSERT_EQ(r[row * c * 4 + feat], want) << row << "," << feat;
            }
  const Tensor back = unpatchify_video(rows, c, LatentGrid{f, h, w});
  EXPECT_EQ(back.shape(), lat.shape());
  EXPECT_EQ(back.to_f32_vector(), v);
  EXPECT_THROW(patchify_video(Tensor::from_f32(std::vector<float>(15, 0), {1, 1, 1, 3, 5})), Error);
  EXPECT_THROW(unpatchify_video(rows, c + 1, LatentGrid{f, h, w}), Error);
}

TEST(Packing, AudioRowsAreChannelMajor) {
  const int64_t c = 4, n = 3;
  std::vector<float> v(static_cast<size_t>(2 * c * n));
  std::iota(v.begin(), v.end(), 0.0f);
  const Tensor lat = Tensor::from_f32(v, {2, c, n});
  const Tensor rows = pack_audio_rows(lat);
  ASSERT_EQ(rows.shape(), (Shape{2 * n, c}));
  const float* r = rows.data<float>();
  for (int64_t ch = 0; ch < 2; ++ch)
    for (int64_t k = 0; k < n; ++k)
      for (int64_t ci = 0; ci < c; ++ci)
        EXPECT_EQ(r[(ch * n + k) * c + ci], v[static_cast<size_t>((ch * c + ci) * n + k)]);
  EXPECT_EQ(unpack_audio_rows(rows, n).to_f32_vector(), v);
  EXPECT_THROW(unpack_audio_rows(rows, n + 1), Error);
  EXPECT_THROW(pack_audio_rows(Tensor::from_f32(v, {1, 2 * c, n})), Error);
}

}  // namespace
}  // namespace h3::pipeline
