// Reference-audio resampling (media/audio_resample): torchaudio's kernel geometry (gcd-reduced
// rates, width), output lengths, the truncation count, the mono upmix and the bad-input errors.
// Bit-level parity with torchaudio is the golden test's job (tests/golden/test_audio_resample.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"
#include "media/audio_resample.h"

namespace h3::media {
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

TEST(AudioResample, KernelGeometryFollowsTorchaudio) {
  // 44100 -> 32000: gcd 100, 441:320, base = 320*0.99, width = ceil(6*441/316.8) = 9.
  const SincResampleKernel a = sinc_resample_kernel(44100, 32000);
  EXPECT_EQ(a.orig, 441);
  EXPECT_EQ(a.target, 320);
  EXPECT_EQ(a.width, 9);
  EXPECT_EQ(a.taps.size(), static_cast<size_t>(320 * (2 * 9 + 441)));
  // 16000 -> 32000: 1:2, base 0.99, width = ceil(6/0.99) = 7.
  const SincResampleKernel b = sinc_resample_kernel(16000, 32000);
  EXPECT_EQ(b.orig, 1);
  EXPECT_EQ(b.target, 2);
  EXPECT_EQ(b.width, 7);
  // 48000 -> 32000: 3:2, base 1.98, width = ceil(18/1.98) = 10.
  const SincResampleKernel c = sinc_resample_kernel(48000, 32000);
  EXPECT_EQ(c.orig, 3);
  EXPECT_EQ(c.target, 2);
  EXPECT_EQ(c.width, 10);
  // Phase 0 of an upsampler by 2 has its centre tap at t = 0: sinc(0) * window(0) * scale = 0.99.
  EXPECT_FLOAT_EQ(b.taps[static_cast<size_t>(b.width)], 0.99f);
}

TEST(AudioResample, ConstantSignalKeepsItsLevelInTheInterior) {
  // The windowed sinc sums to about 1 per phase: a constant comes out constant away from the edges
  // (which see the zero padding).
  for (const int64_t rate : {44100, 16000, 48000, 22050}) {
    const int64_t n = rate / 10;
    const Tensor x = Tensor::from_f32(std::vector<float>(static_cast<size_t>(n), 0.5f), {1, n});
    const Tensor y = resample(x, rate, 32000);
    ASSERT_EQ(y.size(1), resampled_length(n, rate, 32000));
    const std::vector<float> v = y.to_f32_vector();
    double worst = 0;
    for (size_t i = 100; i + 100 < v.size(); ++i) worst = std::max(worst, std::abs(v[i] - 0.5));
    std::printf("  %lld Hz -> 32 kHz, constant 0.5: interior max deviation %.2e (bound 5e-3)\n",
                static_cast<long long>(rate), worst);
    EXPECT_LE(worst, 5e-3);
  }
}

TEST(AudioResample, LengthsAndTruncation) {
  EXPECT_EQ(resampled_length(882, 44100, 32000), 640);
  EXPECT_EQ(resampled_length(883, 44100, 32000), 641);  // ceil
  EXPECT_EQ(resampled_length(320, 16000, 32000), 640);
  EXPECT_EQ(resampled_length(1, 48000, 32000), 1);
  EXPECT_EQ(resampled_length(0, 48000, 32000), 0);
  // int(22/24 * rate): 0.91666.. s.
  EXPECT_EQ(truncated_sample_count(reference_max_duration(22), 44100), 40425);
  EXPECT_EQ(truncated_sample_count(reference_max_duration(22), 32000), 29333);
  EXPECT_EQ(truncated_sample_count(reference_max_duration(124), 48000), 248000);
}

TEST(AudioResample, NormalizeTruncatesUpmixesAndResamples) {
  std::vector<float> mono(100);
  for (size_t i = 0; i < mono.size(); ++i) mono[i] = std::sin(0.05f * static_cast<float>(i));
  // 32 kHz: no resampling, cut to int(0.002 * 32000) = 64 samples, channel repeated.
  const Tensor same = normalize_reference_audio(Tensor::from_f32(mono, {1, 100}), 32000, 0.002);
  ASSERT_EQ(same.shape(), (Shape{2, 64}));
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(same.item_as_double({0, i}), mono[i]);
    EXPECT_EQ(same.item_as_double({1, i}), mono[i]);
  }
  // 16 kHz stereo, cut to 32 samples, then doubled to 64.
  std::vector<float> stereo(200);
  for (size_t i = 0; i < 100; ++i) {
    stereo[i] = mono[i];
    stereo[100 + i] = -mono[i];
  }
  const Tensor up = normalize_reference_audio(Tensor::from_f32(stereo, {2, 100}), 16000, 0.002);
  ASSERT_EQ(up.shape(), (Shape{2, 64}));
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(up.item_as_double({1, i}), -up.item_as_double({0, i}));
  // A duration beyond the input keeps everything.
  EXPECT_EQ(normalize_reference_audio(Tensor::from_f32(mono, {1, 100}), 32000, 10.0).size(1), 100);
}

TEST(AudioResample, RejectsBadInput) {
  expect_error([] { normalize_reference_audio(Tensor::zeros({3, 10}, DType::kF32), 32000, 1.0); },
               ErrorCode::kInvalidArgument, "mono or stereo");
  expect_error([] { normalize_reference_audio(Tensor::zeros({10}, DType::kF32), 32000, 1.0); },
               ErrorCode::kInvalidArgument, "mono or stereo");
  expect_error([] { normalize_reference_audio(Tensor::zeros({1, 10}, DType::kI64), 32000, 1.0); },
               ErrorCode::kInvalidArgument, "float");
  expect_error([] { normalize_reference_audio(Tensor::zeros({1, 10}, DType::kF32), 0, 1.0); },
               ErrorCode::kInvalidArgument, "sample rates");
  expect_error([] { normalize_reference_audio(Tensor::zeros({1, 10}, DType::kF32), 32000, -1.0); },
               ErrorCode::kInvalidArgument, "duration");
  expect_error([] { normalize_reference_audio(Tensor::zeros({1, 10}, DType::kF32), 32000, 1e-6); },
               ErrorCode::kInvalidArgument, "no samples left");
  expect_error([] { sinc_resample_kernel(1000003, 999983); }, ErrorCode::kInvalidArgument, "too large");
}

}  // namespace
}  // namespace h3::media
