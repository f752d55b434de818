#include "meshtrain/core/allocator.h"
#include "meshtrain/core/host_pages.h"
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

// A host block padded to whole huge pages (host_pages.h) holds more than
// its size: the tracker reports that padding apart from the categories, and
// it leaves with the block when the cache is emptied.
TEST(CachingAllocator, ReportsHugePagePaddingApart) {
  auto alloc = CachingAllocator::create();
  const size_t padded = 16 * kHugePageBytes + 12345, unpadded = kHugePageBytes + 12345, small = 4096;
  void* a = alloc->allocate(padded, MemCategory::Activations);
  void* b = alloc->allocate(unpadded, MemCategory::Activations);
  void* c = alloc->allocate(small, MemCategory::Activations);
  const int64_t block = int64_t(CachingAllocator::rounded_size(padded));
  EXPECT_EQ(alloc->tracker().page_padding(), 17 * int64_t(kHugePageBytes) - block);
  EXPECT_EQ(alloc->tracker().current(MemCategory::Activations),
            block + int64_t(CachingAllocator::rounded_size(unpadded) + CachingAllocator::rounded_size(small)));
  EXPECT_NE(alloc->tracker().snapshot().str().find("page_padding=1.94 MiB"), std::string::npos)
      << alloc->tracker().snapshot().str();
  alloc->deallocate(a, padded, MemCategory::Activations);
  alloc->deallocate(b, unpadded, MemCategory::Activations);
  alloc->deallocate(c, small, MemCategory::Activations);
  EXPECT_EQ(alloc->tracker().page_padding(), 17 * int64_t(kHugePageBytes) - block) << "cached blocks keep theirs";
  alloc->empty_cache();
  EXPECT_EQ(alloc->tracker().page_padding(), 0);
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
