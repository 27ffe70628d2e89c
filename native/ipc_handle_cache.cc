#include "ipc_handle_cache.h"
#include <algorithm>
#include <vector>
#include "cuda_context.h"
#include "errors.h"

namespace gpuring::cuda {

IpcHandleCache &IpcHandleCache::Get() {
  static IpcHandleCache cache;
  return cache;
}

void IpcHandleCache::RememberExport(const CUipcMemHandle &h, uint64_t alloc_id, CUdeviceptr base, int device, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Mapping &m = entries_[Key{h}];
  m.alloc_id = alloc_id;
  m.base = base;
  m.device = device;
  m.bytes = bytes;
  m.own = true;
}

Mapping IpcHandleCache::Acquire(Napi::Env env, const CUipcMemHandle &h, uint64_t alloc_id, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(Key{h});
  if (it != entries_.end() && it->second.alloc_id != alloc_id && !it->second.own) {
    if (it->second.refs > 0)
      Throw(env, GPR_E_FRAME_STATE, "a producer reused device memory that a frame here still holds (its allocation changed under a live lease)");
    CloseLocked(it);  // stale: the exporter freed that allocation and made a new one at the same address
    it = entries_.end();
  }
  if (it != entries_.end()) {
    hits_++;
  } else {
    ScopedContext ctx(env, device);
    Mapping m;
    m.device = device;
    m.alloc_id = alloc_id;
    Check(env, ctx.driver().cuIpcOpenMemHandle(&m.base, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle");
    CUdeviceptr base = 0;
    size_t size = 0;
    if (ctx.driver().cuMemGetAddressRange(&base, &size, m.base) == CUDA_SUCCESS) m.bytes = size;
    opens_++;
    mapped_bytes_ += m.bytes;
    it = entries_.emplace(Key{h}, m).first;
  }
  it->second.refs++;
  it->second.last_use = ++clock_;
  return it->second;
}

void IpcHandleCache::Release(const CUipcMemHandle &h) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(Key{h});
  if (it == entries_.end() || it->second.refs == 0) return;
  if (--it->second.refs == 0) EvictLocked();
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
    CloseLocked(it);
  }
}

// Best effort: a close that fails leaves the mapping to process exit. The
// opening (primary) context was retained when the mapping was made.
void IpcHandleCache::CloseLocked(std::map<Key, Mapping>::iterator it) {
  const Driver &d = Driver::Get();
  CUcontext ctx = RetainedPrimary(it->second.device), popped;
  if (ctx && d.cuCtxPushCurrent(ctx) == CUDA_SUCCESS) {
    d.cuIpcCloseMemHandle(it->second.base);
    d.cuCtxPopCurrent(&popped);
  }
  closes_++;
  mapped_bytes_ -= it->second.bytes;
  entries_.erase(it);
}

void IpcHandleCache::SetLimits(size_t max_entries, uint64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  max_entries_ = max_entries;
  max_bytes_ = max_bytes;
  EvictLocked();
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
