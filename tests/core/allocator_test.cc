#include "meshtrain/core/allocator.h"
#include "meshtrain/core/memory_tracker.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "meshtrain/core/tensor.h"

using namespace meshtrain;

TEST(CachingAllocator, ReusesFreedBlocksAcrossSteps) {
  auto alloc = CachingAllocator::create();
  for (int step = 0; step < 10; ++step) {
    Tensor a = Tensor::empty(Shape{256, 1024}, DType::F32, alloc, MemCategory::Activations);
    Tensor b = Tensor::empty(Shape{4096}, DType::F32, alloc, MemCategory::Workspace);
  }
  // Two distinct blocks, each fetched from the OS once: steady state allocates nothing.
  EXPECT_EQ(alloc->os_allocations(), 2);
  EXPECT_EQ(alloc->tracker().total_current(), 0);
}

TEST(CachingAllocator, AlignedAndEmptyCache) {
  auto alloc = CachingAllocator::create();
  void* p = alloc->allocate(100, MemCategory::Other);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  alloc->deallocate(p, 100, MemCategory::Other);
  EXPECT_GT(alloc->tracker().cached(), 0);
  alloc->empty_cache();
  EXPECT_EQ(alloc->tracker().cached(), 0);
  void* z = alloc->allocate(0, MemCategory::Other);
  EXPECT_NE(z, nullptr);
  alloc->deallocate(z, 0, MemCategory::Other);
}

TEST(MemoryTracker, PeakAndReset) {
  MemoryTracker t;
  t.on_alloc(MemCategory::Grads, 100);
  t.on_alloc(MemCategory::Grads, 50);
  t.on_free(MemCategory::Grads, 120);
  EXPECT_EQ(t.current(MemCategory::Grads), 30);
  EXPECT_EQ(t.peak(MemCategory::Grads), 150);
  t.reset_peaks();
  EXPECT_EQ(t.peak(MemCategory::Grads), 30);
  EXPECT_NE(t.snapshot().str().find("grads="), std::string::npos);
}
