// Covers src/meshtrain/kernels/cpu/per_isa/packed_gemm.cc,
// per_isa/packed_gemm_tiles.h, cpu/packed_gemm.h and cpu/gemm_choice.cc:
// the packed f32 GEMM at every ISA level against a naive f64 loop (odd
// shapes, tails in every dimension, sizes straddling the blocks, all four
// transposes, alpha, beta, beta = 0 over NaN), its bitwise invariance to
// the thread count and to how the operands are stored, no fresh page
// faults on repeated calls, row sets sharing op(B) getting the bits of
// separate calls, a sum onto another matrix getting those of copy then
// add, and which f32 GEMM gemm<float> runs (MESHTRAIN_GEMM).
#include "meshtrain/kernels/cpu/packed_gemm.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "meshtrain/core/compute_team.h"
#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/gemm.h"

namespace meshtrain::kernels {
namespace {

struct Shape {
  int64_t m, n, k;
};

// op(A) [M,K] and op(B) [K,N] stored as the transposes say.
struct Operands {
  std::vector<float> a, b, c;
};
Operands operands(const Shape& s, uint32_t seed) {
  return {test::random_vec<float>(size_t(s.m * s.k), seed), test::random_vec<float>(size_t(s.k * s.n), seed + 1),
          test::random_vec<float>(size_t(s.m * s.n), seed + 2)};
}

// Worst |error| over C against the f64 sum, relative to the sum of |terms|
// (the scale of rounding error), so one bound serves every K.
double relative_error(bool ta, bool tb, const Shape& s, double alpha, const Operands& in, double beta,
                      const std::vector<float>& got) {
  double worst = 0;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0, scale = 0;
      for (int64_t k = 0; k < s.k; ++k) {
        const double t =
            double(ta ? in.a[k * s.m + i] : in.a[i * s.k + k]) * double(tb ? in.b[j * s.k + k] : in.b[k * s.n + j]);
        sum += t;
        scale += std::abs(t);
      }
      const double c = beta == 0 ? 0.0 : beta * double(in.c[i * s.n + j]);
      const double want = alpha * sum + c;
      const double e = std::abs(double(got[i * s.n + j]) - want) / (std::abs(alpha) * scale + std::abs(c) + 1e-30);
      if (!(e <= worst)) worst = e;  // NaN included
    }
  return worst;
}

// Shapes around the active level's blocking: tails of the register tile in
// M and N, K = 1, primes, sizes just past kc and nc_whole (several column
// blocks), and many strips of rows in one column block (packed a chunk of
// strips at a time).
std::vector<Shape> shapes_for(const PackedGemmBlocking& b) {
  return {{1, 1, 1},
          {1, 7, 3},
          {5, 1, 9},
          {b.mr, b.nr, 1},
          {b.mr + 1, b.nr - 1, 17},
          {2 * b.mr - 1, 2 * b.nr + 1, 31},
          {37, 41, 43},
          {5 * b.mr + 1, b.nr + 3, b.kc + 1},
          {b.mr + 2, 3 * b.nr - 5, 2 * b.kc + 7},
          {3, b.nc_whole + b.nr + 3, 19},
          {40 * b.mr + 7, b.nr + 1, 33}};
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(PackedGemm, MatchesNaiveF64AtEveryLevelForOddShapesTransposesAlphaBeta) {
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    uint32_t seed = 1;
    for (const Shape& s : shapes_for(packed_gemm_blocking()))
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, {-0.5f, 1.0f}, {2.0f, 0.25f}}) {
            const Operands in = operands(s, seed += 3);
            std::vector<float> c = in.c;
            if (beta == 0.0f) c.assign(c.size(), kNaN);  // never read
            packed_gemm_f32(ta, tb, s.m, s.n, s.k, alpha, in.a.data(), in.b.data(), beta, c.data());
            // f32 accumulation over at most ~500 terms: a few hundred ulps of
            // the sum of |terms| at worst; the bound is 1e-5 (~84 ulps).
            EXPECT_LT(relative_error(ta, tb, s, alpha, in, beta, c), 1e-5)
                << isa_name(level) << " M=" << s.m << " N=" << s.n << " K=" << s.k << " ta=" << ta << " tb=" << tb
                << " alpha=" << alpha << " beta=" << beta;
          }
  }
}

// NaN in C with beta = 0 must not leak into the result, not even through
// the partial tiles at the edges (they run on a copy of C).
TEST(PackedGemm, BetaZeroNeverReadsC) {
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    const PackedGemmBlocking b = packed_gemm_blocking();
    const Shape s{2 * b.mr + 1, b.nr + 5, b.kc + 3};
    const Operands in = operands(s, 7);
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        std::vector<float> c(size_t(s.m * s.n), kNaN);
        packed_gemm_f32(ta, tb, s.m, s.n, s.k, 1.0f, in.a.data(), in.b.data(), 0.0f, c.data());
        for (float v : c) ASSERT_TRUE(std::isfinite(v)) << isa_name(level) << " ta=" << ta << " tb=" << tb;
      }
  }
}

// Rows split by thread, each element summed over the same k blocks in the
// same order: the same bits for every team size, each transpose, with a K
// that takes several k blocks and beta = 1 (the later blocks add to C).
TEST(PackedGemm, SameBitsForOneTwoAndThreeThreads) {
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    const PackedGemmBlocking b = packed_gemm_blocking();
    for (const Shape& s :
         {Shape{17 * b.mr + 5, b.nc_whole + 2 * b.nr + 7, 2 * b.kc + 9}, Shape{70 * b.mr + 5, 45, b.kc + 9}}) {
      const Operands in = operands(s, 11);
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          std::vector<std::vector<float>> runs;
          for (int threads : {1, 2, 3}) {
            std::vector<float> c = in.c;
            test::with_threads(threads, [&] {
              packed_gemm_f32(ta, tb, s.m, s.n, s.k, 0.75f, in.a.data(), in.b.data(), 1.0f, c.data());
              return 0;
            });
            runs.push_back(std::move(c));
          }
          EXPECT_EQ(runs[0], runs[1]) << isa_name(level) << " M=" << s.m << " ta=" << ta << " tb=" << tb;
          EXPECT_EQ(runs[0], runs[2]) << isa_name(level) << " M=" << s.m << " ta=" << ta << " tb=" << tb;
        }
    }
  }
}

// Pieces taken by whoever is running: the same bits when the caller takes
// every piece of a 3-thread team's split (the others held, as if the OS
// never ran them) as when the team shares them, and as with one thread.
TEST(PackedGemm, SameBitsWhicheverThreadTakesWhichPiece) {
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    const PackedGemmBlocking b = packed_gemm_blocking();
    // One column block (pieces pack their strips) and several (op(A) packed
    // once per k block for all of them).
    for (const Shape& s : {Shape{40 * b.mr + 5, 3 * b.nr + 7, 2 * b.kc + 9},
                           Shape{17 * b.mr + 5, b.nc_whole + 2 * b.nr + 7, b.kc + 9}}) {
      const Operands in = operands(s, 29);
      for (bool ta : {false, true}) {
        auto run = [&](int threads, bool hold) {
          std::vector<float> c = in.c;
          test::with_threads(threads, [&] {
            hold_team_workers_for_testing(hold);
            packed_gemm_f32(ta, false, s.m, s.n, s.k, 0.75f, in.a.data(), in.b.data(), 1.0f, c.data());
            hold_team_workers_for_testing(false);
            return 0;
          });
          return c;
        };
        const std::vector<float> one = run(1, false);
        EXPECT_EQ(one, run(3, true)) << isa_name(level) << " M=" << s.m << " N=" << s.n << " ta=" << ta;
        EXPECT_EQ(one, run(3, false)) << isa_name(level) << " M=" << s.m << " N=" << s.n << " ta=" << ta;
      }
    }
  }
}

// op(A) and op(B) give the same bits whichever way they are stored: a
// row-major op(A) is read in place by the tiles, a transposed one is
// packed, and both must sum each element over the same k in the same order
// (checkpoint digests and the reproducibility notes rely on it).
std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = x[i * cols + j];
  return t;
}

TEST(PackedGemm, SameBitsWhicheverWayTheOperandsAreStored) {
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    const PackedGemmBlocking b = packed_gemm_blocking();
    // Several column blocks (a row-major op(A) read in place, a transposed
    // one packed once per k block), the same with rows 4 KiB apart (packed
    // either way), one column block over several k blocks and over one (in
    // place or packed a chunk at a time), and fewer rows than a strip.
    for (const Shape& s : {Shape{17 * b.mr + 5, b.nc_whole + 2 * b.nr + 7, 2 * b.kc + 9},
                           Shape{3 * b.mr + 2, b.nc_whole + b.nr + 3, 1024},
                           Shape{5 * b.mr + 3, b.nr + 3, 2 * b.kc + 7}, Shape{70 * b.mr + 5, 45, 37},
                           Shape{b.mr - 1, b.nr, b.kc + 1}}) {
      const Operands in = operands(s, 13);  // op(A) [M,K] and op(B) [K,N], row-major
      const std::vector<float> at = transposed(in.a, s.m, s.k), bt = transposed(in.b, s.k, s.n);
      std::vector<std::vector<float>> runs;
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          std::vector<float> c = in.c;
          packed_gemm_f32(ta, tb, s.m, s.n, s.k, 0.75f, (ta ? at : in.a).data(), (tb ? bt : in.b).data(), 0.5f,
                          c.data());
          runs.push_back(std::move(c));
        }
      for (size_t i = 1; i < runs.size(); ++i)
        EXPECT_EQ(runs[0], runs[i]) << isa_name(level) << " M=" << s.m << " transposes " << i;
    }
  }
}

// Row sets sharing op(B) (the weight gradients of layers that read one
// input): each C_i gets the bits packed_gemm_f32 gives it alone, at 1 and 2
// threads, in one column block (op(B) packed once for all sets) and in
// several (once for all sets read in place, the packed ones one by one),
// each transpose, with a partial strip, an empty set, beta 0 over NaN and
// beta 1 over several k blocks.
TEST(PackedGemm, RowSetsSharingBGetTheBitsOfSeparateCalls) {
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    const PackedGemmBlocking b = packed_gemm_blocking();
    const std::vector<int64_t> ms{9 * b.mr + 5, 0, 3 * b.mr, b.mr - 1};
    for (const int64_t n : {b.nc_whole, b.nc_whole + b.nr + 3})
      for (const int64_t k : {int64_t(37), 2 * b.kc + 9})
        for (bool ta : {false, true})
          for (bool tb : {false, true})
            for (int threads : {1, 2}) {
              const std::vector<float> bm = test::random_vec<float>(size_t(k * n), 19);
              std::vector<std::vector<float>> a, alone, shared;
              std::vector<PackedGemmRows> sets;
              for (size_t i = 0; i < ms.size(); ++i) {
                a.push_back(test::random_vec<float>(size_t(ms[i] * k), uint32_t(23 + i)));
                const float beta = i % 2 ? 1.0f : 0.0f;
                std::vector<float> c = test::random_vec<float>(size_t(ms[i] * n), uint32_t(31 + i));
                if (beta == 0.0f) c.assign(c.size(), kNaN);  // never read
                alone.push_back(c);
                shared.push_back(c);
              }
              for (size_t i = 0; i < ms.size(); ++i)
                sets.push_back({ms[i], a[i].data(), i % 2 ? 1.0f : 0.0f, shared[i].data()});
              test::with_threads(threads, [&] {
                for (size_t i = 0; i < ms.size(); ++i)
                  if (ms[i] > 0)
                    packed_gemm_f32(ta, tb, ms[i], n, k, 0.75f, a[i].data(), bm.data(), sets[i].beta,
                                    alone[i].data());
                packed_gemm_f32_rows(ta, tb, sets.data(), int(sets.size()), n, k, 0.75f, bm.data());
                return 0;
              });
              for (size_t i = 0; i < ms.size(); ++i)
                EXPECT_EQ(alone[i], shared[i]) << isa_name(level) << " set " << i << " N=" << n << " K=" << k
                                               << " ta=" << ta << " tb=" << tb << " threads=" << threads;
            }
  }
}

// C = alpha op(A) op(B) + C_in with C_in apart (the residual added inside
// the GEMM): the bits of copying C_in into C and adding with beta 1, C
// never read (NaN), at 1 and 2 threads, one and several column blocks, one
// and several k blocks, edge tiles; gemm_onto likewise through the
// active implementation.
TEST(PackedGemm, SumOntoAnotherMatrixGetsTheBitsOfCopyThenAdd) {
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    const PackedGemmBlocking b = packed_gemm_blocking();
    for (const Shape& s : {Shape{9 * b.mr + 5, b.nr + 3, 37}, Shape{2 * b.mr + 1, b.nc_whole + b.nr + 3, 2 * b.kc + 9}})
      for (bool ta : {false, true})
        for (int threads : {1, 2}) {
          const Operands in = operands(s, 41);
          std::vector<float> copied = in.c, onto(in.c.size(), kNaN), reference = in.c, via_gemm(in.c.size(), kNaN);
          const PackedGemmRows rows{s.m, in.a.data(), 1.0f, onto.data(), in.c.data()};
          test::with_threads(threads, [&] {
            packed_gemm_f32(ta, false, s.m, s.n, s.k, 0.75f, in.a.data(), in.b.data(), 1.0f, copied.data());
            packed_gemm_f32_rows(ta, false, &rows, 1, s.n, s.k, 0.75f, in.b.data());
            gemm<float>(ta, false, s.m, s.n, s.k, 0.75f, in.a.data(), in.b.data(), 1.0f, reference.data());
            gemm_onto(ta, false, s.m, s.n, s.k, 0.75f, in.a.data(), in.b.data(), in.c.data(), via_gemm.data());
            return 0;
          });
          EXPECT_EQ(copied, onto) << isa_name(level) << " M=" << s.m << " N=" << s.n << " ta=" << ta
                                  << " t=" << threads;
          EXPECT_EQ(reference, via_gemm) << isa_name(level) << " M=" << s.m << " ta=" << ta << " t=" << threads;
        }
  }
}

// The pack buffers grow once and are reused: after a warm-up, repeated
// calls fault in no fresh pages (each first touch costs ~15 us). Counted
// for the whole process, as the team's threads pack and compute too.
TEST(PackedGemm, RepeatedCallsDoNotFaultFreshPages) {
  auto faults = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
  };
  const Shape s{512, 1024, 700};
  const Operands in = operands(s, 13);
  std::vector<float> c(size_t(s.m * s.n));
  for (int threads : {1, 2}) {
    const long in_calls = test::with_threads(threads, [&] {
      auto all = [&] {
        for (bool ta : {false, true})
          for (bool tb : {false, true})
            packed_gemm_f32(ta, tb, s.m, s.n, s.k, 1.0f, in.a.data(), in.b.data(), 1.0f, c.data());
      };
      all();  // warm-up: the buffers grow to this shape
      const long before = faults();
      for (int rep = 0; rep < 5; ++rep) all();
      return faults() - before;
    });
    EXPECT_LT(in_calls, 8) << threads << " threads";
  }
}

TEST(PackedGemm, DefaultIsPackedOnVectorLevelsAndOnednnAtScalar) {
  EXPECT_EQ(resolve_gemm_request(nullptr, int(Isa::kAvx512)), GemmImpl::kPacked);
  EXPECT_EQ(resolve_gemm_request("", int(Isa::kAvx2)), GemmImpl::kPacked);
  EXPECT_EQ(resolve_gemm_request(nullptr, int(Isa::kScalar)), GemmImpl::kOnednn);
  EXPECT_EQ(resolve_gemm_request("onednn", int(Isa::kAvx512)), GemmImpl::kOnednn);
  EXPECT_EQ(resolve_gemm_request("packed", int(Isa::kScalar)), GemmImpl::kPacked);
  try {
    resolve_gemm_request("blas", int(Isa::kAvx2));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("MESHTRAIN_GEMM=blas"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("packed or onednn"), std::string::npos) << e.what();
  }
}

// gemm<float> runs the active implementation: its bits equal those of the
// implementation called directly, at every level; the description names it.
TEST(PackedGemm, GemmFloatRunsTheActiveImplementation) {
  const Shape s{67, 45, 301};
  const Operands in = operands(s, 17);
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    if (std::getenv("MESHTRAIN_GEMM") == nullptr) {
      EXPECT_EQ(active_gemm_impl(), level == Isa::kScalar ? GemmImpl::kOnednn : GemmImpl::kPacked);
    }
    std::vector<float> via_gemm(size_t(s.m * s.n)), direct(via_gemm.size());
    gemm<float>(false, true, s.m, s.n, s.k, 1.0f, in.a.data(), in.b.data(), 0.0f, via_gemm.data());
    gemm_f32_using(active_gemm_impl(), false, true, s.m, s.n, s.k, 1.0f, in.a.data(), in.b.data(), 0.0f, direct.data());
    EXPECT_EQ(via_gemm, direct) << isa_name(level);
    const std::string d = gemm_description();
    EXPECT_EQ(d.rfind("packed ", 0) == 0, active_gemm_impl() == GemmImpl::kPacked) << d;
    EXPECT_NE(d.find(gemm_library_version()), std::string::npos) << d;
  }
}

}  // namespace
}  // namespace meshtrain::kernels
