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

}  // namespace h3
