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

class CopyPool {
 public:
  CopyPool() : workers_(std::clamp<unsigned>(std::thread::hardware_concurrency() / 2, 1, 8)) {
    for (unsigned i = 0; i < workers_; i++) std::thread([this, i] { Work(i); }).detach();
  }

  void Copy(uint8_t *dst, const uint8_t *src, size_t n) {
    std::unique_lock<std::mutex> lock(mu_);  // one copy at a time uses the pool
    busy_cv_.wait(lock, [&] { return !active_; });
    active_ = true;
    size_t parts = std::min<size_t>(workers_ + 1, n / kMinPart);
    if (parts < 2) {
      active_ = false;
      busy_cv_.notify_one();
      lock.unlock();
      memcpy(dst, src, n);
      return;
    }
    dst_ = dst, src_ = src, n_ = n, parts_ = parts, pending_ = parts - 1, generation_++;
    work_cv_.notify_all();
    lock.unlock();
    CopyPart(0);  // the caller takes part 0
    lock.lock();
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    active_ = false;
    busy_cv_.notify_one();
  }

 private:
  void CopyPart(size_t part) {
    size_t size = (n_ + parts_ - 1) / parts_;
    size_t begin = part * size, end = std::min(n_, begin + size);
    if (begin < end) memcpy(dst_ + begin, src_ + begin, end - begin);
  }

  void Work(unsigned index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      work_cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (index + 1 >= parts_) continue;  // fewer parts than workers this time
      lock.unlock();
      CopyPart(index + 1);
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
  size_t n_ = 0, parts_ = 0, pending_ = 0;
};

}  // namespace

void ParallelCopy(void *dst, const void *src, size_t n) {
  static CopyPool *pool = new CopyPool;  // never destroyed: its threads outlive static destruction
  pool->Copy(static_cast<uint8_t *>(dst), static_cast<const uint8_t *>(src), n);
}

}  // namespace gpuring
