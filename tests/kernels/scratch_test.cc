// The GEMM scratchpad: grow-only reuse, whole huge pages for big buffers,
// and a failed allocation never leaves a null or undersized buffer behind.
#include "meshtrain/kernels/cpu/scratch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace meshtrain::kernels {
namespace {

TEST(Scratch, GrowsOnlyAndReusesTheBuffer) {
  Scratch s;
  void* a = s.get(100);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(s.bytes(), 4096u);
  EXPECT_EQ(s.get(4000), a);  // fits: same pages
  void* b = s.get(10000);
  ASSERT_NE(b, nullptr);
  EXPECT_GE(s.bytes(), 10000u);
  std::memset(b, 1, 10000);
}

// The packed GEMM streams its panels through every tile: from half a huge
// page on, the buffer is whole huge pages on a huge-page boundary.
TEST(Scratch, BigBuffersAreWholeHugePages) {
  Scratch s;
  ASSERT_NE(s.get(kHugePageBytes / 2 - 1), nullptr);
  EXPECT_EQ(s.bytes(), kHugePageBytes / 2);  // below: 4 KiB pages
  void* p = s.get(kHugePageBytes / 2 + 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(s.bytes(), kHugePageBytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  p = s.get(kHugePageBytes + 1);
  EXPECT_EQ(s.bytes(), 2 * kHugePageBytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  std::memset(p, 1, s.bytes());
}

TEST(Scratch, AFailedAllocationIsNotRecordedAsTheSize) {
  Scratch s;
  ASSERT_NE(s.get(4096), nullptr);
  EXPECT_THROW(s.get(size_t(1) << 62), InternalError);  // no machine has 4 EiB
  void* p = s.get(4096);
  ASSERT_NE(p, nullptr) << "a later call must not get a null scratchpad";
  EXPECT_GE(s.bytes(), 4096u);
  std::memset(p, 1, 4096);
  EXPECT_THROW(s.get(SIZE_MAX), InternalError);  // rounding up must not wrap to a tiny size
  EXPECT_NE(s.get(1), nullptr);
}

}  // namespace
}  // namespace meshtrain::kernels
