#include "meshtrain/kernels/cpu/elementwise.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "meshtrain/core/dtype.h"

namespace meshtrain::kernels {
namespace {

using test::random_vec;

// Sizes on both sides of the parallel threshold.
const int64_t kSizes[] = {0, 1, 17, kParallelMin - 1, 3 * kParallelMin + 5};

TEST(Elementwise, AddScaleAxpyFill) {
  for (int64_t n : kSizes) {
    auto x = random_vec<float>(n, 1), y = random_vec<float>(n, 2);
    auto y0 = y;
    add_inplace(y.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], y0[i] + x[i]);
    y = y0;
    scale_inplace(y.data(), 3.0f, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], y0[i] * 3.0f);
    y = y0;
    axpy(y.data(), -0.5f, x.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], y0[i] - 0.5f * x[i]);
    fill(y.data(), 7.0f, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 7.0f);
  }
  std::vector<double> d = {1, 2, 3};
  axpy(d.data(), 2.0, std::vector<double>{1, 1, 1}.data(), 3);
  EXPECT_EQ(d, (std::vector<double>{3, 4, 5}));
}

TEST(Elementwise, SumSquaresMatchesLongDouble) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(5), kSumBlock + 3, int64_t(600) * kSumBlock + 77}) {
    auto x = random_vec<float>(n, 3);
    long double want = 0;
    for (float v : x) want += (long double)v * v;
    const double got = sum_squares(x.data(), n);
    EXPECT_NEAR(got, double(want), 1e-12 * double(want) + 1e-300) << n;
  }
  std::vector<double> x = {1, 2, 3};
  EXPECT_EQ(sum_squares(x.data(), 3), 14.0);
}

TEST(Elementwise, SumSquaresIndependentOfThreadCount) {
  // Crosses the 512-block chunking and has a ragged last block.
  const int64_t n = int64_t(1100) * kSumBlock + 1234;
  auto x = random_vec<float>(n, 4, -3, 3);
  const double one = test::with_threads(1, [&] { return sum_squares(x.data(), n); });
  const double two = test::with_threads(2, [&] { return sum_squares(x.data(), n); });
  EXPECT_EQ(one, two);  // bitwise
  auto xd = test::cast_vec<double>(x);
  EXPECT_EQ(test::with_threads(1, [&] { return sum_squares(xd.data(), n); }),
            test::with_threads(2, [&] { return sum_squares(xd.data(), n); }));
}

// Each block's sum is the bits sum_squares gives that block alone, for
// any thread count (the grad norm's blocks are summed this way).
TEST(Elementwise, BlockSumSquaresIsEachBlocksSumSquares) {
  const int64_t block = kSumBlock, n = 37 * block + 123;  // a ragged last block
  auto x = random_vec<float>(n, 5, -2, 2);
  const int64_t blocks = (n + block - 1) / block;
  for (int threads : {1, 2, 3}) {
    std::vector<double> got(size_t(blocks), -1.0);
    test::with_threads(threads, [&] {
      block_sum_squares(x.data(), n, block, got.data());
      return 0;
    });
    for (int64_t i = 0; i < blocks; ++i)
      ASSERT_EQ(got[size_t(i)], sum_squares(x.data() + i * block, std::min(block, n - i * block)))
          << "block " << i << " at " << threads << " threads";
  }
}

// The team's copy and zero-fill write exactly the bytes asked for.
TEST(Elementwise, ParallelCopyAndZeroTouchExactlyTheirBytes) {
  for (size_t bytes : {size_t(0), size_t(1), size_t(4095), size_t(4097), size_t(1) << 20, (size_t(3) << 20) + 13}) {
    std::vector<unsigned char> src(bytes + 2), dst(bytes + 2, 0xAB);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
    test::with_threads(2, [&] {
      parallel_copy_bytes(dst.data() + 1, src.data() + 1, bytes);
      return 0;
    });
    ASSERT_EQ(dst[0], 0xAB);
    ASSERT_EQ(dst[bytes + 1], 0xAB);
    ASSERT_TRUE(std::equal(src.begin() + 1, src.begin() + 1 + long(bytes), dst.begin() + 1)) << bytes;
    test::with_threads(2, [&] {
      parallel_zero_bytes(dst.data() + 1, bytes);
      return 0;
    });
    ASSERT_EQ(dst[0], 0xAB);
    ASSERT_EQ(dst[bytes + 1], 0xAB);
    ASSERT_TRUE(std::all_of(dst.begin() + 1, dst.begin() + 1 + long(bytes), [](unsigned char c) { return c == 0; }));
  }
}

TEST(Elementwise, AllFinite) {
  for (int64_t n : {int64_t(1), int64_t(100), 4 * kParallelMin}) {
    auto x = random_vec<float>(n, 5);
    EXPECT_TRUE(all_finite(x.data(), n));
    for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN()}) {
      auto y = x;
      y[n - 1] = bad;
      EXPECT_FALSE(all_finite(y.data(), n));
      y = x;
      y[n / 2] = bad;
      EXPECT_FALSE(all_finite(y.data(), n));
    }
  }
  std::vector<double> d = {1, std::numeric_limits<double>::quiet_NaN()};
  EXPECT_FALSE(all_finite(d.data(), 2));
  EXPECT_TRUE(all_finite(d.data(), 1));
}

TEST(Elementwise, Bf16ConversionMatchesScalarRounding) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.5f, 3.14159f, 1e-40f, 3.4e38f, 65504.0f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x3f808000u),
                          std::bit_cast<float>(0x3f818000u), std::bit_cast<float>(0x3f808001u)};
  auto r = random_vec<float>(100000, 6, -1e4, 1e4);
  x.insert(x.end(), r.begin(), r.end());
  const int64_t n = int64_t(x.size());
  std::vector<uint16_t> b(n);
  convert_f32_to_bf16(x.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b[i], bf16::from_float(x[i])) << i << " " << x[i];
  EXPECT_EQ(b[11], 0x3f80);  // tie rounds to even (down)
  EXPECT_EQ(b[12], 0x3f82);  // tie rounds to even (up)
  std::vector<float> back(n);
  convert_bf16_to_f32(b.data(), back.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(back[i]));
      continue;
    }
    ASSERT_EQ(back[i], float(bf16(x[i])));
    if (std::abs(x[i]) < 1e38f && std::abs(x[i]) > 1e-30f) {
      ASSERT_NEAR(back[i], x[i], std::abs(x[i]) / 256);
    }
  }
}

TEST(Elementwise, FastExpAccuracyAndSpecialValues) {
  double worst = 0;
  for (float x = -87.0f; x < 88.5f; x += 0.001953125f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, std::abs(double(fast_exp(x)) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);  // ~2.5 ulp
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-100.0f), 0.0f);
  EXPECT_EQ(fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(fast_exp(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fast_exp(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace meshtrain::kernels
