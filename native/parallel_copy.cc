#include "parallel_copy.h"
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace gpuring {

namespace {

constexpr size_t kMinPart = 1u << 20;  // below this per thread, splitting costs more than it saves
constexpr size_t kPage = 4096;

// One job at a time: a copy (src set) or page faulting (src null), split in
// parts. The caller of a copy does part 0 itself; faulting is all the workers'.
class CopyPool {
 public:
  CopyPool() : workers_(std::clamp<unsigned>(std::thread::hardware_concurrency() / 2, 1, 8)) {
    for (unsigned i = 0; i < workers_; i++) std::thread([this, i] { Work(i); }).detach();
  }

  void Copy(uint8_t *dst, const uint8_t *src, size_t n) {
    size_t parts = std::min<size_t>(workers_ + 1, n / kMinPart);
    if (parts < 2) return static_cast<void>(memcpy(dst, src, n));
    Start(dst, src, n, parts, 1);
    CopyPart(0);
    Finish();
  }

  void Fault(uint8_t *p, size_t n) { Start(p, nullptr, n, workers_, 0); }

  // Waits for the workers' parts and frees the pool for the next job.
  void Finish() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    active_ = false;
    busy_cv_.notify_one();
  }

 private:
  // Hands parts [first, parts) to the workers, once the previous job finished.
  void Start(uint8_t *dst, const uint8_t *src, size_t n, size_t parts, size_t first) {
    std::unique_lock<std::mutex> lock(mu_);
    busy_cv_.wait(lock, [&] { return !active_; });
    active_ = true;
    dst_ = dst, src_ = src, n_ = n, parts_ = parts, first_ = first, pending_ = parts - first, generation_++;
    work_cv_.notify_all();
  }

  void CopyPart(size_t part) {
    size_t size = (n_ + parts_ - 1) / parts_;
    if (!src_) size = (size + kPage - 1) / kPage * kPage;  // whole pages, so that none is skipped
    size_t begin = part * size, end = std::min(n_, begin + size);
    if (begin >= end) return;
    if (src_) return static_cast<void>(memcpy(dst_ + begin, src_ + begin, end - begin));
    for (size_t at = begin; at < end; at += kPage) dst_[at] = 0;
  }

  void Work(unsigned index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      size_t part = index + first_;
      if (part >= parts_) continue;  // fewer parts than workers this time
      lock.unlock();
      CopyPart(part);
      lock.lock();
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  const unsigned workers_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_, busy_cv_;
  bool active_ = false;
  uint64_t generation_ = 0;
  uint8_t *dst_ = nullptr;
  const uint8_t *src_ = nullptr;
  size_t n_ = 0, parts_ = 0, first_ = 0, pending_ = 0;
};

CopyPool &Pool() {
  static CopyPool *pool = new CopyPool;  // never destroyed: its threads outlive static destruction
  return *pool;
}

}  // namespace

void ParallelCopy(void *dst, const void *src, size_t n) {
  Pool().Copy(static_cast<uint8_t *>(dst), static_cast<const uint8_t *>(src), n);
}

PageFaulting::PageFaulting(void *p, size_t n) : started_(n > 0) {
  if (started_) Pool().Fault(static_cast<uint8_t *>(p), n);
}

PageFaulting::~PageFaulting() {
  if (started_) Pool().Finish();
}

}  // namespace gpuring
