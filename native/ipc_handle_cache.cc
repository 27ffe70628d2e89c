#include "ipc_handle_cache.h"
#include <algorithm>
#include <thread>
#include <vector>
#include "cuda_context.h"
#include "errors.h"

namespace gpuring::cuda {

IpcHandleCache &IpcHandleCache::Get() {
  // Never destroyed: the closer thread may be waiting on it when the process exits.
  static IpcHandleCache *cache = new IpcHandleCache;
  return *cache;
}

void IpcHandleCache::RememberExport(const CUipcMemHandle &h, uint64_t alloc_id, CUdeviceptr base, int device, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Mapping &m = entries_[Key{h}];
  m.alloc_id = alloc_id;
  m.base = base;
  m.device = device;
  m.bytes = bytes;
  m.own = true;
  exports_[base] = Key{h};
}

bool IpcHandleCache::FindExport(CUdeviceptr p, CUipcMemHandle *h, Mapping *m) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = exports_.upper_bound(p);
  if (it == exports_.begin()) return false;
  --it;
  auto e = entries_.find(it->second);
  if (e == entries_.end() || !e->second.own || p >= e->second.base + e->second.bytes) return false;
  *h = e->first.h;
  *m = e->second;
  return true;
}

bool IpcHandleCache::PendingLocked(const CUipcMemHandle &h) const {
  auto same = [&](const Entry &e) { return memcmp(e.first.h.reserved, h.reserved, sizeof h.reserved) == 0; };
  return (closing_current_ && same(current_)) || std::any_of(closing_.begin(), closing_.end(), same);
}

std::map<IpcHandleCache::Key, Mapping>::iterator IpcHandleCache::SettlePendingLocked(
    std::unique_lock<std::mutex> &lock, const CUipcMemHandle &h, uint64_t alloc_id) {
  for (auto e = closing_.begin(); e != closing_.end(); ++e) {
    if (memcmp(e->first.h.reserved, h.reserved, sizeof h.reserved) != 0 || e->second.alloc_id != alloc_id) continue;
    auto it = entries_.emplace(e->first, e->second).first;  // same allocation: keep using the mapping
    mapped_bytes_ += it->second.bytes;
    closing_.erase(e);
    return it;
  }
  done_cv_.wait(lock, [&] { return !PendingLocked(h); });
  return entries_.end();
}

Mapping IpcHandleCache::Acquire(Napi::Env env, const CUipcMemHandle &h, uint64_t alloc_id, int device, Publisher from) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(Key{h});
  if (it != entries_.end() && it->second.alloc_id != alloc_id && !it->second.own) {
    if (it->second.refs > 0)
      Throw(env, GPR_E_FRAME_STATE, "a producer reused device memory that a frame here still holds (its allocation changed under a live lease)");
    ScheduleCloseLocked(it);  // stale: the exporter freed that allocation and made a new one at the same address
    it = entries_.end();
  }
  if (it == entries_.end()) it = SettlePendingLocked(lock, h, alloc_id);
  if (it != entries_.end()) {
    hits_++;
  } else {
    ScopedContext ctx(env, device);
    Mapping m;
    m.device = device;
    m.alloc_id = alloc_id;
    CUresult rc = ctx.driver().cuIpcOpenMemHandle(&m.base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (rc == CUDA_ERROR_ALREADY_MAPPED) {
      // The exporter freed memory that an idle mapping here still maps, and
      // this allocation reuses it: the driver refuses to map it twice. No
      // frame uses idle mappings, so close them all and try again.
      CloseIdleLocked(lock);
      rc = ctx.driver().cuIpcOpenMemHandle(&m.base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    }
    Check(env, rc, "cuIpcOpenMemHandle");
    CUdeviceptr base = 0;
    size_t size = 0;
    if (ctx.driver().cuMemGetAddressRange(&base, &size, m.base) == CUDA_SUCCESS) m.bytes = size;
    opens_++;
    mapped_bytes_ += m.bytes;
    it = entries_.emplace(Key{h}, m).first;
  }
  it->second.refs++;
  it->second.last_use = ++clock_;
  it->second.from = from;
  return it->second;
}

void IpcHandleCache::ForgetDeadPublishers(const std::string *segment, const LivePublisher &live) {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<std::map<Key, Mapping>::iterator> dead;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const Mapping &m = it->second;
    if (m.refs == 0 && !m.own && m.from.segment == segment && !live(m.from.index, m.from.gen)) dead.push_back(it);
  }
  for (auto it : dead) ScheduleCloseLocked(it);
}

void IpcHandleCache::Release(const CUipcMemHandle &h) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(Key{h});
  if (it == entries_.end() || it->second.refs == 0) return;
  if (--it->second.refs == 0) EvictLocked();
}

// Closes every unreferenced mapping and waits until they are closed.
void IpcHandleCache::CloseIdleLocked(std::unique_lock<std::mutex> &lock) {
  std::vector<std::map<Key, Mapping>::iterator> idle;
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->second.refs == 0 && !it->second.own) idle.push_back(it);
  for (auto it : idle) ScheduleCloseLocked(it);
  done_cv_.wait(lock, [&] { return closing_.empty() && !closing_current_; });
}

// Closes unreferenced mappings, oldest first, until within bounds.
void IpcHandleCache::EvictLocked() {
  if (entries_.size() <= max_entries_ && mapped_bytes_ <= max_bytes_) return;
  std::vector<std::map<Key, Mapping>::iterator> idle;
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->second.refs == 0 && !it->second.own) idle.push_back(it);
  std::sort(idle.begin(), idle.end(), [](auto a, auto b) { return a->second.last_use < b->second.last_use; });
  for (auto it : idle) {
    if (entries_.size() <= max_entries_ && mapped_bytes_ <= max_bytes_) break;
    ScheduleCloseLocked(it);
  }
}

void IpcHandleCache::ScheduleCloseLocked(std::map<Key, Mapping>::iterator it) {
  closing_.push_back(*it);
  mapped_bytes_ -= it->second.bytes;
  entries_.erase(it);
  if (!closer_started_) {
    closer_started_ = true;
    std::thread([this] { CloserLoop(); }).detach();  // lives as long as the process
  }
  work_cv_.notify_one();
}

// Best effort: a close that fails leaves the mapping to process exit. The
// opening (primary) context was retained when the mapping was made.
void IpcHandleCache::CloserLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return !closing_.empty(); });
    current_ = closing_.front();
    closing_.pop_front();
    closing_current_ = true;
    lock.unlock();
    InRetainedPrimary(current_.second.device, [&](const Driver &d) { d.cuIpcCloseMemHandle(current_.second.base); });
    lock.lock();
    closing_current_ = false;
    closes_++;
    done_cv_.notify_all();
  }
}

// Sets the bounds and waits until every close they cause has happened.
void IpcHandleCache::SetLimits(size_t max_entries, uint64_t max_bytes) {
  std::unique_lock<std::mutex> lock(mu_);
  max_entries_ = max_entries;
  max_bytes_ = max_bytes;
  EvictLocked();
  done_cv_.wait(lock, [&] { return closing_.empty() && !closing_current_; });
}

Napi::Object IpcHandleCache::Stats(Napi::Env env) {
  std::lock_guard<std::mutex> lock(mu_);
  Napi::Object o = Napi::Object::New(env);
  uint64_t referenced = 0;
  for (auto &kv : entries_) referenced += kv.second.refs > 0;
  o.Set("entries", static_cast<double>(entries_.size()));
  o.Set("referenced", static_cast<double>(referenced));
  o.Set("mappedBytes", static_cast<double>(mapped_bytes_));
  o.Set("opens", static_cast<double>(opens_));
  o.Set("closes", static_cast<double>(closes_));
  o.Set("hits", static_cast<double>(hits_));
  return o;
}

}  // namespace gpuring::cuda
