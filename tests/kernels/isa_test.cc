// Run-time ISA selection (isa.h) and agreement between the levels: every
// float kernel at every runnable level against the scalar level.
#include "meshtrain/kernels/cpu/isa.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "kernel_test_util.h"
#include "meshtrain/core/error.h"
#include "meshtrain/kernels/cpu/activation.h"
#include "meshtrain/kernels/cpu/adamw.h"
#include "meshtrain/kernels/cpu/cross_entropy.h"
#include "meshtrain/kernels/cpu/elementwise.h"
#include "meshtrain/kernels/cpu/embedding.h"
#include "meshtrain/kernels/cpu/norm.h"
#include "meshtrain/kernels/cpu/rope.h"
#include "support/numeric.h"

namespace meshtrain::kernels {
namespace {

TEST(Isa, NamesRoundTripAndUnknownNamesAreRejected) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) EXPECT_EQ(parse_isa(isa_name(isa)), isa);
  EXPECT_FALSE(parse_isa("avx3").has_value());
  EXPECT_FALSE(parse_isa("AVX2").has_value());
}

TEST(Isa, RequestIsClampedToTheCpuWithANote) {
  std::string note;
  EXPECT_EQ(resolve_isa_request(nullptr, Isa::kAvx2, &note), Isa::kAvx2);
  EXPECT_EQ(resolve_isa_request("", Isa::kAvx512, &note), Isa::kAvx512);
  EXPECT_EQ(resolve_isa_request("scalar", Isa::kAvx512, &note), Isa::kScalar);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(resolve_isa_request("avx512", Isa::kAvx2, &note), Isa::kAvx2);
  EXPECT_NE(note.find("MESHTRAIN_ISA=avx512 asks for more than this CPU supports; using avx2"), std::string::npos)
      << note;
}

TEST(Isa, UnknownRequestNamesTheVariableAndTheChoices) {
  try {
    resolve_isa_request("sse9", Isa::kAvx2, nullptr);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("MESHTRAIN_ISA=sse9 is not a kernel ISA level: use avx512, avx2 or scalar"),
              std::string::npos)
        << e.what();
  }
}

TEST(Isa, ActiveNeverExceedsDetectedAndScopedLevelsClampAndRestore) {
  const Isa before = active_isa();
  EXPECT_LE(int(before), int(detected_isa()));
  {
    ScopedIsa s(Isa::kScalar);
    EXPECT_EQ(active_isa(), Isa::kScalar);
    EXPECT_NE(isa_description().find("scalar (cpu: "), std::string::npos) << isa_description();
    ScopedIsa top(Isa::kAvx512);  // clamped to what the CPU has
    EXPECT_EQ(top.isa(), detected_isa());
    EXPECT_EQ(active_isa(), detected_isa());
  }
  EXPECT_EQ(active_isa(), before);
}

// Runs `fn` (which fills a vector<float>) at `isa`.
template <typename F>
std::vector<float> at_level(Isa isa, F&& fn) {
  ScopedIsa scope(isa);
  return fn();
}

std::vector<float> rand_f(size_t n, uint32_t seed, double lo = -3, double hi = 3) {
  return test::cast_vec<float>(test::random_vec(n, seed, lo, hi));
}

// Each entry: a name and a function computing one kernel's outputs at the
// active level. Sizes are ragged (not multiples of 8 or 16) and above the
// parallel threshold where it matters, so vector tails and chunking show.
struct KernelRun {
  const char* name;
  std::function<std::vector<float>()> fn;
  double tol;  // relative, with floor 1: levels differ only in rounding
};

std::vector<KernelRun> kernel_runs() {
  const int64_t n = 40003;
  const auto a = rand_f(n, 1), b = rand_f(n, 2), c = rand_f(n, 3);
  std::vector<KernelRun> runs;
  runs.push_back({"swiglu", [=] {
                    std::vector<float> out(n), dg(n), du(n);
                    swiglu_forward(a.data(), b.data(), n, out.data());
                    swiglu_backward(a.data(), b.data(), c.data(), n, dg.data(), du.data());
                    out.insert(out.end(), dg.begin(), dg.end());
                    out.insert(out.end(), du.begin(), du.end());
                    return out;
                  }, 1e-5});
  runs.push_back({"gelu", [=] {
                    std::vector<float> y(n), dx(n);
                    gelu_forward(a.data(), n, y.data());
                    gelu_backward(a.data(), b.data(), n, dx.data());
                    y.insert(y.end(), dx.begin(), dx.end());
                    return y;
                  }, 1e-5});
  runs.push_back({"adamw", [=] {
                    std::vector<float> p = a, m(n, 0.01f), v(n, 0.02f);
                    AdamWHyper h;
                    h.weight_decay = 0.1;
                    for (h.step = 1; h.step <= 3; ++h.step) adamw_step(p.data(), b.data(), m.data(), v.data(), n, h, 0.5f);
                    return p;
                  }, 1e-6});
  runs.push_back({"cross_entropy", [=] {
                    const int64_t rows = 37, V = 1001;
                    auto logits = rand_f(rows * V, 4, -8, 8);
                    std::vector<int32_t> t(rows);
                    for (int64_t i = 0; i < rows; ++i) t[i] = i % 9 == 0 ? -1 : int32_t((i * 97) % V);
                    const auto r = cross_entropy_forward_backward(logits.data(), t.data(), rows, V, 0.25f, logits.data());
                    logits.push_back(float(r.loss_sum));
                    return logits;
                  }, 1e-5});
  runs.push_back({"norms", [=] {
                    const int64_t rows = 83, d = 481;  // rows * d <= n
                    std::vector<float> y(rows * d), rstd(rows), mean(rows), dx(rows * d, 0.f), dw(d, 0.f), db(d, 0.f);
                    rmsnorm_forward(a.data(), b.data(), rows, d, 1e-5f, y.data(), rstd.data());
                    rmsnorm_backward(a.data(), b.data(), rstd.data(), c.data(), rows, d, dx.data(), dw.data());
                    layernorm_forward(a.data(), b.data(), c.data(), rows, d, 1e-5f, y.data(), mean.data(), rstd.data());
                    layernorm_backward(a.data(), b.data(), mean.data(), rstd.data(), c.data(), rows, d, dx.data(),
                                       dw.data(), db.data());
                    for (auto* v : {&dx, &dw, &db}) y.insert(y.end(), v->begin(), v->end());
                    return y;
                  }, 1e-4});
  runs.push_back({"rope", [=] {
                    const int64_t tokens = 301, heads = 3, hd = 40;
                    const RopeTable table = make_rope_table(512, hd, 10000.0);
                    std::vector<int32_t> pos(tokens);
                    for (int64_t i = 0; i < tokens; ++i) pos[i] = int32_t((i * 7) % 512);
                    std::vector<float> x(a.begin(), a.begin() + tokens * heads * hd);
                    rope_apply(x.data(), pos.data(), tokens, heads, hd, table, false);
                    return x;
                  }, 1e-6});
  runs.push_back({"elementwise", [=] {
                    std::vector<float> y = a;
                    add_inplace(y.data(), b.data(), n);
                    axpy(y.data(), 0.3f, c.data(), n);
                    scale_inplace(y.data(), 1.7f, n);
                    y.push_back(float(sum_squares(y.data(), n)));
                    std::vector<uint16_t> h(n);
                    convert_f32_to_bf16(y.data(), h.data(), n);
                    std::vector<float> back(n);
                    convert_bf16_to_f32(h.data(), back.data(), n);
                    y.insert(y.end(), back.begin(), back.end());
                    return y;
                  }, 1e-5});
  runs.push_back({"embedding", [=] {
                    const int64_t vocab = 50, dim = 37, tokens = 999;
                    std::vector<int32_t> ids(tokens);
                    for (int64_t i = 0; i < tokens; ++i) ids[i] = int32_t((i * 13) % vocab);
                    std::vector<float> out(tokens * dim), dtable(vocab * dim, 0.f);
                    embedding_forward(ids.data(), tokens, a.data(), vocab, dim, out.data());
                    embedding_backward(ids.data(), tokens, b.data(), vocab, dim, dtable.data());
                    out.insert(out.end(), dtable.begin(), dtable.end());
                    return out;
                  }, 1e-5});
  return runs;
}

TEST(Isa, EveryLevelAgreesWithScalarAndIgnoresThreadCount) {
  for (const KernelRun& k : kernel_runs()) {
    const auto want = test::cast_vec<double>(at_level(Isa::kScalar, k.fn));
    for (Isa isa : test::runnable_levels()) {
      SCOPED_TRACE(::testing::Message() << k.name << " at " << isa_name(isa));
      const auto one = test::with_threads(1, [&] { return at_level(isa, k.fn); });
      const auto two = test::with_threads(2, [&] { return at_level(isa, k.fn); });
      EXPECT_EQ(one, two) << "thread count changed the result";
      EXPECT_LT(testing::max_rel_diff(test::cast_vec<double>(two), want, 1.0), k.tol);
    }
  }
}

}  // namespace
}  // namespace meshtrain::kernels
