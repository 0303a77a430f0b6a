#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"

namespace h3 {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half-way between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is half-way between 1+2^-7 (odd) and 1+2^-6 (even): rounds up to even.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(DType, F16RoundTripAllValues) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f16_from_f32(f), h) << "half bits " << h;
  }
}

TEST(DType, F16Rounding) {
  EXPECT_EQ(f16_from_f32(65504.0f), 0x7bff);
  EXPECT_EQ(f16_from_f32(65520.0f), 0x7c00);  // half-way past max rounds to inf
  EXPECT_EQ(f16_from_f32(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie to even
  EXPECT_EQ(f16_from_f32(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie to even (up)
  EXPECT_EQ(f16_from_f32(std::ldexp(1.0f, -25)), 0x0000);             // tie to even (zero)
  EXPECT_EQ(f16_from_f32(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(DType, F8E4M3RoundTripAndLimits) {
  for (uint32_t v = 0; v < 256; ++v) {
    const float f = f8e4m3_to_f32(static_cast<uint8_t>(v));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f8e4m3_from_f32(f), v) << "fp8 bits " << v;
  }
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_from_f32(460.0f), 0x7e);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(f8e4m3_from_f32(480.0f))));
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

// Every interval between neighbouring positive codes (zero and the subnormals included): a value
// just below the midpoint goes down, just above goes up, the midpoint itself to the even code,
// and a negative value mirrors it. The encoders are bit arithmetic; this is the plain definition.
TEST(DType, F8E4M3RoundsEveryIntervalToNearestEven) {
  for (uint32_t lo = 0; lo < 0x7e; ++lo) {
    const float a = f8e4m3_to_f32(static_cast<uint8_t>(lo));
    const float b = f8e4m3_to_f32(static_cast<uint8_t>(lo + 1));
    const float mid = 0.5f * (a + b);  // exact: a and b differ by one power-of-two quantum
    const uint8_t even = static_cast<uint8_t>((lo & 1u) ? lo + 1 : lo);
    EXPECT_EQ(f8e4m3_from_f32(std::nextafter(mid, a)), lo) << "below the midpoint of " << a;
    EXPECT_EQ(f8e4m3_from_f32(std::nextafter(mid, b)), lo + 1) << "above the midpoint of " << a;
    EXPECT_EQ(f8e4m3_from_f32(mid), even) << "midpoint of " << a << " and " << b;
    EXPECT_EQ(f8e4m3_from_f32(-mid), even | 0x80u) << "midpoint of " << -a << " and " << -b;
  }
}

TEST(DType, F16RoundsEveryIntervalToNearestEven) {
  for (uint32_t lo = 0; lo < 0x7bff; ++lo) {
    const float a = f16_to_f32(static_cast<uint16_t>(lo));
    const float b = f16_to_f32(static_cast<uint16_t>(lo + 1));
    const float mid = 0.5f * (a + b);
    const uint16_t even = static_cast<uint16_t>((lo & 1u) ? lo + 1 : lo);
    ASSERT_EQ(f16_from_f32(std::nextafter(mid, a)), lo) << "below the midpoint of " << a;
    ASSERT_EQ(f16_from_f32(std::nextafter(mid, b)), lo + 1) << "above the midpoint of " << a;
    ASSERT_EQ(f16_from_f32(mid), even) << "midpoint of " << a << " and " << b;
    ASSERT_EQ(f16_from_f32(-mid), even | 0x8000u) << "midpoint of " << -a << " and " << -b;
  }
}

}  // namespace h3
