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
  // The partial huge page at the end is not advised (it stays in 4 KiB pages).
  const std::string tail_flags = vm_flags_at(static_cast<char*>(p) + 3 * kHugePageBytes);
  EXPECT_EQ(tail_flags.find(" hg"), std::string::npos) << tail_flags;
  release_host_pages(p);
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
