#include "meshtrain/kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>

#include "kernel_test_util.h"
#include "support/numeric.h"

namespace meshtrain::kernels {
namespace {

using test::random_vec;

// C = alpha op(A) op(B) + beta C in double, straight from the definition.
std::vector<double> naive(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                          const std::vector<double>& A, const std::vector<double>& B, double beta,
                          std::vector<double> C) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += (ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
      C[i * N + j] = alpha * s + (beta == 0 ? 0.0 : beta * C[i * N + j]);
    }
  return C;
}

struct Case {
  int64_t m, n, k;
};
const Case kCases[] = {{1, 1, 1}, {7, 13, 5}, {33, 17, 65}, {64, 128, 96}, {130, 3, 257}};

TEST(Gemm, FloatMatchesNaiveAllTransposesAlphaBeta) {
  for (const Case& c : kCases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (double alpha : {1.0, 0.5})
          for (double beta : {0.0, 1.0, -0.75}) {
            auto A = random_vec(c.m * c.k, 1), B = random_vec(c.k * c.n, 2), C = random_vec(c.m * c.n, 3);
            auto want = naive(ta, tb, c.m, c.n, c.k, alpha, A, B, beta, C);
            auto Af = test::cast_vec<float>(A), Bf = test::cast_vec<float>(B), Cf = test::cast_vec<float>(C);
            gemm<float>(ta, tb, c.m, c.n, c.k, float(alpha), Af.data(), Bf.data(), float(beta), Cf.data());
            const double err = testing::max_abs_diff(test::cast_vec<double>(Cf), want);
            EXPECT_LT(err, 2e-6 * std::sqrt(double(c.k)) + 1e-6)
                << "M=" << c.m << " N=" << c.n << " K=" << c.k << " ta=" << ta << " tb=" << tb << " alpha=" << alpha
                << " beta=" << beta;
          }
}

TEST(Gemm, DoubleMatchesNaive) {
  for (const Case& c : kCases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (double beta : {0.0, 1.0, 0.3}) {
          auto A = random_vec(c.m * c.k, 4), B = random_vec(c.k * c.n, 5), C = random_vec(c.m * c.n, 6);
          auto want = naive(ta, tb, c.m, c.n, c.k, 1.5, A, B, beta, C);
          gemm<double>(ta, tb, c.m, c.n, c.k, 1.5, A.data(), B.data(), beta, C.data());
          EXPECT_LT(testing::max_abs_diff(C, want), 1e-12);
        }
}

// gemm_bf16 (native where oneDNN has a bf16 matmul, else widened) and the
// widened fallback called directly: the same semantics, so the same bound.
void check_bf16(void (*fn)(bool, bool, int64_t, int64_t, int64_t, float, const bf16*, const bf16*, float, float*)) {
  for (const Case& c : kCases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (double beta : {0.0, 1.0}) {
          auto A = random_vec(c.m * c.k, 7), B = random_vec(c.k * c.n, 8), C = random_vec(c.m * c.n, 9);
          std::vector<bf16> Ab(A.size()), Bb(B.size());
          for (size_t i = 0; i < A.size(); ++i) A[i] = float(Ab[i] = bf16(float(A[i])));
          for (size_t i = 0; i < B.size(); ++i) B[i] = float(Bb[i] = bf16(float(B[i])));
          auto want = naive(ta, tb, c.m, c.n, c.k, 2.0, A, B, beta, C);
          auto Cf = test::cast_vec<float>(C);
          fn(ta, tb, c.m, c.n, c.k, 2.0f, Ab.data(), Bb.data(), float(beta), Cf.data());
          EXPECT_LT(testing::max_abs_diff(test::cast_vec<double>(Cf), want), 4e-6 * std::sqrt(double(c.k)) + 1e-6)
              << "M=" << c.m << " N=" << c.n << " K=" << c.k << " ta=" << ta << " tb=" << tb;
        }
}

TEST(Gemm, Bf16MatchesNaiveOnRoundedInputs) { check_bf16(gemm_bf16); }
TEST(Gemm, Bf16WidenedFallbackMatchesNaiveOnRoundedInputs) { check_bf16(gemm_bf16_widened); }

TEST(Gemm, BetaZeroIgnoresGarbageInC) {
  auto A = test::cast_vec<float>(random_vec(6 * 4, 1)), B = test::cast_vec<float>(random_vec(4 * 5, 2));
  std::vector<float> C(30, std::numeric_limits<float>::quiet_NaN());
  gemm<float>(false, false, 6, 5, 4, 1.0f, A.data(), B.data(), 0.0f, C.data());
  for (float v : C) EXPECT_TRUE(std::isfinite(v));
  std::vector<double> Cd(30, std::numeric_limits<double>::quiet_NaN());
  auto Ad = test::cast_vec<double>(A), Bd = test::cast_vec<double>(B);
  gemm<double>(false, false, 6, 5, 4, 1.0, Ad.data(), Bd.data(), 0.0, Cd.data());
  for (double v : Cd) EXPECT_TRUE(std::isfinite(v));
}

TEST(Gemm, EmptyKScalesC) {
  std::vector<float> C = {1, 2, 3, 4};
  gemm<float>(false, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.5f, C.data());
  EXPECT_EQ(C, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  gemm<float>(false, false, 2, 2, 0, 1.0f, nullptr, nullptr, 0.0f, C.data());
  EXPECT_EQ(C, (std::vector<float>{0, 0, 0, 0}));
}

TEST(Gemm, SameResultForOneAndTwoThreadsAndCachedRepeat) {
  const int64_t M = 96, N = 80, K = 200;
  auto A = test::cast_vec<float>(random_vec(M * K, 1)), B = test::cast_vec<float>(random_vec(N * K, 2));
  auto want = naive(false, true, M, N, K, 1.0, test::cast_vec<double>(A), test::cast_vec<double>(B), 0.0,
                    std::vector<double>(M * N));
  for (int threads : {1, 2, 1, 2}) {
    std::vector<float> C(M * N);
    test::with_threads(threads, [&] {
      gemm<float>(false, true, M, N, K, 1.0f, A.data(), B.data(), 0.0f, C.data());
      return 0;
    });
    EXPECT_LT(testing::max_abs_diff(test::cast_vec<double>(C), want), 1e-4) << threads << " threads";
  }
}

// Reproducible mode's GEMM: the same bits for every team size and every
// transpose, for both f32 GEMMs (the packed one by construction, oneDNN's in
// fixed row blocks: the AVX2 rerun of this suite is where oneDNN's own GEMM
// would differ) and bf16, and within rounding of the plain GEMM.
TEST(Gemm, ThreadInvariantModeGivesTheSameBitsForAnyTeamSize) {
  const int64_t M = 600, N = 96, K = 1000;  // K long enough to be split; M over two row blocks and not a multiple
  auto A = test::cast_vec<float>(random_vec(M * K, 21)), B = test::cast_vec<float>(random_vec(N * K, 22));
  std::vector<bf16> Ab(A.size()), Bb(B.size());
  for (size_t i = 0; i < A.size(); ++i) Ab[i] = bf16(A[i]);
  for (size_t i = 0; i < B.size(); ++i) Bb[i] = bf16(B[i]);
  for (GemmImpl impl : {GemmImpl::kPacked, GemmImpl::kOnednn})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        std::vector<std::vector<float>> runs;
        for (int threads : {1, 2, 3}) {
          std::vector<float> C(M * N, 0.5f), Cb(M * N, 0.5f);
          test::with_threads(threads, [&] {
            set_thread_invariant_gemm(true);
            gemm_f32_using(impl, ta, tb, M, N, K, 0.5f, A.data(), B.data(), 1.0f, C.data());
            gemm_bf16(ta, tb, M, N, K, 1.0f, Ab.data(), Bb.data(), 0.0f, Cb.data());
            set_thread_invariant_gemm(false);
            return 0;
          });
          C.insert(C.end(), Cb.begin(), Cb.end());
          runs.push_back(std::move(C));
        }
        const std::string what = std::string(gemm_impl_name(impl)) + " ta " + std::to_string(ta) + " tb " +
                                 std::to_string(tb);
        EXPECT_EQ(runs[0], runs[1]) << what;
        EXPECT_EQ(runs[0], runs[2]) << what;
        std::vector<float> plain(M * N, 0.5f);
        gemm_f32_using(impl, ta, tb, M, N, K, 0.5f, A.data(), B.data(), 1.0f, plain.data());
        for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(runs[0][size_t(i)], plain[size_t(i)], 1e-3) << what << " " << i;
      }
  EXPECT_FALSE(thread_invariant_gemm());
}

// The scratchpad is reused: once a shape has run, further calls must not
// fault in fresh pages (each first touch costs ~15 us). One compute thread,
// so the GEMM runs on this thread and its faults are counted here, inside
// the calls only (oneDNN's AVX2 f32 GEMM mallocs its packing buffers per
// call; glibc's heap takes a few rounds to settle under them).
TEST(Gemm, RepeatedCallsDoNotFaultFreshPages) {
  auto faults = [] {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    return u.ru_minflt;
  };
  const int64_t M = 512, N = 1024, K = 512;
  auto A = test::cast_vec<float>(random_vec(M * K, 1)), B = test::cast_vec<float>(random_vec(N * K, 2));
  std::vector<float> C(M * N);
  std::vector<bf16> Ab(A.size()), Bb(B.size());
  auto each_gemm = [&](bool ta, long* total) {
    auto counted = [&](auto&& call) {
      const long before = faults();
      call();
      if (total) *total += faults() - before;
    };
    counted([&] { gemm<float>(ta, true, M, N, K, 1.0f, A.data(), B.data(), 1.0f, C.data()); });
    counted([&] { gemm_f32_using(GemmImpl::kOnednn, ta, true, M, N, K, 1.0f, A.data(), B.data(), 1.0f, C.data()); });
    counted([&] { gemm_bf16(ta, true, M, N, K, 1.0f, Ab.data(), Bb.data(), 1.0f, C.data()); });
    counted([&] { gemm_bf16_widened(ta, true, M, N, K, 1.0f, Ab.data(), Bb.data(), 1.0f, C.data()); });
  };
  const long in_calls = test::with_threads(1, [&] {
    // Warm-up: the primitives, our scratchpad, and glibc's heap, which takes
    // a few rounds to settle under oneDNN's per-call packing buffers.
    for (int rep = 0; rep < 10; ++rep)
      for (bool ta : {false, true}) each_gemm(ta, nullptr);
    long total = 0;
    for (int rep = 0; rep < 10; ++rep)
      for (bool ta : {false, true}) each_gemm(ta, &total);
    return total;
  });
  EXPECT_LT(in_calls, 8);
}

// Ranks of the threads backend call gemm concurrently from their own threads.
TEST(Gemm, ConcurrentCallersFromSeveralThreads) {
  auto run = [](int64_t M, int64_t N, int64_t K, double* err) {
    auto A = random_vec(M * K, 11), B = random_vec(K * N, 12);
    auto want = naive(false, false, M, N, K, 1.0, A, B, 0.0, std::vector<double>(M * N));
    auto Af = test::cast_vec<float>(A), Bf = test::cast_vec<float>(B);
    std::vector<float> C(M * N);
    *err = 0;
    for (int rep = 0; rep < 20; ++rep) {
      omp_set_num_threads(1);
      gemm<float>(false, false, M, N, K, 1.0f, Af.data(), Bf.data(), 0.0f, C.data());
      *err = std::max(*err, testing::max_abs_diff(test::cast_vec<double>(C), want));
    }
  };
  double e1 = 1, e2 = 1;
  std::thread t1(run, 50, 40, 30, &e1), t2(run, 31, 77, 64, &e2);
  t1.join();
  t2.join();
  EXPECT_LT(e1, 1e-4);
  EXPECT_LT(e2, 1e-4);
}

// The linear-layer recipe from gemm.h, checked by finite differences:
//   y = x W^T:  gemm(false, true,  n,   out, in,  1, x,  W, 0, y)
//   dx = dy W:  gemm(false, false, n,   in,  out, 1, dy, W, 0, dx)
//   dW += dy^T x: gemm(true, false, out, in,  n,   1, dy, x, 1, dW)
TEST(Gemm, LinearLayerGradientsByFiniteDifferences) {
  const int64_t n = 3, in = 4, out = 5;
  auto x = random_vec(n * in, 1), W = random_vec(out * in, 2), c = random_vec(n * out, 3);
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww) {
    std::vector<double> y(n * out);
    gemm<double>(false, true, n, out, in, 1.0, xx.data(), ww.data(), 0.0, y.data());
    return test::dot(y, c);
  };
  std::vector<double> dx(n * in), dW(out * in, 0.25);  // dW accumulates onto 0.25
  gemm<double>(false, false, n, in, out, 1.0, c.data(), W.data(), 0.0, dx.data());
  gemm<double>(true, false, out, in, n, 1.0, c.data(), x.data(), 1.0, dW.data());
  for (auto& v : dW) v -= 0.25;
  auto fd_x = testing::finite_difference([&](const std::vector<double>& v) { return loss(v, W); }, x);
  auto fd_w = testing::finite_difference([&](const std::vector<double>& v) { return loss(x, v); }, W);
  EXPECT_LT(testing::max_rel_diff(dx, fd_x, 1e-2), 1e-6);
  EXPECT_LT(testing::max_rel_diff(dW, fd_w, 1e-2), 1e-6);
}

}  // namespace
}  // namespace meshtrain::kernels
