// Covers src/meshtrain/kernels/meta/meta_kernel_table.cc: the meta device's
// table computes nothing on tensors that have sizes and no values, and
// returns the neutral host values the step's control flow reads (the true
// count of supervised targets, finite gradients, sums of 0, the planner's
// balanced routing).
#include <gtest/gtest.h>

#include <vector>

#include "meshtrain/core/allocator.h"
#include "meshtrain/core/tensor.h"
#include "meshtrain/kernels/kernel_table.h"
#include "meshtrain/kernels/meta/meta_kernel_table.h"
#include "meshtrain/kernels/moe_routing.h"

namespace meshtrain::kernels {
namespace {

TEST(MetaKernelTable, IsTheMetaDevicesTable) {
  EXPECT_EQ(&kernels_for(Device::Meta), &meta_kernel_table());
  EXPECT_EQ(meta_kernel_table().device(), Device::Meta);
  EXPECT_NE(&kernels_for(Device::Cpu), &meta_kernel_table());
}

TEST(MetaKernelTable, ComputesNothingAndReturnsNeutralHostValues) {
  const auto alloc = CachingAllocator::create(Device::Meta);
  const KernelTable& kt = kernels_for(Device::Meta);
  const Tensor a = Tensor::empty(Shape{64, 32}, DType::F32, alloc, MemCategory::Other), b = Tensor::empty(Shape{48, 32}, DType::F32, alloc, MemCategory::Other);
  const Tensor c = Tensor::empty(Shape{64, 48}, DType::F32, alloc, MemCategory::Other);
  EXPECT_EQ(c.device(), Device::Meta);
  kt.gemm(false, true, 1.0, a, b, 0.0, c);  // a host kernel would read the meta block and fault
  kt.fill(c, 1.0);
  EXPECT_EQ(kt.sum_squares(c), 0.0);
  EXPECT_TRUE(kt.all_finite(c));
  std::vector<double> blocks(5, -1.0);
  kt.block_sum_squares(c, 1000, blocks.data());  // 3072 elements: 4 blocks
  EXPECT_EQ(blocks, (std::vector<double>{0, 0, 0, 0, -1}));

  const Tensor logits = Tensor::empty(Shape{6, 300}, DType::F32, alloc, MemCategory::Other);
  const std::vector<int32_t> targets = {3, -1, 7, 7, -1, 0};
  const CrossEntropyResult r = kt.cross_entropy(logits, targets.data());
  EXPECT_EQ(r.count, 4) << "the step divides by the true count of supervised targets";
  EXPECT_EQ(r.loss_sum, 0.0);
}

TEST(MetaKernelTable, RoutesAsThePlannerAssumes) {
  const auto alloc = CachingAllocator::create(Device::Meta);
  const MoeRoutingConfig cfg{.experts = 4, .top_k = 2, .seq = 8, .capacity_factor = 1.25};
  const Tensor logits = Tensor::empty(Shape{16, 4}, DType::F32, alloc, MemCategory::Other);
  const MoeRouting got = kernels_for(Device::Meta).route(cfg, logits);
  const MoeRouting want = balanced_routing(cfg, 16);
  EXPECT_EQ(got.count, want.count);
  EXPECT_EQ(got.begin, want.begin);
  EXPECT_EQ(got.slot_expert, want.slot_expert);
  EXPECT_EQ(got.assigned, 32);
}

}  // namespace
}  // namespace meshtrain::kernels
