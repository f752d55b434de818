#include "meshtrain/core/host_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace meshtrain {

size_t huge_page_span(size_t bytes) {
  if (bytes < kHugePageBytes) return 0;
  const size_t whole = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  return whole - bytes <= bytes / 8 ? whole : whole - kHugePageBytes;
}

size_t host_pages_footprint(size_t bytes) { return std::max(bytes, huge_page_span(bytes)); }

void* allocate_host_pages(size_t bytes) {
  const size_t span = huge_page_span(bytes);
  void* p = nullptr;
  if (::posix_memalign(&p, span > 0 ? kHugePageBytes : 64, host_pages_footprint(bytes)) != 0) return nullptr;
  // Advice only: a kernel without THP (or with it off) keeps 4 KiB pages.
  if (span > 0) (void)::madvise(p, span, MADV_HUGEPAGE);
  return p;
}

void release_host_pages(void* p) { std::free(p); }

void host_zero(void* p, size_t bytes) { std::memset(p, 0, bytes); }
void host_copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

}  // namespace meshtrain
