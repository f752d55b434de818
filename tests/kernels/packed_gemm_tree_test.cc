// Covers src/meshtrain/kernels/cpu/per_isa/packed_gemm_tree.cc and the host
// table's gemm_block_tree (cpu_kernel_table.cc; the meta table's answer):
// a sum over blocks of k in the tree has, at every ISA level and for any
// team size, the bits of the separate packed GEMMs on the blocks' columns
// and rows (each leaf's first product written, the later ones added) and
// of the block tree's additions in memory (docs/math.md (M.73)).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernel_test_util.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/cpu/cpu_kernel_table.h"
#include "meshtrain/kernels/cpu/gemm.h"
#include "meshtrain/kernels/cpu/packed_gemm.h"
#include "meshtrain/kernels/meta/meta_kernel_table.h"

namespace meshtrain::kernels {
namespace {

// One term: op(A) [M, K], op(B) [K, N] stored as the transposes say, and
// its blocks of k, one per leaf.
struct Term {
  bool ta, tb;
  int64_t k;
  std::vector<int64_t> offsets, lengths;
  std::vector<float> a, b;
};

Term term(bool ta, bool tb, int64_t M, int64_t N, std::vector<int64_t> lengths, uint32_t seed) {
  Term t{ta, tb, 0, {}, std::move(lengths), {}, {}};
  for (int64_t len : t.lengths) t.offsets.push_back(t.k), t.k += len;
  t.a = test::random_vec<float>(size_t(M * t.k), seed);
  t.b = test::random_vec<float>(size_t(t.k * N), seed + 1);
  return t;
}

// op(A)[:, [off, off + len)] and op(B)[[off, off + len), :], stored as the
// transposes say, contiguous.
std::vector<float> a_block(const Term& t, int64_t M, int64_t off, int64_t len) {
  std::vector<float> out(size_t(M * len));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < len; ++k) {
      if (t.ta) out[size_t(k * M + i)] = t.a[size_t((off + k) * M + i)];
      else out[size_t(i * len + k)] = t.a[size_t(i * t.k + off + k)];
    }
  return out;
}
std::vector<float> b_block(const Term& t, int64_t N, int64_t off, int64_t len) {
  std::vector<float> out(size_t(len * N));
  for (int64_t k = 0; k < len; ++k)
    for (int64_t j = 0; j < N; ++j) {
      if (t.tb) out[size_t(j * len + k)] = t.b[size_t(j * t.k + off + k)];
      else out[size_t(k * N + j)] = t.b[size_t((off + k) * N + j)];
    }
  return out;
}

// The separate GEMMs and the tree, in memory.
std::vector<float> separate(const std::vector<Term>& terms, int64_t M, int64_t N, bool accumulate,
                            const std::vector<float>& c0) {
  std::vector<std::vector<float>> leaves;
  for (size_t j = 0; j < terms[0].lengths.size(); ++j) {
    std::vector<float> leaf(size_t(M * N));
    for (size_t t = 0; t < terms.size(); ++t) {
      const Term& tm = terms[t];
      const int64_t off = tm.offsets[j], len = tm.lengths[j];
      const std::vector<float> a = a_block(tm, M, off, len), b = b_block(tm, N, off, len);
      packed_gemm_f32(tm.ta, tm.tb, M, N, len, 1.0f, a.data(), b.data(), t == 0 ? 0.0f : 1.0f, leaf.data());
    }
    leaves.push_back(std::move(leaf));
  }
  std::vector<float> root = test::block_tree_sum(leaves, 0, leaves.size());
  if (accumulate)
    for (size_t i = 0; i < root.size(); ++i) root[i] = c0[i] + root[i];
  return root;
}

std::vector<float> fused(const std::vector<Term>& terms, int64_t M, int64_t N, bool accumulate,
                         const std::vector<float>& c0) {
  std::vector<PackedGemmTreeTerm> packed;
  for (const Term& t : terms)
    packed.push_back({t.a.data(), t.ta ? M : t.k, t.ta, t.b.data(), t.tb ? t.k : N, t.tb, t.offsets.data(),
                      t.lengths.data()});
  std::vector<float> c = c0;
  packed_gemm_f32_tree(packed.data(), int(packed.size()), int(terms[0].lengths.size()), M, N, accumulate, c.data());
  return c;
}

struct Case {
  const char* what;
  int64_t m, n;
  std::vector<std::vector<int64_t>> lengths;  // per term, per leaf
};

// Shapes around the blocking: tails of the tile in M and N, pieces of rows,
// blocks longer than kc (several chunks), uneven blocks, 1 to 8 leaves
// (non-powers of two folded), several terms of different K, a row length
// 4 KiB apart (op(A) packed, not read in place), several column blocks.
std::vector<Case> cases(const PackedGemmBlocking& b) {
  return {
      {"one leaf", b.mr + 1, b.nr - 1, {{17}}},
      {"8 leaves of k", 5 * b.mr + 7, 2 * b.nr + 3, {{9, 9, 8, 8, 9, 8, 9, 8}}},
      {"blocks past kc", 2 * b.mr + 1, b.nr + 5, {{b.kc + 3, 2 * b.kc + 1, 5, b.kc}}},
      {"3 terms", 9 * b.mr + 5, 3 * b.nr + 1, {{8, 8, 8, 8}, {4, 4, 4, 4}, {4, 5, 4, 4}}},
      {"6 leaves", 7, 2 * b.nr, {{3, 4, 3, 4, 3, 4}}},
      {"7 leaves", 4 * b.mr, b.nr + 1, {{2, 2, 2, 2, 2, 2, 3}}},
      {"rows 4 KiB apart", 2 * b.mr + 3, 40, {{256, 256, 256, 256}}},
      {"column blocks", 6 * b.mr + 1, 300, {{1024, 1024, 1024, 1024}}},
  };
}

TEST(PackedGemmTree, BitsOfTheSeparateGemmsAndTheTreeAtEveryLevelAndTeamSize) {
  for (Isa level : test::runnable_levels()) {
    ScopedIsa scoped(level);
    uint32_t seed = 5;
    for (const Case& cs : cases(packed_gemm_blocking()))
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool accumulate : {false, true}) {
            std::vector<Term> terms;
            for (const auto& lengths : cs.lengths) terms.push_back(term(ta, tb, cs.m, cs.n, lengths, seed += 3));
            const std::vector<float> c0 = test::random_vec<float>(size_t(cs.m * cs.n), seed += 3);
            const std::vector<float> want = separate(terms, cs.m, cs.n, accumulate, c0);
            for (int threads : {1, 2, 3}) {
              const std::vector<float> got =
                  test::with_threads(threads, [&] { return fused(terms, cs.m, cs.n, accumulate, c0); });
              EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
                  << isa_name(level) << " " << cs.what << " ta=" << ta << " tb=" << tb << " accumulate=" << accumulate
                  << " threads=" << threads;
            }
          }
  }
}

// The host's table runs f32 operands under the packed GEMM and declines
// bf16 ones (its caller then runs the GEMMs and the tree); the meta
// table answers as the host does.
TEST(PackedGemmTree, HostTableRunsF32AndMetaAnswersTheSame) {
  std::vector<float> av = test::random_vec<float>(48, 3), bv = test::random_vec<float>(40, 4), cv(30, 0.0f);
  std::vector<uint16_t> half_a(48), half_b(40);
  const Tensor a = Tensor::wrap(av.data(), Shape{6, 8}, DType::F32), b = Tensor::wrap(bv.data(), Shape{8, 5}, DType::F32);
  const Tensor c = Tensor::wrap(cv.data(), Shape{6, 5}, DType::F32);
  const std::vector<KernelTable::BlockTerm> f32{{a, false, b, false, {{0, 4}, {4, 4}}}};
  const std::vector<KernelTable::BlockTerm> half{{Tensor::wrap(half_a.data(), Shape{6, 8}, DType::BF16), false,
                                                  Tensor::wrap(half_b.data(), Shape{8, 5}, DType::BF16), false,
                                                  {{0, 8}}}};
  const bool packed = active_gemm_impl() == GemmImpl::kPacked;
  EXPECT_EQ(packed, meta_kernel_table().gemm_block_tree(f32, false, c));
  EXPECT_FALSE(meta_kernel_table().gemm_block_tree(half, false, c));
  EXPECT_FALSE(cpu_kernel_table().gemm_block_tree(half, false, c));
  EXPECT_EQ(packed, cpu_kernel_table().gemm_block_tree(f32, false, c));
  if (!packed) return;
  // The two blocks' products added: the full product's value to rounding.
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double want = 0;
      for (int64_t k = 0; k < 8; ++k) want += double(av[size_t(i * 8 + k)]) * double(bv[size_t(k * 5 + j)]);
      EXPECT_NEAR(cv[size_t(i * 5 + j)], want, 1e-5) << i << "," << j;
    }
}

}  // namespace
}  // namespace meshtrain::kernels
