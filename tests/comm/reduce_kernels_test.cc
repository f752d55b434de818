// reduce_kernels.h: reduce_to_many / copy_to_many / bf16 helpers /
// divide_in_place against serial references written from the contract in
// the header (rank-order reduction, bf16 accumulating in f32, Avg = Sum /
// nsrc with integer division for integer dtypes).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "meshtrain/comm/reduce_kernels.h"
#include "meshtrain/core/error.h"

namespace meshtrain::comm {
namespace {

// Serial reference: ((s0 op s1) op s2) ... in accumulator type A.
template <typename T, typename A>
std::vector<T> serial_reduce(const std::vector<std::vector<T>>& srcs, ReduceOp op) {
  const size_t n = srcs[0].size();
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) {
    auto load = [&](size_t k) -> A {
      if constexpr (std::is_same_v<T, bf16>) return float(srcs[k][i]);
      else return A(srcs[k][i]);
    };
    A acc = load(0);
    for (size_t k = 1; k < srcs.size(); ++k) {
      const A v = load(k);
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg: acc = acc + v; break;
        case ReduceOp::Max: acc = v > acc ? v : acc; break;
        case ReduceOp::Min: acc = v < acc ? v : acc; break;
      }
    }
    if (op == ReduceOp::Avg) acc = acc / A(srcs.size());
    if constexpr (std::is_same_v<T, bf16>) out[i] = bf16(float(acc));
    else out[i] = T(acc);
  }
  return out;
}

template <typename T>
std::vector<std::vector<T>> random_sources(int nsrc, size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::vector<T>> s(static_cast<size_t>(nsrc), std::vector<T>(n));
  for (auto& v : s)
    for (auto& x : v) {
      if constexpr (std::is_same_v<T, bf16>) x = bf16(std::normal_distribution<float>(0.f, 10.f)(gen));
      else if constexpr (std::is_floating_point_v<T>) x = T(std::normal_distribution<double>(0.0, 1e3)(gen));
      else x = T(std::uniform_int_distribution<int64_t>(-1000000, 1000000)(gen));
    }
  return s;
}

template <typename T>
std::vector<T> run_reduce(const std::vector<std::vector<T>>& srcs, ReduceOp op, int stream = -1) {
  std::vector<const void*> sp;
  for (const auto& s : srcs) sp.push_back(s.data());
  const size_t n = srcs[0].size();
  std::vector<T> a(n), b(n);
  void* dsts[2] = {a.data(), b.data()};
  reduce_to_many(sp.data(), int(sp.size()), dsts, 2, n, dtype_of<T>, op, stream);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(T)), 0) << "destinations differ";
  return a;
}

template <typename T, typename A>
void check_all_ops() {
  // 5000 elements: more than two tiles of 2048, not a multiple of either.
  for (int nsrc : {1, 2, 3, 5}) {
    const auto srcs = random_sources<T>(nsrc, 5000, 17u + uint32_t(nsrc));
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      const auto expected = serial_reduce<T, A>(srcs, op);
      const auto got = run_reduce(srcs, op);
      ASSERT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(T)), 0)
          << dtype_name(dtype_of<T>) << " " << reduce_op_name(op) << " nsrc=" << nsrc;
    }
  }
}

TEST(ReduceKernels, F32MatchesSerialRankOrder) { check_all_ops<float, float>(); }
TEST(ReduceKernels, F64MatchesSerialRankOrder) { check_all_ops<double, double>(); }
TEST(ReduceKernels, Bf16AccumulatesInF32MatchesSerial) { check_all_ops<bf16, float>(); }
TEST(ReduceKernels, I32MatchesSerial) { check_all_ops<int32_t, int32_t>(); }
TEST(ReduceKernels, I64MatchesSerial) { check_all_ops<int64_t, int64_t>(); }

TEST(ReduceKernels, SumIsInSourceOrder) {
  // (1e8 + 1) - 1e8 == 0 in f32 (1e8 + 1 rounds to 1e8); another order
  // ((1e8 - 1e8) + 1) would give 1.
  std::vector<std::vector<float>> s = {{1e8f}, {1.0f}, {-1e8f}};
  EXPECT_EQ(run_reduce(s, ReduceOp::Sum)[0], 0.0f);
  std::vector<std::vector<float>> t = {{1e8f}, {-1e8f}, {1.0f}};
  EXPECT_EQ(run_reduce(t, ReduceOp::Sum)[0], 1.0f);
}

TEST(ReduceKernels, Bf16SumRoundsOnceNotPerStep) {
  // 256 + 1 + 1: in f32 the sum is 258 (a bf16 value); summing in bf16
  // would round 257 back to 256 twice and give 256.
  std::vector<std::vector<bf16>> s = {{bf16(256.f)}, {bf16(1.f)}, {bf16(1.f)}};
  EXPECT_EQ(float(run_reduce(s, ReduceOp::Sum)[0]), 258.f);
  // Avg: 258 / 3 = 86 exactly.
  EXPECT_EQ(float(run_reduce(s, ReduceOp::Avg)[0]), 86.f);
}

TEST(ReduceKernels, IntegerAvgTruncatesAndI64IsExact) {
  std::vector<std::vector<int32_t>> a = {{7, -7, 5}, {-2, 0, 0}, {0, 0, 0}};
  const auto r = run_reduce(a, ReduceOp::Avg);
  EXPECT_EQ(r[0], 1);   // 5 / 3
  EXPECT_EQ(r[1], -2);  // -7 / 3 truncates toward zero
  EXPECT_EQ(r[2], 1);
  // Beyond 2^53: a double accumulator would lose the +1s.
  const int64_t big = int64_t(1) << 60;
  std::vector<std::vector<int64_t>> b = {{big}, {1}, {1}};
  EXPECT_EQ(run_reduce(b, ReduceOp::Sum)[0], big + 2);
  EXPECT_EQ(run_reduce(b, ReduceOp::Max)[0], big);
  EXPECT_EQ(run_reduce(b, ReduceOp::Min)[0], 1);
}

TEST(ReduceKernels, MaxMinWithNegativesAndInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> s = {{-3.f, 2.f, -inf}, {-1.f, -5.f, 0.f}, {-2.f, 7.f, inf}};
  const auto mx = run_reduce(s, ReduceOp::Max), mn = run_reduce(s, ReduceOp::Min);
  EXPECT_EQ(mx, (std::vector<float>{-1.f, 7.f, inf}));
  EXPECT_EQ(mn, (std::vector<float>{-3.f, -5.f, -inf}));
}

TEST(ReduceKernels, InPlaceDestinationAliasingASource) {
  auto srcs = random_sources<float>(3, 4100, 99);
  const auto expected = serial_reduce<float, float>(srcs, ReduceOp::Sum);
  const void* sp[3] = {srcs[0].data(), srcs[1].data(), srcs[2].data()};
  void* dst[1] = {srcs[1].data()};  // writes over a source it still reads
  reduce_to_many(sp, 3, dst, 1, 4100, DType::F32, ReduceOp::Sum);
  EXPECT_EQ(std::memcmp(srcs[1].data(), expected.data(), 4100 * 4), 0);
}

TEST(ReduceKernels, StreamingStoresGiveTheSameBits) {
  // Unaligned destinations exercise the head/tail handling of streaming stores.
  auto srcs = random_sources<double>(2, 3001, 5);
  const auto expected = serial_reduce<double, double>(srcs, ReduceOp::Sum);
  for (int stream : {0, 1}) {
    std::vector<double> out(3002, -1.0);
    const void* sp[2] = {srcs[0].data(), srcs[1].data()};
    void* dst[1] = {out.data() + 1};
    reduce_to_many(sp, 2, dst, 1, 3001, DType::F64, ReduceOp::Sum, stream);
    EXPECT_EQ(out[0], -1.0) << "wrote before the destination";
    EXPECT_EQ(std::memcmp(out.data() + 1, expected.data(), 3001 * 8), 0) << "stream=" << stream;
  }
}

TEST(ReduceKernels, EmptyAndInvalidCalls) {
  float a = 1.f, d = 42.f;
  const void* sp[1] = {&a};
  void* dst[1] = {&d};
  reduce_to_many(sp, 1, dst, 1, 0, DType::F32, ReduceOp::Sum);  // n == 0: nothing written
  EXPECT_EQ(d, 42.f);
  reduce_to_many(sp, 1, dst, 0, 1, DType::F32, ReduceOp::Sum);  // no destinations
  EXPECT_EQ(d, 42.f);
  EXPECT_THROW(reduce_to_many(sp, 0, dst, 1, 1, DType::F32, ReduceOp::Sum), InternalError);
}

TEST(ReduceKernels, CopyToManyCopiesEveryDestinationIncludingAliased) {
  // 200001 bytes: several 64 KiB tiles plus an odd tail.
  const size_t bytes = 200001;
  std::vector<char> src(bytes);
  for (size_t i = 0; i < bytes; ++i) src[i] = char(i * 31 + 7);
  const std::vector<char> orig = src;
  for (int stream : {-1, 0, 1}) {
    std::vector<char> a(bytes, 0), b(bytes + 3, 0);
    void* dsts[3] = {a.data(), b.data() + 3, src.data()};  // one destination is the source itself
    copy_to_many(src.data(), dsts, 3, bytes, stream);
    EXPECT_EQ(std::memcmp(a.data(), orig.data(), bytes), 0) << stream;
    EXPECT_EQ(std::memcmp(b.data() + 3, orig.data(), bytes), 0) << stream;
    EXPECT_EQ(src, orig) << stream;
  }
}

TEST(ReduceKernels, Bf16ConversionsRoundToNearestEven) {
  auto f = [](uint32_t bits) { return std::bit_cast<float>(bits); };
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.0.
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: goes to 1 + 2^-6.
  // Just above the first halfway point rounds up.
  const float in[] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f,
                      std::numeric_limits<float>::infinity(), f(0x7fc00001u)};
  uint16_t out[7];
  f32_to_bf16(in, out, 7);
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[1], 0x3f80);
  EXPECT_EQ(out[2], 0x3f82);
  EXPECT_EQ(out[3], 0x3f81);
  EXPECT_EQ(out[4], 0xc020);
  EXPECT_EQ(out[5], 0x7f80);
  float back[7];
  bf16_to_f32(out, back, 7);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[2], 1.0f + 0x1p-6f);
  EXPECT_EQ(back[3], 1.0f + 0x1p-7f);
  EXPECT_EQ(back[4], -2.5f);
  EXPECT_TRUE(std::isinf(back[5]));
  EXPECT_TRUE(std::isnan(back[6]));
  // bf16 -> f32 is exact: every bf16 pattern survives a round trip.
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    const uint16_t x = uint16_t(b);
    float y;
    bf16_to_f32(&x, &y, 1);
    if (std::isnan(y)) continue;
    uint16_t z;
    f32_to_bf16(&y, &z, 1);
    ASSERT_EQ(z, x) << std::hex << b;
  }
}

TEST(ReduceKernels, DivideInPlacePerDtype) {
  std::vector<float> f = {3.f, 7.f, -1.f};
  divide_in_place(f.data(), f.size(), DType::F32, 2);
  EXPECT_EQ(f, (std::vector<float>{1.5f, 3.5f, -0.5f}));
  std::vector<double> d = {1.0, 10.0};
  divide_in_place(d.data(), d.size(), DType::F64, 4);
  EXPECT_EQ(d, (std::vector<double>{0.25, 2.5}));
  std::vector<int32_t> i = {7, -7, 1};
  divide_in_place(i.data(), i.size(), DType::I32, 2);
  EXPECT_EQ(i, (std::vector<int32_t>{3, -3, 0}));
  std::vector<int64_t> l = {(int64_t(1) << 62) + 3};
  divide_in_place(l.data(), l.size(), DType::I64, 2);
  EXPECT_EQ(l[0], (int64_t(1) << 61) + 1);
  // bf16: 258 / 3 = 86 (exact); 1 / 3 rounds to the nearest bf16.
  std::vector<bf16> b = {bf16(258.f), bf16(1.f)};
  divide_in_place(b.data(), b.size(), DType::BF16, 3);
  EXPECT_EQ(float(b[0]), 86.f);
  EXPECT_EQ(b[1].bits, bf16(1.f / 3.f).bits);
}

}  // namespace
}  // namespace meshtrain::comm
