#include "loom/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace loom {
namespace {

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-3.5f)), -3.5f);
  // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_GT(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12))), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16MatchesExactValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1000.f, 1000.f);
  for (int i = 0; i < 10000; ++i) {
    const float x = dist(rng);
    const float back = f16_to_f32(f32_to_f16(x));
    EXPECT_NEAR(back, x, std::fabs(x) * 1e-3f + 1e-7f);
    EXPECT_EQ(f32_to_f16(back), f32_to_f16(x));
  }
}

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8, DType::kBool, DType::kI8}) {
    auto back = dtype_from_name(dtype_name(t));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, t);
  }
  EXPECT_FALSE(dtype_from_name("F8_E4M3").has_value());
}

}  // namespace
}  // namespace loom
