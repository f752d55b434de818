// Reproducible mode's canonical blocks (model/canonical_sum.h, docs/math.md
// (M.73)) on their own: where the blocks of a dimension fall and which a
// slice holds, the block tree's order, and canonical_gemm_sum on two halves
// of K adding up to the one-rank result bit for bit, where a plain GEMM
// over all of K does not.
#include "meshtrain/model/canonical_sum.h"

#include <gtest/gtest.h>

#include "meshtrain/core/error.h"
#include "meshtrain/core/rng.h"
#include "model/model_fixtures.h"

using namespace meshtrain;
using meshtrain::testing::columns_of;
using meshtrain::model::Extent;

namespace {

const kernels::KernelTable& cpu() { return kernels::kernels_for(Device::Cpu); }

std::vector<float> random_values(int64_t n, uint64_t stream) {
  CounterRng rng(7);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(rng.normal(stream, uint64_t(i)));
  return v;
}


Tensor columns(const std::vector<float>& whole, int64_t rows, int64_t total, int64_t offset, int64_t cols,
               const std::shared_ptr<CachingAllocator>& alloc) {
  return tensor_from(columns_of(whole, rows, total, offset, cols), Shape{rows, cols}, alloc);
}

// A parameter holding columns [offset, offset + cols) of a [rows, total]
// weight (split along dim 1, a row-parallel layer's), or rows [offset,
// offset + cols) of a [total, rows] weight (dim 0, a column-parallel one's).
struct Weight {
  model::ParamSpec spec;
  model::Parameter p;
  Weight(const std::vector<float>& whole, int64_t rows, int64_t total, int64_t offset, int64_t cols, int dim,
         const std::shared_ptr<CachingAllocator>& alloc) {
    spec.name = "w";
    spec.shape = dim == 1 ? Shape{rows, cols} : Shape{cols, rows};
    spec.global_shape = dim == 1 ? Shape{rows, total} : Shape{total, rows};
    spec.global_offset = dim == 1 ? std::vector<int64_t>{0, offset} : std::vector<int64_t>{offset, 0};
    p.spec = &spec;
    p.value = dim == 1 ? tensor_from(columns_of(whole, rows, total, offset, cols), spec.shape, alloc)
                       : tensor_from(std::vector<float>(whole.begin() + offset * rows,
                                                        whole.begin() + (offset + cols) * rows),
                                     spec.shape, alloc);
  }
};

}  // namespace

TEST(CanonicalBlocks, BlocksAreBalancedAndASliceIsWholeBlocksOrRefused) {
  // 259 in 8: the first 3 blocks hold 33, the others 32.
  EXPECT_EQ(model::canonical_block(259, 8, 0).length, 33);
  EXPECT_EQ(model::canonical_block(259, 8, 3).offset, 99);
  EXPECT_EQ(model::canonical_block(259, 8, 3).length, 32);
  EXPECT_EQ(model::canonical_block(259, 8, 7).offset + model::canonical_block(259, 8, 7).length, 259);
  // Blocks 4-7 of 259 are [131, 259): a rank's slice, as extents of the slice.
  const std::vector<Extent> upper = model::slice_blocks(259, 8, 131, 128, "v");
  ASSERT_EQ(upper.size(), 4u);
  EXPECT_EQ(upper[0].offset, 0);
  EXPECT_EQ(upper[3].offset + upper[3].length, 128);
  // The mode off: one block, the whole slice.
  const std::vector<Extent> off = model::slice_blocks(259, 0, 130, 129, "v");
  ASSERT_EQ(off.size(), 1u);
  EXPECT_EQ(off[0].length, 129);
  // The balanced tp split (130 + 129) is not whole blocks; nor is a dimension shorter than the blocks.
  EXPECT_THROW(model::slice_blocks(259, 8, 130, 129, "the vocabulary"), ConfigError);
  EXPECT_THROW(model::slice_blocks(4, 8, 0, 4, "k_proj"), ConfigError);
}

TEST(CanonicalBlocks, TheTreeAddsNeighboursFirst) {
  auto alloc = CachingAllocator::create();
  // ((1e8 + 1) + (-1e8 + 1)) in f32 is 0; the fold 1e8 + 1 - 1e8 + 1 gives 1.
  std::vector<Tensor> leaves;
  for (float v : {1e8f, 1.0f, -1e8f, 1.0f}) leaves.push_back(tensor_from(std::vector<float>{v}, Shape{1}, alloc));
  model::BlockTree tree;
  for (size_t i = 0; i < leaves.size(); ++i) {
    tree.push(leaves[i]);
    EXPECT_EQ(tree.subtrees(), i == 2 ? 2u : 1u) << "after leaf " << i;
  }
  EXPECT_EQ(tree.root().raw(), leaves[0].raw());
  EXPECT_EQ(to_vector<float>(tree.root())[0], 0.0f);
}

// y = x W^T with K = 256 split over two "ranks" of 4 blocks each: their
// partial sums added are the one-rank tree of 8 blocks, bit for bit.
TEST(CanonicalBlocks, TwoHalvesAddUpToTheOneRankSumBitForBit) {
  auto alloc = CachingAllocator::create();
  const int64_t M = 24, N = 40, K = 256;
  const std::vector<float> x = random_values(M * K, 1), w = random_values(N * K, 2);
  const Weight whole(w, N, K, 0, K, 1, alloc);
  Tensor one = Tensor::empty(Shape{M, N}, DType::F32, alloc, MemCategory::Workspace);
  model::canonical_gemm_sum(cpu(), {{tensor_from(x, Shape{M, K}, alloc), &whole.p, true}}, 8, one, alloc);
  std::vector<float> sum(size_t(M * N), 0.0f);
  for (int half = 0; half < 2; ++half) {
    const Weight mine(w, N, K, half * K / 2, K / 2, 1, alloc);
    Tensor part = Tensor::empty(Shape{M, N}, DType::F32, alloc, MemCategory::Workspace);
    model::canonical_gemm_sum(cpu(), {{columns(x, M, K, half * K / 2, K / 2, alloc), &mine.p, true}}, 8, part, alloc);
    const std::vector<float> p = to_vector<float>(part);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
  }
  EXPECT_EQ(sum, to_vector<float>(one));
  // One GEMM over all of K rounds otherwise.
  Tensor plain = Tensor::empty(Shape{M, N}, DType::F32, alloc, MemCategory::Workspace);
  model::canonical_gemm_sum(cpu(), {{tensor_from(x, Shape{M, K}, alloc), &whole.p, true}}, 0, plain, alloc);
  EXPECT_NE(to_vector<float>(plain), to_vector<float>(one));
}

// dx = dq Wq + dk Wk, K over the weights' rows (the column-parallel input
// gradient of two layers): block j is q's slice j then k's, so two halves
// again add up to the one-rank sum. A term holding more blocks than the
// first (a KV head both ranks hold whole, docs/math.md (M.76)) adds the
// first's blocks of it: the same part as the half.
TEST(CanonicalBlocks, TermsOfAnInputGradientShareTheBlocks) {
  auto alloc = CachingAllocator::create();
  const int64_t M = 16, N = 24, Kq = 64, Kk = 32;
  const std::vector<float> dq = random_values(M * Kq, 3), dk = random_values(M * Kk, 4);
  const std::vector<float> wq = random_values(Kq * N, 5), wk = random_values(Kk * N, 6);
  const Weight q(wq, N, Kq, 0, Kq, 0, alloc), k(wk, N, Kk, 0, Kk, 0, alloc);
  Tensor one = Tensor::empty(Shape{M, N}, DType::F32, alloc, MemCategory::Workspace);
  model::canonical_gemm_sum(cpu(), {{tensor_from(dq, Shape{M, Kq}, alloc), &q.p, false},
                                    {tensor_from(dk, Shape{M, Kk}, alloc), &k.p, false}},
                            8, one, alloc);
  std::vector<float> sum(size_t(M * N), 0.0f);
  for (int half = 0; half < 2; ++half) {
    const Weight qh(wq, N, Kq, half * Kq / 2, Kq / 2, 0, alloc), kh(wk, N, Kk, half * Kk / 2, Kk / 2, 0, alloc);
    const Tensor dq_half = columns(dq, M, Kq, half * Kq / 2, Kq / 2, alloc);
    Tensor part = Tensor::empty(Shape{M, N}, DType::F32, alloc, MemCategory::Workspace);
    model::canonical_gemm_sum(cpu(), {{dq_half, &qh.p, false}, {columns(dk, M, Kk, half * Kk / 2, Kk / 2, alloc),
                                                                 &kh.p, false}},
                              8, part, alloc);
    const std::vector<float> p = to_vector<float>(part);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
    // k held whole beside half of q: its blocks of this half.
    Tensor shared = Tensor::empty(Shape{M, N}, DType::F32, alloc, MemCategory::Workspace);
    model::canonical_gemm_sum(cpu(), {{dq_half, &qh.p, false}, {tensor_from(dk, Shape{M, Kk}, alloc), &k.p, false}}, 8,
                              shared, alloc);
    EXPECT_EQ(to_vector<float>(shared), p) << "half " << half;
  }
  EXPECT_EQ(sum, to_vector<float>(one));
  // A term lacking the first's blocks is an error.
  const Weight q1(wq, N, Kq, Kq / 2, Kq / 2, 0, alloc), k0(wk, N, Kk, 0, Kk / 2, 0, alloc);
  Tensor bad = Tensor::empty(Shape{M, N}, DType::F32, alloc, MemCategory::Workspace);
  EXPECT_ANY_THROW(model::canonical_gemm_sum(cpu(), {{columns(dq, M, Kq, Kq / 2, Kq / 2, alloc), &q1.p, false},
                                                     {columns(dk, M, Kk, 0, Kk / 2, alloc), &k0.p, false}},
                                             8, bad, alloc));
}
