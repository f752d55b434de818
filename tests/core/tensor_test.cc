#include "meshtrain/core/tensor.h"

#include <gtest/gtest.h>

using namespace meshtrain;

TEST(Tensor, ViewsShareStorage) {
  auto alloc = CachingAllocator::create();
  Tensor t = tensor_from<float>({0, 1, 2, 3, 4, 5}, Shape{3, 2}, alloc);
  Tensor rows = t.slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(rows.data<float>()[0], 2.0f);
  rows.data<float>()[0] = 42;
  EXPECT_EQ(t.data<float>()[2], 42.0f);
  Tensor flat = t.view(Shape{6});
  EXPECT_TRUE(flat.shares_storage(t));
  EXPECT_EQ(t.flat_slice(4, 6).data<float>()[1], 5.0f);
  EXPECT_THROW(t.view(Shape{4}), InternalError);
  EXPECT_THROW(t.slice(2, 4), InternalError);
}

TEST(Tensor, DTypeCheckedAccess) {
  auto alloc = CachingAllocator::create();
  Tensor t = Tensor::zeros(Shape{4}, DType::I32, alloc, MemCategory::Activations);
  EXPECT_EQ(t.data<int32_t>()[3], 0);
  EXPECT_THROW(t.data<float>(), InternalError);
}

TEST(Tensor, CategoriesAreAccounted) {
  auto alloc = CachingAllocator::create();
  {
    Tensor p = Tensor::empty(Shape{1000}, DType::F32, alloc, MemCategory::Params);
    Tensor g = Tensor::empty(Shape{1000}, DType::F32, alloc, MemCategory::Grads);
    EXPECT_EQ(alloc->tracker().current(MemCategory::Params), int64_t(CachingAllocator::rounded_size(4000)));
    EXPECT_GT(alloc->tracker().current(MemCategory::Grads), 0);
  }
  EXPECT_EQ(alloc->tracker().current(MemCategory::Params), 0);
  EXPECT_GT(alloc->tracker().peak(MemCategory::Params), 0);
  EXPECT_GT(alloc->tracker().cached(), 0);
}

TEST(Tensor, WrapIsNotAccounted) {
  std::vector<double> v{1, 2, 3};
  Tensor t = Tensor::wrap(v.data(), Shape{3}, DType::F64);
  EXPECT_EQ(t.data<double>()[1], 2.0);
  EXPECT_EQ(t.nbytes(), 24u);
}
