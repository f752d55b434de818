#include "meshtrain/core/host_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "meshtrain/core/allocator.h"

using namespace meshtrain;

namespace {

// The VmFlags line of the mapping of this process that contains `p`
// (/proc/self/smaps), or "" when none does.
std::string vm_flags_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool kernel_has_transparent_huge_pages() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  return f.good();
}

}  // namespace

TEST(HostPages, SmallBlocksAreCacheLineAligned) {
  for (size_t bytes : {size_t(1), size_t(100), size_t(4096), kHugePageBytes - 1}) {
    void* p = allocate_host_pages(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    std::memset(p, 1, bytes);
    release_host_pages(p);
  }
}

// Big blocks start on a huge-page boundary, and the kernel records the advice
// on their whole huge pages ("hg" in VmFlags) wherever it has THP at all.
TEST(HostPages, BigBlocksAreAdvisedAsHugePages) {
  const size_t bytes = 3 * kHugePageBytes + 12345;
  void* p = allocate_host_pages(bytes);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  std::memset(p, 1, bytes);
  const std::string flags = vm_flags_at(p);
  ASSERT_FALSE(flags.empty()) << "no mapping of this process contains the block";
  if (kernel_has_transparent_huge_pages()) {
    EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  }
  // The partial huge page at the end is not advised (padding it would add
  // more than 1/8 of the block): it stays in 4 KiB pages.
  const std::string tail_flags = vm_flags_at(static_cast<char*>(p) + 3 * kHugePageBytes);
  EXPECT_EQ(tail_flags.find(" hg"), std::string::npos) << tail_flags;
  release_host_pages(p);
}

// Where padding the last partial huge page costs at most 1/8 of the block,
// the block is padded and its tail advised too: no 4 KiB pages at its end.
TEST(HostPages, ATailWorthPaddingIsAHugePageToo) {
  const size_t bytes = 16 * kHugePageBytes + 12345;
  EXPECT_EQ(huge_page_span(bytes), 17 * kHugePageBytes);
  void* p = allocate_host_pages(bytes);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, bytes);
  const std::string tail_flags = vm_flags_at(static_cast<char*>(p) + 16 * kHugePageBytes);
  ASSERT_FALSE(tail_flags.empty()) << "no mapping of this process contains the block's tail";
  if (kernel_has_transparent_huge_pages()) {
    EXPECT_NE(tail_flags.find(" hg"), std::string::npos) << tail_flags;
  }
  release_host_pages(p);
}

TEST(HostPages, HugePageSpanPadsAtMostAnEighth) {
  EXPECT_EQ(huge_page_span(kHugePageBytes - 1), 0u);
  EXPECT_EQ(huge_page_span(kHugePageBytes), kHugePageBytes);
  EXPECT_EQ(huge_page_span(kHugePageBytes + 1), kHugePageBytes);  // padding 2 MiB: not worth it
  EXPECT_EQ(huge_page_span(8 * kHugePageBytes - 1), 8 * kHugePageBytes);
  for (size_t bytes = kHugePageBytes; bytes < 40 * kHugePageBytes; bytes += 98765) {
    const size_t span = huge_page_span(bytes);
    EXPECT_EQ(span % kHugePageBytes, 0u) << bytes;
    EXPECT_GE(span + kHugePageBytes, bytes + 1) << bytes;  // every whole huge page inside the block
    if (span >= bytes) {
      EXPECT_LE(span - bytes, bytes / 8) << bytes;
    } else {
      EXPECT_GT(span + kHugePageBytes - bytes, bytes / 8) << bytes;  // padding would have cost more
    }
  }
}

TEST(HostPages, OutOfMemoryIsANullBlock) { EXPECT_EQ(allocate_host_pages(size_t(1) << 62), nullptr); }

// The caching allocator's host blocks come from here: a tensor-sized block is
// huge-page aligned.
TEST(HostPages, CachingAllocatorUsesThem) {
  auto alloc = CachingAllocator::create();
  void* p = alloc->allocate(4 * kHugePageBytes, MemCategory::Activations);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  alloc->deallocate(p, 4 * kHugePageBytes, MemCategory::Activations);
}
