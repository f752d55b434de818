// Host memory for big, long-lived buffers (tensors, GEMM scratch): blocks of
// at least kHugePageBytes start on a huge-page boundary and ask the kernel
// for transparent huge pages (madvise; where THP is off it is a no-op).
// Why: a step walks activations, gradients and GEMM panels with strides of
// tens of KiB, touching a new 4 KiB page every few cache lines; under a
// hypervisor each TLB miss is a two-level page walk, and a software prefetch
// that misses the TLB stalls the loop behind it. With 2 MiB pages the same
// walks cost 512x fewer misses, and first touch faults once per 2 MiB.
#pragma once

#include <cstddef>

namespace meshtrain {

inline constexpr size_t kHugePageBytes = size_t(2) << 20;

// `bytes` aligned to 64 bytes, or from kHugePageBytes on to a huge-page
// boundary with its whole huge pages advised as such; nullptr when out of
// memory. Free with release_host_pages.
void* allocate_host_pages(size_t bytes);
void release_host_pages(void* p);

}  // namespace meshtrain
