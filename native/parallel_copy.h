// ParallelCopy: memcpy split across a small persistent pool of threads. Copying
// a large device-to-host result out of pinned staging is bound by one core's
// copy rate and by the kernel zeroing fresh destination pages as they fault;
// both scale with cores.
#pragma once
#include <cstddef>

namespace gpuring {

// Copies n bytes, blocking until done. Small copies stay on the calling thread.
void ParallelCopy(void *dst, const void *src, size_t n);

}  // namespace gpuring
