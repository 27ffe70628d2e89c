// ParallelCopy: memcpy split across a small persistent pool of threads. Copying
// a large device-to-host result out of pinned staging is bound by one core's
// copy rate and by the kernel zeroing fresh destination pages as they fault;
// both scale with cores. PageFaulting runs the faulting alone on the same
// threads, in the background, while the caller does something else (pinning
// the previous piece of a block: see PinnedHostPool).
#pragma once
#include <cstddef>

namespace gpuring {

// Copies n bytes, blocking until done. Small copies stay on the calling thread.
void ParallelCopy(void *dst, const void *src, size_t n);

// Writes every page of [p, p + n) on the pool's threads, so that each is
// faulted in (and zeroed by the kernel) there. Starts at once; the destructor
// waits. ParallelCopy calls from other threads wait until it is done; from
// the same thread, they would wait forever. Nothing to do when n is 0.
class PageFaulting {
 public:
  PageFaulting(void *p, size_t n);
  ~PageFaulting();
  PageFaulting(const PageFaulting &) = delete;
  PageFaulting &operator=(const PageFaulting &) = delete;

 private:
  bool started_;
};

}  // namespace gpuring
