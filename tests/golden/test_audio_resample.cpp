// Reference-audio normalization parity (golden README "Reference media": Audio and
// "Reference-audio resampling"): truncation to int(max_duration * rate) samples at the input's
// rate, mono upmix, torchaudio Resample(rate, 32000). Every `audio_resample` case and every e2e
// `normalized_reference_{k}_audio` tensor, at max abs <= 1e-5 (TOLERANCES.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "media/audio_resample.h"
#include "support/golden.h"
#include "support/golden_checks.h"

namespace h3 {
namespace {

constexpr double kMaxAbsBound = 1e-5;  // TOLERANCES.md: reference-audio resampling, max abs

int64_t scalar_i64(const io::SafetensorsFile& f, const std::string& name) {
  return f.tensor(name).to_i64_vector().at(0);
}

void compare(const std::string& label, const Tensor& got, const Tensor& ref) {
  ASSERT_EQ(got.shape(), ref.shape()) << label << ": shape " << shape_str(got.shape()) << " vs golden "
                                      << shape_str(ref.shape());
  test::expect_max_abs(label, got, ref, kMaxAbsBound);
}

TEST(AudioResampleGolden, ComponentCases) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "audio_resample");
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    for (int i = 0; f->has("case" + std::to_string(i) + "_input"); ++i) {
      const std::string p = c.file + ":case" + std::to_string(i);
      const std::string k = "case" + std::to_string(i) + "_";
      const int64_t rate = scalar_i64(*f, k + "sample_rate");
      const double max_duration = f->tensor(k + "max_duration").to_f64_vector().at(0);
      const Tensor input = f->tensor(k + "input");
      const Tensor got = media::normalize_reference_audio(input, rate, max_duration);
      std::printf("  %s: %lld Hz, input %s -> %s\n", p.c_str(), static_cast<long long>(rate),
                  shape_str(input.shape()).c_str(), shape_str(got.shape()).c_str());
      compare(p, got, f->tensor(k + "output"));
      ++ran;
    }
  }
  std::printf("[golden] %d resampling case(s) compared\n", ran);
  EXPECT_GT(ran, 0) << "audio_resample files hold no case*_input tensors";
}

TEST(AudioResampleGolden, EndToEndReferenceAudio) {
  H3_GOLDEN_CASES_OR_SKIP(cases, "e2e");
  int ran = 0;
  for (const test::GoldenCase& c : cases) {
    const auto f = c.open();
    const nlohmann::json& meta = c.entry.contains("meta") ? c.entry["meta"] : nlohmann::json::object();
    for (int k = 0; k < test::reference_count(*f); ++k) {
      const std::string in = "input_reference_" + std::to_string(k) + "_audio";
      const std::string out = "normalized_reference_" + std::to_string(k) + "_audio";
      if (!f->has(in) || !f->has(out)) continue;
      ASSERT_TRUE(meta.contains("num_frames") && meta["num_frames"].is_number_integer())
          << c.file << ": meta.num_frames is needed for the truncation";
      // A reference without a declared rate is taken at the audio VAE's rate (the pipeline's
      // `sample_rate is None` branch).
      const std::string rate_name = "input_reference_" + std::to_string(k) + "_sample_rate";
      const int64_t rate = f->has(rate_name) ? scalar_i64(*f, rate_name) : media::kAudioVaeSampleRate;
      const double max_duration = media::reference_max_duration(meta["num_frames"].get<int64_t>());
      const Tensor got = media::normalize_reference_audio(f->tensor(in), rate, max_duration);
      std::printf("  %s reference %d: %lld Hz %s -> %s\n", c.file.c_str(), k, static_cast<long long>(rate),
                  shape_str(f->tensor(in).shape()).c_str(), shape_str(got.shape()).c_str());
      compare(c.file + ":" + out, got, f->tensor(out));
      ++ran;
    }
  }
  if (ran == 0) GTEST_SKIP() << "no e2e case holds input_reference_*_audio with its normalized form";
  std::printf("[golden] %d e2e reference soundtrack(s) compared\n", ran);
}

}  // namespace
}  // namespace h3
