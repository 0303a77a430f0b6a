// Scheduler unit tests: torch's float32 linspace, the exact sigma/timestep tables of
// h3_dit_spec.md §3.1 (N = 50 video, FastH3 N = 5), the step update and scale_noise rounding, and
// the argument checks. No golden folder needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "pipeline/scheduler.h"

namespace h3::pipeline {
namespace {

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(f32_bits(f));
  return out;
}

// h3_dit_spec.md §3.1, N = 50, video (shift 12): sigmas and timesteps as float32 bit patterns.
const std::vector<uint32_t> kVideoSigmas50 = {
    0x3F800000, 0x3F7F8E6B, 0x3F7F186D, 0x3F7E9DC1, 0x3F7E1E1E, 0x3F7D9937, 0x3F7D0EB7, 0x3F7C7E3E,
    0x3F7BE76D, 0x3F7B49D0, 0x3F7AA4F3, 0x3F79F853, 0x3F79435D, 0x3F788576, 0x3F77BDEE, 0x3F76EC07,
    0x3F760EEA, 0x3F7525AA, 0x3F742F43, 0x3F732A8E, 0x3F721643, 0x3F70F0F1, 0x3F6FB8F9, 0x3F6E6C83,
    0x3F6D097C, 0x3F6B8D7E, 0x3F69F5D3, 0x3F683F56, 0x3F666666, 0x3F6466C7, 0x3F623B88, 0x3F5FDED5,
    0x3F5D49C4, 0x3F5A740D, 0x3F5753BE, 0x3F53DCB0, 0x3F4FFFFF, 0x3F4BAB23, 0x3F46C6C6, 0x3F413521,
    0x3F3ACF91, 0x3F336309, 0x3F2AAAAA, 0x3F20473C, 0x3F13B13A, 0x3F042108, 0x3EE0C7CE, 0x3EAD1207,
    0x3E4CCCCD, 0x00000000};
const std::vector<uint32_t> kVideoTimesteps50 = {
    0x00000000, 0x3AE32A00, 0x3B679300, 0x3BB11F80, 0x3BF0F100, 0x3C19B240, 0x3C3C5240,
    0x3C607080, 0x3C831260, 0x3C96C600, 0x3CAB61A0, 0x3CC0F5A0, 0x3CD79460, 0x3CEF5140,
    0x3D042120, 0x3D113F90, 0x3D1F1160, 0x3D2DA560, 0x3D3D0BD0, 0x3D4D5720, 0x3D5E9BD0,
    0x3D70F0F0, 0x3D823838, 0x3D8C9BE8, 0x3D97B420, 0x3DA39410, 0x3DB05168, 0x3DBE0550,
    0x3DCCCCD0, 0x3DDCC9C8, 0x3DEE23C0, 0x3E0084AC, 0x3E0AD8F0, 0x3E162FCC, 0x3E22B108,
    0x3E308D40, 0x3E400004, 0x3E515374, 0x3E64E4E8, 0x3E7B2B7C, 0x3E8A60DE, 0x3E9939EE,
    0x3EAAAAAC, 0x3EBF7188, 0x3ED89D8C, 0x3EF7BDF0, 0x3F0F9C19, 0x3F2976FC, 0x3F4CCCCD};

TEST(Scheduler, LinspaceMatchesTorchFloat32) {
  EXPECT_EQ(torch_linspace_f32(1.0f, 0.0f, 5),
            (std::vector<float>{1.0f, 0.75f, 0.5f, 0.25f, 0.0f}));
  EXPECT_EQ(torch_linspace_f32(1.0f, 0.0f, 2), (std::vector<float>{1.0f, 0.0f}));
  EXPECT_EQ(torch_linspace_f32(3.0f, 7.0f, 1), (std::vector<float>{3.0f}));
  EXPECT_TRUE(torch_linspace_f32(1.0f, 0.0f, 0).empty());
  // Both endpoints are exact whatever the count, because the second half counts from `end`.
  for (int64_t n : {3, 7, 49, 50, 51, 1000}) {
    const std::vector<float> b = torch_linspace_f32(1.0f, 0.0f, n);
    EXPECT_EQ(b.front(), 1.0f) << n;
    EXPECT_EQ(b.back(), 0.0f) << n;
  }
  // h3_dit_spec.md §3.1: a naive two-rounding first-half formula differs at i = 9, 17, 21, 22 for
  // N = 50; the single-rounding (fused) one is what torch computes.
  const std::vector<float> b = torch_linspace_f32(1.0f, 0.0f, 50);
  const float step = -1.0f / 49.0f;
  std::vector<int> differ;
  for (int i = 0; i < 25; ++i) {
    volatile float prod = step * static_cast<float>(i);
    const float naive = 1.0f + prod;
    if (naive != b[static_cast<size_t>(i)]) differ.push_back(i);
  }
  EXPECT_EQ(differ, (std::vector<int>{9, 17, 21, 22}));
}

TEST(Scheduler, Video50PointTableIsBitExact) {
  const Schedule s = Schedule::from_grid(50, kVideoShift);
  EXPECT_EQ(bits_of(s.sigmas()), kVideoSigmas50);
  EXPECT_EQ(bits_of(s.timesteps()), kVideoTimesteps50);
  EXPECT_EQ(s.num_steps(), 49);
}

TEST(Scheduler, FastH3GridIsFivePointsFourForwards) {
  const DualSchedule d = fasth3_schedule();
  ASSERT_EQ(d.num_steps(), 4);
  // h3_dit_spec.md §3.1 "N = 5 (FastH3)".
  EXPECT_EQ(bits_of(d.video.sigmas()),
            (std::vector<uint32_t>{0x3F800000, 0x3F7914C2, 0x3F6C4EC5, 0x3F4CCCCD, 0}));
  EXPECT_EQ(bits_of(d.video.timesteps()),
            (std::vector<uint32_t>{0, 0x3CDD67C0, 0x3D9D89D8, 0x3E4CCCCC}));
  EXPECT_EQ(d.audio.sigmas(), (std::vector<float>{1.0f, 0.9f, 0.75f, 0.5f, 0.0f}));
  EXPECT_EQ(bits_of(d.audio.timesteps()),
            (std::vector<uint32_t>{0, 0x3DCCCCD0, 0x3E800000, 0x3F000000}));
  std::printf("FastH3 video t = %.9g %.9g %.9g %.9g\n", d.video.timesteps()[0],
              d.video.timesteps()[1], d.video.timesteps()[2], d.video.timesteps()[3]);
}

TEST(Scheduler, TimestepsAreOneMinusSigmaAndStartAtZero) {
  for (int64_t n : {2, 3, 8, 30}) {
    for (double shift : {kVideoShift, kAudioShift}) {
      const Schedule s = Schedule::from_grid(n, shift);
      ASSERT_EQ(s.sigmas().size(), static_cast<size_t>(n));
      ASSERT_EQ(s.timesteps().size(), static_cast<size_t>(n - 1));
      EXPECT_EQ(s.timesteps()[0], 0.0f);
      EXPECT_EQ(s.sigmas().back(), 0.0f);
      for (size_t i = 0; i < s.timesteps().size(); ++i) {
        EXPECT_EQ(s.timesteps()[i], 1.0f - s.sigmas()[i]);
        EXPECT_LT(s.sigmas()[i + 1], s.sigmas()[i]);
      }
    }
  }
}

TEST(Scheduler, StepRoundsLikeSeparateFloat32Kernels) {
  const Schedule s = Schedule::from_grid(12, kVideoShift);
  std::vector<float> x = {0.5f, -1.25f, 3.0f, 1e-3f, -7.5f, 0.0f, 2.2f, -0.3f};
  const std::vector<float> v = {1.0f, 0.3f, -2.0f, 5.0f, 0.125f, -1.0f, 0.7f, 9.0f};
  for (int64_t k = 0; k < s.num_steps(); ++k) {
    std::vector<float> got = x;
    s.step_inplace(k, v.data(), got.data(), static_cast<int64_t>(got.size()));
    const float t = s.timesteps()[static_cast<size_t>(k)];
    const float r = s.sigmas()[static_cast<size_t>(k) + 1] / s.sigmas()[static_cast<size_t>(k)];
    for (size_t i = 0; i < x.size(); ++i) {
      // Each operation rounded once, as eager PyTorch does (volatile blocks any fusion here).
      volatile float sv = (1.0f - t) * v[i];
      volatile float x0 = x[i] + sv;
      volatile float a = r * x[i];
      volatile float b = (1.0f - r) * x0;
      const float want = a + b;
      EXPECT_EQ(f32_bits(got[i]), f32_bits(want)) << "step " << k << " element " << i;
    }
  }
  // Last step: sigma_next = 0, so r = 0 and the result is x0 exactly.
  std::vector<float> last = x;
  s.step_inplace(s.num_steps() - 1, v.data(), last.data(), static_cast<int64_t>(last.size()));
  const float t_last = s.timesteps().back();
  for (size_t i = 0; i < x.size(); ++i) {
    volatile float sv = (1.0f - t_last) * v[i];
    const float x0 = x[i] + sv;
    EXPECT_EQ(last[i], x0);
  }
}

TEST(Scheduler, ScaleNoiseUsesFloat32Level) {
  EXPECT_EQ(f32_bits(kConditionNoiseLevel), 0x3F7FBE77u);
  const Tensor x = Tensor::from_f32({1.0f, -2.0f, 0.5f}, {3});
  const Tensor e = Tensor::from_f32({0.25f, 4.0f, -1.0f}, {3});
  const std::vector<float> out = scale_noise(kConditionNoiseLevel, x, e).to_f32_vector();
  const float mix = 1.0f - kConditionNoiseLevel;
  const std::vector<float> xs = {1.0f, -2.0f, 0.5f};
  const std::vector<float> es = {0.25f, 4.0f, -1.0f};
  for (size_t i = 0; i < 3; ++i) {
    volatile float a = kConditionNoiseLevel * xs[i];
    volatile float b = mix * es[i];
    EXPECT_EQ(out[i], a + b);
  }
}

TEST(Scheduler, ExplicitSigmas) {
  const Schedule s = Schedule::from_sigmas({1.0f, 0.75f, 0.5f, 0.25f, 0.0f});
  EXPECT_EQ(s.timesteps(), (std::vector<float>{0.0f, 0.25f, 0.5f, 0.75f}));
  EXPECT_THROW(Schedule::from_sigmas({1.0f}), Error);
  EXPECT_THROW(Schedule::from_sigmas({1.0f, 0.5f}), Error);        // does not end at 0
  EXPECT_THROW(Schedule::from_sigmas({1.0f, 1.0f, 0.0f}), Error);  // not strictly decreasing
}

TEST(Scheduler, RejectsBadArguments) {
  EXPECT_THROW(Schedule::from_grid(1, kVideoShift), Error);
  EXPECT_THROW(Schedule::from_grid(0, kVideoShift), Error);
  EXPECT_THROW(Schedule::from_grid(5, 0.0), Error);
  EXPECT_THROW(Schedule::from_grid(5, -3.0), Error);
  const Schedule s = Schedule::from_grid(5, kAudioShift);
  float x = 1.0f;
  const float v = 1.0f;
  EXPECT_THROW(s.step_inplace(4, &v, &x, 1), Error);
  EXPECT_THROW(s.step_inplace(-1, &v, &x, 1), Error);
  try {
    Schedule::from_grid(1, kVideoShift);
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--steps"), std::string::npos) << e.message();
  }
  EXPECT_THROW(s.step(0, Tensor::from_f32({1, 2}, {2}), Tensor::from_f32({1, 2, 3}, {3})), Error);
}

}  // namespace
}  // namespace h3::pipeline
