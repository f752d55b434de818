#include "meshtrain/core/rng.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace meshtrain;

TEST(Philox, KnownAnswer) {
  // Random123 known-answer test vector for philox4x32-10 (all-ones counter/key).
  auto r = philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(r[0], 0x408f276du);
  EXPECT_EQ(r[1], 0x41c83b0eu);
  EXPECT_EQ(r[2], 0xa20bc7c6u);
  EXPECT_EQ(r[3], 0x6d5451fdu);
  auto z = philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(z[0], 0x6627e8d5u);
  EXPECT_EQ(z[1], 0xe169c58du);
  EXPECT_EQ(z[2], 0xbc57ac4cu);
  EXPECT_EQ(z[3], 0x9b00dbd8u);
}

TEST(CounterRng, PureFunctionOfCoordinates) {
  CounterRng a(7), b(7), c(8);
  EXPECT_EQ(a.uniform(3, 100), b.uniform(3, 100));
  EXPECT_NE(a.uniform(3, 100), c.uniform(3, 100));
  EXPECT_NE(a.uniform(3, 100), a.uniform(4, 100));
}

TEST(CounterRng, NormalMoments) {
  CounterRng r(1);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = r.normal(5, i);
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
  double u = 0;
  for (int i = 0; i < n; ++i) u += r.uniform(6, i);
  EXPECT_NEAR(u / n, 0.5, 0.005);
}
