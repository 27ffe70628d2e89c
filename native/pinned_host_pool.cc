#include "pinned_host_pool.h"
#include <unistd.h>
#include <algorithm>

namespace gpuring::cuda {

namespace {
struct Block {
  PinnedHostPool *pool;
  void *base;
  size_t capacity;
};

// A quarter of physical memory, at most 16 GiB: pinned pages cannot be
// swapped, so the pool must leave the rest of the machine room.
size_t DefaultLimit() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  size_t ram = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  return std::min<size_t>(ram / 4, size_t{16} << 30);
}
}  // namespace

PinnedHostPool &PinnedHostPool::Get() {
  static PinnedHostPool *pool = [] {  // never destroyed: buffers may be collected at exit
    auto *p = new PinnedHostPool;
    p->limit_ = DefaultLimit();
    return p;
  }();
  return *pool;
}

// The smallest idle block that fits without wasting more than a quarter of it.
// Updates `capacity` to the block's own.
void *PinnedHostPool::Reuse(size_t *capacity) {
  auto it = idle_.lower_bound(*capacity);
  if (it == idle_.end() || it->first - *capacity > it->first / 4) return nullptr;
  void *block = it->second;
  *capacity = it->first;
  idle_.erase(it);
  return block;
}

// Frees idle blocks until `need` more bytes fit under the limit.
bool PinnedHostPool::Trim(const Driver &d, size_t need) {
  while (pinned_ + need > limit_ && !idle_.empty()) {
    auto it = std::prev(idle_.end());
    d.cuMemFreeHost(it->second);
    pinned_ -= it->first;
    idle_.erase(it);
  }
  return pinned_ + need <= limit_;
}

Napi::ArrayBuffer PinnedHostPool::Take(Napi::Env env, const Driver &d, size_t n) {
  size_t capacity = (n + kGranule - 1) / kGranule * kGranule;
  void *block = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    block = Reuse(&capacity);
    if (!block && Trim(d, capacity)) {
      if (d.cuMemHostAlloc(&block, capacity, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) block = nullptr;
      else pinned_ += capacity;
    }
  }
  if (!block) return Napi::ArrayBuffer();
  auto *hint = new Block{this, block, capacity};
  return Napi::ArrayBuffer::New(env, block, n, [](Napi::Env, void *, Block *b) {
    b->pool->Give(b->base, b->capacity);
    delete b;
  }, hint);
}

Napi::Object PinnedHostPool::Stats(Napi::Env env) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t idle = 0;
  for (auto &kv : idle_) idle += kv.first;
  Napi::Object o = Napi::Object::New(env);
  o.Set("pinnedBytes", Napi::Number::New(env, static_cast<double>(pinned_)));
  o.Set("idleBytes", Napi::Number::New(env, static_cast<double>(idle)));
  o.Set("limitBytes", Napi::Number::New(env, static_cast<double>(limit_)));
  return o;
}

void PinnedHostPool::Give(void *block, size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.emplace(capacity, block);
}

}  // namespace gpuring::cuda
