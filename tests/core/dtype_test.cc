#include "meshtrain/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "meshtrain/core/error.h"
#include "meshtrain/core/shape.h"

using namespace meshtrain;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_THROW(parse_dtype("f16x"), ConfigError);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float(bf16(1.0f)), 1.0f);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(float(bf16(1.0f + 1.0f / 256)), 1.0f);
  // Slightly above halfway rounds up.
  EXPECT_EQ(float(bf16(1.0f + 1.0f / 256 + 1.0f / 4096)), 1.0f + 1.0f / 128);
  EXPECT_TRUE(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(float(bf16(-3.0f)), -3.0f);
}

TEST(Shape, NumelAndIndexing) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s[-1], 4);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ((Shape{0, 5}).numel(), 0);
  EXPECT_THROW(s[3], InternalError);
}

TEST(DType, F16RoundTripsEveryBitPatternAndRoundsToNearestEven) {
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(parse_dtype("f16"), DType::F16);
  // Every finite half survives half -> float -> half; NaNs stay NaNs.
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16::to_float(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16::to_float(f16::from_float(f)))) << h;
      continue;
    }
    ASSERT_EQ(f16::from_float(f), h) << "bits " << h << " value " << f;
  }
  EXPECT_EQ(float(f16(1.0f)), 1.0f);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(float(f16(1.0f + 1.0f / 2048)), 1.0f);
  EXPECT_EQ(float(f16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie to the even neighbour above
  EXPECT_EQ(float(f16(65504.0f)), 65504.0f);                      // the largest half
  EXPECT_TRUE(std::isinf(float(f16(65520.0f))));                  // rounds past it: inf
  EXPECT_EQ(float(f16(65519.0f)), 65504.0f);
  EXPECT_EQ(float(f16(5.9604644775390625e-8f)), 5.9604644775390625e-8f);  // smallest subnormal 2^-24
  EXPECT_EQ(float(f16(2.98e-8f)), 0.0f);                                  // below half of it
  EXPECT_EQ(float(f16(-3.0f)), -3.0f);
}
