// Vocabulary-parallel kernels: on one rank holding the whole vocabulary the
// three cross-entropy passes give the serial kernel's bits; split over
// slices with the reductions done by hand they give the serial loss and the
// matching columns of its gradient; sliced embeddings add up to the lookup.
#include "meshtrain/kernels/cpu/vocab_parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernel_test_util.h"
#include "meshtrain/core/error.h"

namespace meshtrain::kernels {
namespace {

using test::random_vec;

// Slice p of `parts` of V ids, uneven like the placements (first V % parts one larger).
struct Slice {
  int64_t offset, length;
};
Slice slice_of(int64_t V, int parts, int p) {
  const int64_t base = V / parts, extra = V % parts;
  return {p * base + std::min<int64_t>(p, extra), base + (p < extra ? 1 : 0)};
}

// Columns [begin, begin + Vl) of logits [n, V].
template <typename T>
std::vector<T> slice_columns(const std::vector<T>& full, int64_t n, int64_t V, int64_t begin, int64_t Vl) {
  std::vector<T> out(size_t(n * Vl));
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(full.begin() + i * V + begin, Vl, out.begin() + i * Vl);
  return out;
}

TEST(VocabParallelKernels, OneSliceIsTheSerialKernelBitForBit) {
  const int64_t n = 37, V = 259;  // odd sizes: vector tails
  auto x = random_vec<float>(size_t(n * V), 7, -6, 6);
  std::vector<int32_t> targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) targets[size_t(i)] = i % 5 == 3 ? -1 : int32_t((i * 53) % V);
  targets[0] = 0;
  targets[1] = int32_t(V - 1);
  const float scale = 1.0f / 29;
  for (int threads : {1, 2}) {
    test::with_threads(threads, [&] {
      std::vector<float> ref_g(x.size());
      const auto ref = cross_entropy_forward_backward(x.data(), targets.data(), n, V, scale, ref_g.data());
      const auto ref_fwd = cross_entropy_forward(x.data(), targets.data(), n, V);
      std::vector<float> mx(static_cast<size_t>(n)), sum(static_cast<size_t>(n)), tl(static_cast<size_t>(n)), g = x;  // in place, as the head does
      vocab_ce_max(g.data(), targets.data(), n, V, V, mx.data());
      vocab_ce_sums(g.data(), targets.data(), n, V, V, 0, mx.data(), sum.data(), tl.data(), g.data());
      const auto got = vocab_ce_finish(targets.data(), n, V, 0, mx.data(), sum.data(), tl.data(), scale, g.data());
      EXPECT_EQ(got.loss_sum, ref.loss_sum);
      EXPECT_EQ(got.count, ref.count);
      EXPECT_EQ(g, ref_g);
      // Forward only (evaluation): no gradient buffer.
      vocab_ce_sums(x.data(), targets.data(), n, V, V, 0, mx.data(), sum.data(), tl.data(), static_cast<float*>(nullptr));
      const auto fwd = vocab_ce_finish(targets.data(), n, V, 0, mx.data(), sum.data(), tl.data(), 0.0f,
                                       static_cast<float*>(nullptr));
      EXPECT_EQ(fwd.loss_sum, ref_fwd.loss_sum);
      EXPECT_EQ(fwd.count, ref_fwd.count);
    });
  }
}

TEST(VocabParallelKernels, SlicesReducedByHandMatchTheSerialLossAndGradient) {
  const int64_t V = 11, n = 12;
  auto x = random_vec<double>(size_t(n * V), 3, -4, 4);
  for (int parts : {2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << parts << " slices");
    // Targets: masked rows, and the first and last id of every slice.
    std::vector<int32_t> targets(size_t(n), -1);
    int64_t row = 1;
    for (int p = 0; p < parts && row + 1 < n; ++p, row += 2) {
      const auto e = slice_of(V, parts, p);
      targets[size_t(row)] = int32_t(e.offset);
      targets[size_t(row + 1)] = int32_t(e.offset + e.length - 1);
    }
    std::vector<double> ref_g(x.size());
    const auto ref = cross_entropy_forward_backward(x.data(), targets.data(), n, V, 0.25, ref_g.data());
    // Pass 1 on every slice, reduced with max; pass 2, reduced with sum; pass 3.
    std::vector<double> mx(size_t(n), -INFINITY), sum(size_t(n), 0), tl(size_t(n), 0);
    std::vector<std::vector<double>> g(static_cast<size_t>(parts));
    for (int p = 0; p < parts; ++p) {
      const auto e = slice_of(V, parts, p);
      g[size_t(p)] = slice_columns(x, n, V, e.offset, e.length);
      std::vector<double> m(static_cast<size_t>(n));
      vocab_ce_max(g[size_t(p)].data(), targets.data(), n, e.length, V, m.data());
      for (int64_t i = 0; i < n; ++i) mx[size_t(i)] = std::max(mx[size_t(i)], m[size_t(i)]);
    }
    for (int p = 0; p < parts; ++p) {
      const auto e = slice_of(V, parts, p);
      std::vector<double> s(static_cast<size_t>(n)), t(static_cast<size_t>(n));
      vocab_ce_sums(g[size_t(p)].data(), targets.data(), n, e.length, e.length, e.offset, mx.data(), s.data(), t.data(),
                    g[size_t(p)].data());
      for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += s[size_t(i)], tl[size_t(i)] += t[size_t(i)];
    }
    for (int p = 0; p < parts; ++p) {
      const auto e = slice_of(V, parts, p);
      const auto r = vocab_ce_finish(targets.data(), n, e.length, e.offset, mx.data(), sum.data(), tl.data(), 0.25,
                                     g[size_t(p)].data());
      EXPECT_NEAR(r.loss_sum, ref.loss_sum, 1e-12);
      EXPECT_EQ(r.count, ref.count);
      const auto want = slice_columns(ref_g, n, V, e.offset, e.length);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(g[size_t(p)][i], want[i], 1e-15) << "element " << i;
    }
  }
}

TEST(VocabParallelKernels, TargetsOutsideTheVocabularyAreRefused) {
  std::vector<float> x(6, 0.f), mx(2);
  std::vector<int32_t> targets = {1, 9};
  EXPECT_THROW(vocab_ce_max(x.data(), targets.data(), 2, 3, 6, mx.data()), DataError);
}

TEST(VocabParallelKernels, SlicedEmbeddingsAddUpToTheLookup) {
  const int64_t V = 7, d = 3, n = 6;
  const auto table = random_vec<double>(size_t(V * d), 5);
  const std::vector<int32_t> ids = {0, 3, 4, 6, 3, 1};
  std::vector<double> whole(size_t(n * d));
  embedding_slice_forward(ids.data(), n, table.data(), 0, V, V, d, whole.data());
  std::vector<double> sum(size_t(n * d), 0), dtable_sum(size_t(V * d), 0);
  std::vector<double> dout = random_vec<double>(size_t(n * d), 6);
  for (int p = 0; p < 2; ++p) {
    const auto e = slice_of(V, 2, p);  // 4 + 3: ids 3 and 4 on either side
    std::vector<double> out(size_t(n * d), 42.0), dslice(size_t(e.length * d), 0);
    embedding_slice_forward(ids.data(), n, table.data() + e.offset * d, e.offset, e.length, V, d, out.data());
    for (size_t i = 0; i < out.size(); ++i) sum[i] += out[i];
    embedding_slice_backward(ids.data(), n, dout.data(), e.offset, e.length, d, dslice.data());
    std::copy(dslice.begin(), dslice.end(), dtable_sum.begin() + e.offset * d);
  }
  EXPECT_EQ(sum, whole);
  std::vector<double> dtable(size_t(V * d), 0);
  embedding_slice_backward(ids.data(), n, dout.data(), 0, V, d, dtable.data());
  EXPECT_EQ(dtable_sum, dtable);
  std::vector<double> out(size_t(n * d));
  const std::vector<int32_t> bad = {0, 7};
  EXPECT_THROW(embedding_slice_forward(bad.data(), 2, table.data(), 0, 4, V, d, out.data()), DataError);
}

}  // namespace
}  // namespace meshtrain::kernels
