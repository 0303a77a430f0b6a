// Audio VAE parity against the golden `audio_vae_decode` and `audio_vae_encode` cases (golden
// README: components audio_vae_*, pipeline facts 6 and 9) and the audio parts of the e2e runs:
// decode of the final latents to the waveform, and encode of each normalized reference soundtrack
// to its DiT rows. Bounds from TOLERANCES.md: decode rel_max and rel_l2 <= 1e-5 (for the waveform,
// or twice the reference's own float64 floor where the folder records a larger one:
// noise_floor_bounds), encode rel_max <= 1e-4, e2e waveform max abs <= 5e-5. The stored
// intermediates are compared at the bound of their stage, so that a failure points at the layer
// that caused it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "models/audio_vae/audio_vae_model.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3 {
namespace {

using audio_vae::AudioVae;

constexpr double kDecodeBound = 1e-5;        // audio VAE decode: rel_max and rel_l2
constexpr double kEncodeBound = 1e-4;        // audio VAE encode: rel_max
constexpr double kWaveformMaxAbs = 5e-5;     // end-to-end waveform

const AudioVae& model() {
  static std::unique_ptr<AudioVae> vae;
  if (!vae) {
    const std::string dir = test::Golden::get()->checkpoint_dir() + "/audio_vae";
    vae = std::make_unique<AudioVae>(AudioVae::load(dir));
  }
  return *vae;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void expect_same_shape(const std::string& label, const Tensor& got, const Tensor& ref) {
  EXPECT_EQ(got.shape(), ref.shape()) << label << ": shape " << shape_str(got.shape()) << " vs golden "
                                      << shape_str(ref.shape());
}

// Compares when the golden file stores `name`.
void compare_if_stored(const io::SafetensorsFile& f, const std::string& file, const std::string& name,
                       const Tensor& got, double bound_rel_max, double bound_rel_l2) {
  if (!f.has(name)) return;
  const Tensor ref = f.tensor(name);
  expect_same_shape(file + ":" + name, got, ref);
  if (got.numel() == ref.numel())
    test::expect_close(file + ":" + name, got.to(Device::cpu()), ref, bound_rel_max, bound_rel_l2);
}

TEST(AudioVaeGolden, Decode) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "audio_vae_decode");
  H3_GOLDEN_OUTPUTS_APPLY_OR_SKIP("audio_vae");
  const AudioVae& vae = model();
  // The decoder amplifies float32 rounding: the reference's own noise is close to the table's
  // bound.
  const test::NoiseFloorBounds b =
      test::noise_floor_bounds("audio_vae_decode_fp32_vs_fp64", kDecodeBound, kDecodeBound);
  std::printf("  bounds: %s\n", b.why.c_str());
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    ASSERT_TRUE(f->has("latents_normalized") && f->has("waveform")) << c.file;
    const Tensor z = vae.denormalize_latents(f->tensor("latents_normalized"));
    compare_if_stored(*f, c.file, "latents_denormalized", z, kDecodeBound, kDecodeBound);
    audio_vae::DecodeTrace trace;
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor wave = vae.decode(z, &trace);
    std::printf("  %s: decode %s -> %s in %.2f s\n", c.file.c_str(), shape_str(z.shape()).c_str(),
                shape_str(wave.shape()).c_str(), seconds_since(t0));
    compare_if_stored(*f, c.file, "dec_in_proj_out", trace.dec_in_proj_out, kDecodeBound, kDecodeBound);
    compare_if_stored(*f, c.file, "conv_pre_out", trace.conv_pre_out, kDecodeBound, kDecodeBound);
    for (size_t i = 0; i < trace.ups_out.size(); ++i)
      compare_if_stored(*f, c.file, "ups" + std::to_string(i) + "_out", trace.ups_out[i], kDecodeBound,
                        kDecodeBound);
    compare_if_stored(*f, c.file, "waveform", wave, b.rel_max, b.rel_l2);
  }
}

TEST(AudioVaeGolden, Encode) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "audio_vae_encode");
  H3_GOLDEN_OUTPUTS_APPLY_OR_SKIP("audio_vae");
  const AudioVae& vae = model();
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    ASSERT_TRUE(f->has("waveform") && f->has("posterior_mean")) << c.file;
    const Tensor wave = f->tensor("waveform");  // [2, S]: the stereo channels as a batch of two
    audio_vae::EncodeTrace trace;
    const auto t0 = std::chrono::steady_clock::now();
    const audio_vae::AudioPosterior post = vae.encode(wave, &trace);
    std::printf("  %s: encode %s -> %s in %.2f s\n", c.file.c_str(), shape_str(wave.shape()).c_str(),
                shape_str(post.mean.shape()).c_str(), seconds_since(t0));
    // The encode bound is on rel_max; rel_l2 is printed, not enforced (negative bound).
    compare_if_stored(*f, c.file, "encoder_out", trace.encoder_out, kEncodeBound, -1);
    compare_if_stored(*f, c.file, "pre_block_out", trace.pre_block_out, kEncodeBound, -1);
    compare_if_stored(*f, c.file, "posterior_mean", post.mean, kEncodeBound, -1);
    compare_if_stored(*f, c.file, "posterior_logs", post.logs, kEncodeBound, -1);
    compare_if_stored(*f, c.file, "normalized_rows",
                      audio_vae::latents_to_rows(vae.normalize_latents(post.mean)), kEncodeBound, -1);
  }
}

// e2e: the final normalized latents decoded the way the pipeline's decode stage does (denormalize,
// stereo as batch, clamp) against the generated waveform [1, 2, S].
TEST(AudioVaeGolden, EndToEndWaveform) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "e2e");
  H3_GOLDEN_OUTPUTS_APPLY_OR_SKIP("audio_vae");
  const AudioVae& vae = model();
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    if (!f->has("audio_latents_final") || !f->has("audio")) continue;
    const Tensor wave = vae.decode_normalized(f->tensor("audio_latents_final"));  // [2, 1, S]
    const Tensor ref = f->tensor("audio");                                       // [1, 2, S]
    ASSERT_EQ(wave.numel(), ref.numel()) << c.file << ": " << shape_str(wave.shape()) << " vs "
                                         << shape_str(ref.shape());
    test::expect_max_abs(c.file + ":audio", wave.view({1, wave.size(0), wave.size(2)}), ref,
                         kWaveformMaxAbs);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no e2e case holds audio_latents_final and audio";
  std::printf("[golden] %d e2e waveform(s) compared\n", ran);
}

// e2e Ref2VA: each normalized reference soundtrack (`normalized_reference_{k}_audio`, in reference
// order) encodes to `audio_condition_rows_{j}` (j counts the audio-bearing references): posterior
// mean, normalized, channel-major rows.
TEST(AudioVaeGolden, EndToEndReferenceRows) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "e2e");
  H3_GOLDEN_OUTPUTS_APPLY_OR_SKIP("audio_vae");
  const AudioVae& vae = model();
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    int j = 0;
    for (int k = 0; k < test::reference_count(*f); ++k) {
      const std::string in = "normalized_reference_" + std::to_string(k) + "_audio";
      if (!f->has(in)) continue;
      const std::string out = "audio_condition_rows_" + std::to_string(j++);
      if (!f->has(out)) continue;
      const Tensor rows = vae.encode_reference_rows(f->tensor(in));
      const Tensor ref = f->tensor(out);
      expect_same_shape(c.file + ":" + out, rows, ref);
      if (rows.numel() == ref.numel()) test::expect_close(c.file + ":" + out, rows, ref, kEncodeBound, -1);
      ++ran;
    }
  }
  if (ran == 0) GTEST_SKIP() << "no e2e case holds normalized reference audio with its condition rows";
  std::printf("[golden] %d e2e reference-audio row set(s) compared\n", ran);
}

}  // namespace
}  // namespace h3
