// Covers the packed bf16 GEMM (per_isa/packed_gemm_bf16_tiles.h, the bf16
// kit of per_isa/packed_gemm.cc, gemm_bf16 / gemm_shared_b /
// gemm_onto in cpu/gemm.cc): bit for bit against a scalar emulation
// of its arithmetic (k in pairs, the odd one added first, each sum rounded
// once, k blocks of kc), for odd shapes, odd K, every transpose, alpha and
// beta; its invariance to the thread count and to how the operands are
// stored; row sets sharing op(B) and sums onto another matrix; which bf16
// GEMM runs. Skipped where the CPU has no AVX-512 BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/isa.h"
#include "meshtrain/kernels/cpu/packed_gemm.h"

namespace meshtrain::kernels {
namespace {

#define SKIP_WITHOUT_BF16_TILE()                                                                   \
  if (!packed_gemm_bf16_available()) GTEST_SKIP() << "no AVX-512 BF16 here (" << isa_description() \
                                                  << "): the packed bf16 GEMM never runs"

struct Shape {
  int64_t m, n, k;
};

std::vector<bf16> random_bf16(size_t n, uint32_t seed) {
  std::vector<bf16> out(n);
  const std::vector<float> x = test::random_vec<float>(n, seed);
  for (size_t i = 0; i < n; ++i) out[i] = bf16(x[i]);
  return out;
}

std::vector<bf16> transposed(const std::vector<bf16>& x, int64_t rows, int64_t cols) {
  std::vector<bf16> t(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[size_t(j * rows + i)] = x[size_t(i * cols + j)];
  return t;
}

// The packed GEMM's arithmetic, one element at a time: per k block of kc,
// acc = 0, then per pair acc += a(k+1) b(k+1), acc += a(k) b(k) (products
// of bf16 values are exact in f32: each step rounds once), then C = alpha
// acc (beta 0 in the first block) or fma(alpha, acc, beta C).
std::vector<float> emulated(const Shape& s, int64_t kc, float alpha, const std::vector<bf16>& a,
                            const std::vector<bf16>& b, float beta, std::vector<float> c) {
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      float& out = c[size_t(i * s.n + j)];
      for (int64_t k0 = 0; k0 < s.k; k0 += kc) {
        auto term = [&](int64_t k) {
          return k < s.k ? float(a[size_t(i * s.k + k)]) * float(b[size_t(k * s.n + j)]) : 0.0f;
        };
        float acc = 0.0f;
        for (int64_t k = k0; k < std::min(s.k, k0 + kc); k += 2) {
          acc += term(k + 1);
          acc += term(k);
        }
        const float beta_k = k0 == 0 ? beta : 1.0f;
        out = beta_k == 0.0f ? alpha * acc : std::fma(alpha, acc, beta_k * out);
      }
    }
  return c;
}

std::vector<Shape> shapes_for(const PackedGemmBlocking& b) {
  return {{1, 1, 1},           {1, 7, 3},
          {5, 1, 9},           {b.mr, b.nr, 2},
          {b.mr + 1, b.nr - 1, 17},
          {37, 41, 43},        {5 * b.mr + 1, b.nr + 3, b.kc + 1},
          {b.mr + 2, 3 * b.nr - 5, 2 * b.kc + 6},
          {3, b.nc_whole + b.nr + 3, 20},
          {40 * b.mr + 7, b.nr + 1, 34}};
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(PackedGemmBf16, BitsOfTheEmulatedArithmeticForOddShapesTransposesAlphaBeta) {
  SKIP_WITHOUT_BF16_TILE();
  const PackedGemmBlocking blk = packed_gemm_bf16_blocking();
  uint32_t seed = 1;
  for (const Shape& s : shapes_for(blk))
    for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {-0.5f, 1.0f}, {2.0f, 0.25f}}) {
      const std::vector<bf16> a = random_bf16(size_t(s.m * s.k), seed += 3), b = random_bf16(size_t(s.k * s.n), seed + 1);
      const std::vector<float> c0 = test::random_vec<float>(size_t(s.m * s.n), seed + 2);
      const std::vector<float> want = emulated(s, blk.kc, alpha, a, b, beta, c0);
      const std::vector<bf16> at = transposed(a, s.m, s.k), bt = transposed(b, s.k, s.n);
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          std::vector<float> c = beta == 0.0f ? std::vector<float>(c0.size(), kNaN) : c0;  // beta 0: never read
          gemm_bf16_using(GemmImpl::kPacked, ta, tb, s.m, s.n, s.k, alpha, (ta ? at : a).data(),
                          (tb ? bt : b).data(), beta, c.data());
          EXPECT_EQ(c, want) << "M=" << s.m << " N=" << s.n << " K=" << s.k << " ta=" << ta << " tb=" << tb
                             << " alpha=" << alpha << " beta=" << beta;
        }
    }
}

// Rows a multiple of 4 KiB apart are packed, not read in place; an odd
// leading dimension takes the element-wise packing: the same bits.
TEST(PackedGemmBf16, SameBitsPackedOrInPlaceAndForOneTwoAndThreeThreads) {
  SKIP_WITHOUT_BF16_TILE();
  const PackedGemmBlocking blk = packed_gemm_bf16_blocking();
  for (const Shape& s : {Shape{17 * blk.mr + 5, blk.nc_whole + 2 * blk.nr + 7, 2 * blk.kc + 10},
                         Shape{3 * blk.mr + 2, blk.nr + 3, 2048}, Shape{70 * blk.mr + 5, 45, 37}}) {
    const std::vector<bf16> a = random_bf16(size_t(s.m * s.k), 5), b = random_bf16(size_t(s.k * s.n), 6);
    const std::vector<float> c0 = test::random_vec<float>(size_t(s.m * s.n), 7);
    const std::vector<float> want = emulated(s, blk.kc, 0.75f, a, b, 0.5f, c0);
    const std::vector<bf16> at = transposed(a, s.m, s.k), bt = transposed(b, s.k, s.n);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int threads : {1, 2, 3}) {
          std::vector<float> c = c0;
          test::with_threads(threads, [&] {
            gemm_bf16_using(GemmImpl::kPacked, ta, tb, s.m, s.n, s.k, 0.75f, (ta ? at : a).data(),
                            (tb ? bt : b).data(), 0.5f, c.data());
            return 0;
          });
          EXPECT_EQ(c, want) << "M=" << s.m << " K=" << s.k << " ta=" << ta << " tb=" << tb << " threads=" << threads;
        }
  }
}

// The weight gradients of layers reading one input share op(B); the
// residual is read inside the GEMM: the bits of separate calls and of copy
// then add, at 1 and 2 threads, one and several column blocks. In the
// default mode (on AMX, oneDNN: one call per set) and in reproducible mode
// (the packed GEMM wherever the CPU has its tile).
TEST(PackedGemmBf16, RowSetsSharingBAndSumsOntoGetTheBitsOfSeparateCalls) {
  SKIP_WITHOUT_BF16_TILE();
  const PackedGemmBlocking blk = packed_gemm_bf16_blocking();
  const std::vector<int64_t> ms{9 * blk.mr + 5, 0, 3 * blk.mr, blk.mr - 1};
  for (const bool reproducible : {false, true})
    for (const int64_t n : {blk.nc_whole, blk.nc_whole + blk.nr + 3})
      for (const int64_t k : {int64_t(37), 2 * blk.kc + 10})
        for (bool ta : {false, true})
          for (int threads : {1, 2}) {
            const std::vector<bf16> bm = random_bf16(size_t(k * n), 19);
            std::vector<std::vector<bf16>> a;
            std::vector<std::vector<float>> alone, shared;
            std::vector<PackedGemmRowsBf16> sets;
            for (size_t i = 0; i < ms.size(); ++i) {
              a.push_back(random_bf16(size_t(ms[i] * k), uint32_t(23 + i)));
              std::vector<float> c = test::random_vec<float>(size_t(ms[i] * n), uint32_t(31 + i));
              if (i % 2 == 0) c.assign(c.size(), kNaN);  // beta 0: never read
              alone.push_back(c);
              shared.push_back(c);
            }
            for (size_t i = 0; i < ms.size(); ++i)
              sets.push_back({ms[i], a[i].data(), i % 2 ? 1.0f : 0.0f, shared[i].data()});
            const std::vector<float> base = test::random_vec<float>(size_t(ms[0] * n), 41);
            std::vector<float> copied = base, onto(base.size(), kNaN);
            test::with_threads(threads, [&] {
              const ScopedThreadInvariantGemm mode(reproducible);
              if (reproducible && active_gemm_impl() == GemmImpl::kPacked) {
                EXPECT_TRUE(bf16_gemm_is_packed());
              }
              for (size_t i = 0; i < ms.size(); ++i)
                gemm_bf16(ta, false, ms[i], n, k, 0.75f, a[i].data(), bm.data(), sets[i].beta, alone[i].data());
              gemm_shared_b(ta, false, sets.data(), int(sets.size()), n, k, 0.75f, bm.data());
              gemm_bf16(ta, false, ms[0], n, k, 0.75f, a[0].data(), bm.data(), 1.0f, copied.data());
              gemm_onto(ta, false, ms[0], n, k, 0.75f, a[0].data(), bm.data(), base.data(), onto.data());
              return 0;
            });
            const std::string where = " N=" + std::to_string(n) + " K=" + std::to_string(k) + " ta=" +
                                      std::to_string(ta) + " threads=" + std::to_string(threads) +
                                      " reproducible=" + std::to_string(reproducible);
            for (size_t i = 0; i < ms.size(); ++i) EXPECT_EQ(alone[i], shared[i]) << "set " << i << where;
            EXPECT_EQ(copied, onto) << where;
          }
}

// gemm_bf16 runs the packed GEMM unless the CPU has AMX (oneDNN's kernels
// use it; reproducible mode keeps the packed one there too) or
// MESHTRAIN_GEMM turns the packed GEMMs off; the description, which
// checkpoints record, says so, the same in either mode.
TEST(PackedGemmBf16, GemmBf16RunsItWhereChosenAndTheDescriptionSaysSo) {
  SKIP_WITHOUT_BF16_TILE();
  const bool amx = __builtin_cpu_supports("amx-bf16");
  EXPECT_EQ(bf16_gemm_is_packed(), !amx && active_gemm_impl() == GemmImpl::kPacked);
  const std::string d = gemm_description();
  EXPECT_EQ(d.find("bf16 packed kc " + std::to_string(packed_gemm_bf16_blocking().kc)) != std::string::npos,
            bf16_gemm_is_packed())
      << d;
  EXPECT_EQ(std::string(bf16_gemm_name()), bf16_gemm_is_packed() ? "packed" : "onednn");
  {
    const ScopedThreadInvariantGemm reproducible(true);
    EXPECT_EQ(bf16_gemm_is_packed(), active_gemm_impl() == GemmImpl::kPacked);
    EXPECT_EQ(gemm_description(), d);
  }
  const Shape s{29, 70, 66};
  const std::vector<bf16> a = random_bf16(size_t(s.m * s.k), 3), b = random_bf16(size_t(s.k * s.n), 4);
  std::vector<float> via(size_t(s.m * s.n)), direct(via.size());
  gemm_bf16(false, true, s.m, s.n, s.k, 1.0f, a.data(), b.data(), 0.0f, via.data());
  gemm_bf16_using(bf16_gemm_is_packed() ? GemmImpl::kPacked : GemmImpl::kOnednn, false, true, s.m, s.n, s.k, 1.0f,
                  a.data(), b.data(), 0.0f, direct.data());
  EXPECT_EQ(via, direct);
  {
    ScopedIsa avx2(Isa::kAvx2);  // the tile needs the avx512 level
    EXPECT_FALSE(bf16_gemm_is_packed());
  }
}

}  // namespace
}  // namespace meshtrain::kernels
