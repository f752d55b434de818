// The GEMM scratchpad: grow-only reuse, and a failed allocation never
// leaves a null or undersized buffer behind.
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
