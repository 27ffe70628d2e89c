#include "pinned_host_pool.h"
#include <unistd.h>
#include <algorithm>
#include "huge_pages.h"
#include "parallel_copy.h"

namespace gpuring::cuda {

namespace {
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
bool PinnedHostPool::Reuse(size_t capacity, Block *out) {
  auto it = idle_.lower_bound(capacity);
  if (it == idle_.end() || it->first - capacity > it->first / 4) return false;
  *out = it->second;
  idle_.erase(it);
  return true;
}

// Frees idle blocks until `need` more bytes fit under the limit; frees none
// when they would not fit even then.
bool PinnedHostPool::Trim(const Driver &d, size_t need) {
  if (reserved_ - IdleBytes() + need > limit_) return false;
  while (reserved_ + need > limit_ && !idle_.empty()) {
    auto it = std::prev(idle_.end());
    Free(d, it->second);
    reserved_ -= it->first;
    idle_.erase(it);
  }
  return reserved_ + need <= limit_;
}

void PinnedHostPool::Free(const Driver &d, const Block &b) {
  for (size_t at = 0; at < b.pinned; at += kPiece) d.cuMemHostUnregister(static_cast<uint8_t *>(b.base) + at);
  UnmapHugePages(b.base, b.capacity);
}

// Pins a fresh block a piece at a time, pipelined: while this thread
// registers piece k (and `ready` queues its copy), the pool's threads fault in
// piece k + 1. Faulting in first matters: registering untouched memory faults
// it one page at a time on this thread, at a tenth of the rate.
void PinnedHostPool::Pin(const Driver &d, Block &b, size_t n, const PieceReady &ready) {
  auto *base = static_cast<uint8_t *>(b.base);
  auto piece = [&](size_t at) { return at < b.capacity ? std::min(kPiece, b.capacity - at) : 0; };
  { PageFaulting first(base, piece(0)); }
  bool pinning = true;
  for (size_t at = 0; at < b.capacity; at += kPiece) {
    PageFaulting ahead(base + at + piece(at), piece(at + kPiece));
    pinning = pinning && d.cuMemHostRegister(base + at, piece(at), CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS;
    if (pinning) b.pinned = at + piece(at);
    if (at < n) ready(base + at, at, std::min(piece(at), n - at));
  }
}

size_t PinnedHostPool::IdleBytes() const {
  size_t idle = 0;
  for (const auto &kv : idle_) idle += kv.first;
  return idle;
}

size_t PinnedHostPool::Capacity(size_t n) { return (n + kHugePage - 1) / kHugePage * kHugePage; }

// Maps a new block of b->capacity bytes (not yet pinned), counted against the
// limit; false when the bound would be passed or the memory cannot be mapped.
bool PinnedHostPool::Fresh(const Driver &d, Block *b) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!Trim(d, b->capacity)) return false;
    reserved_ += b->capacity;  // mapped below, outside the lock
  }
  if ((b->base = MapHugePages(b->capacity))) return true;
  std::lock_guard<std::mutex> lock(mu_);
  reserved_ -= b->capacity;
  return false;
}

bool PinnedHostPool::Reserve(const Driver &d, size_t n) {
  Block b{nullptr, Capacity(n), 0};
  if (!Fresh(d, &b)) return false;
  Pin(d, b, 0, [](void *, size_t, size_t) {});
  Give(b);
  return true;
}

Napi::ArrayBuffer PinnedHostPool::Take(Napi::Env env, const Driver &d, size_t n, const PieceReady &ready) {
  Block b{nullptr, Capacity(n), 0};
  bool reused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reused = Reuse(b.capacity, &b);
  }
  if (!reused && !Fresh(d, &b)) return Napi::ArrayBuffer();
  try {
    if (!reused) Pin(d, b, n, ready);
    for (size_t at = 0; reused && at < n; at += kPiece) ready(static_cast<uint8_t *>(b.base) + at, at, std::min(kPiece, n - at));
  } catch (...) {
    Give(b);  // still a whole block, pinned as far as it got: the next result of its size may use it
    throw;
  }
  auto *held = new Block(b);
  return Napi::ArrayBuffer::New(env, b.base, n, [](Napi::Env, void *, Block *block) {
    Get().Give(*block);
    delete block;
  }, held);
}

Napi::Object PinnedHostPool::Stats(Napi::Env env) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t idle = IdleBytes();
  Napi::Object o = Napi::Object::New(env);
  o.Set("pinnedBytes", Napi::Number::New(env, static_cast<double>(reserved_)));
  o.Set("idleBytes", Napi::Number::New(env, static_cast<double>(idle)));
  o.Set("limitBytes", Napi::Number::New(env, static_cast<double>(limit_)));
  return o;
}

void PinnedHostPool::Give(const Block &b) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.emplace(b.capacity, b);
}

}  // namespace gpuring::cuda
