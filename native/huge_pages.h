// Anonymous host memory backed by transparent huge pages where the kernel
// allows them (madvise mode): filling a GiB then takes hundreds of page faults
// instead of a quarter million, and pinning it walks 2 MiB pages. Aligned to
// 2 MiB, because only whole aligned 2 MiB ranges become huge pages.
#pragma once
#include <cstddef>

namespace gpuring {

constexpr size_t kHugePage = 2u << 20;

// n bytes (rounded up to kHugePage), or nullptr when the mapping fails.
void *MapHugePages(size_t n);
void UnmapHugePages(void *p, size_t n);

}  // namespace gpuring
