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
