#include "meshtrain/core/host_pages.h"

#include <sys/mman.h>

#include <cstdlib>

namespace meshtrain {

void* allocate_host_pages(size_t bytes) {
  const bool huge = bytes >= kHugePageBytes;
  void* p = nullptr;
  if (::posix_memalign(&p, huge ? kHugePageBytes : 64, bytes) != 0) return nullptr;
  // Only the whole huge pages inside the block are advised: a partial one at
  // its end stays in 4 KiB pages, so resident memory never exceeds the block.
  // Advice only: a kernel without THP (or with it off) keeps 4 KiB pages.
  if (huge) (void)::madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  return p;
}

void release_host_pages(void* p) { std::free(p); }

}  // namespace meshtrain
