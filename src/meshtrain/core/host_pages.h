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

// The bytes of a block of `bytes` that are advised as huge pages (0 below
// kHugePageBytes): its whole huge pages, and the partial one at its end too
// where the padding that takes is at most 1/8 of the block. A tail left in
// 4 KiB pages is slow to stream once the step has turned the caches over
// (about 5 us per 4 KiB page measured on a Zen 5 guest, where it cost the
// bf16 step 15% of its time: docs/performance.md); the 1/8 bounds what the
// padding adds to resident memory. The caching allocator reports the
// padding apart from the tracked blocks (MemorySnapshot::page_padding).
size_t huge_page_span(size_t bytes);

// `bytes` aligned to 64 bytes, or from kHugePageBytes on to a huge-page
// boundary with huge_page_span(bytes) advised as huge pages (the block
// padded to it); nullptr when out of memory. Free with release_host_pages.
void* allocate_host_pages(size_t bytes);
// What such a block holds: `bytes` with its padding.
size_t host_pages_footprint(size_t bytes);
void release_host_pages(void* p);
// Tensor::zero_ and copy_from on host memory (memset, memmove).
void host_zero(void* p, size_t bytes);
void host_copy(void* dst, const void* src, size_t bytes);

}  // namespace meshtrain
