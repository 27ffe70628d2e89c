#include "huge_pages.h"
#include <sys/mman.h>
#include <cstdint>

namespace gpuring {

namespace {
size_t Rounded(size_t n) { return (n + kHugePage - 1) / kHugePage * kHugePage; }
}  // namespace

void *MapHugePages(size_t n) {
  n = Rounded(n);
  size_t span = n + kHugePage;  // room to align: mmap promises only 4 KiB
  void *raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  auto *start = static_cast<uint8_t *>(raw);
  auto *aligned = reinterpret_cast<uint8_t *>(Rounded(reinterpret_cast<uintptr_t>(start)));
  if (aligned > start) munmap(start, static_cast<size_t>(aligned - start));
  size_t tail = static_cast<size_t>(start + span - (aligned + n));
  if (tail) munmap(aligned + n, tail);
  madvise(aligned, n, MADV_HUGEPAGE);  // best effort: without THP these are ordinary pages
  return aligned;
}

void UnmapHugePages(void *p, size_t n) { munmap(p, Rounded(n)); }

}  // namespace gpuring
