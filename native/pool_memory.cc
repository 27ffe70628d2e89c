#include "pool_memory.h"
#include <algorithm>
#include <unistd.h>
#include "cuda_context.h"
#include "errors.h"

namespace gpuring::cuda {

std::atomic<bool> PoolExports::any_{false};

PoolExports &PoolExports::Get() {
  static PoolExports exports;
  return exports;
}

PoolExport PoolExports::Export(Napi::Env env, const Driver &d, CUdeviceptr p, int device, CUmemoryPool pool) {
  std::lock_guard<std::mutex> lock(mu_);
  PoolExport e;
  e.device = device;
  auto known = ids_.find(pool);
  if (known == ids_.end()) {
    int fd = -1;
    CUresult rc = d.cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc != CUDA_SUCCESS)
      Throw(env, GPR_E_NOT_EXPORTABLE,
            "this memory cannot be shared with CUDA IPC: it comes from a stream-ordered pool made without a file-descriptor "
            "handle type (the device's default pool, which cudaMallocAsync uses, is one). Allocate from a pool created with "
            "handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (DeviceBuffer.alloc(n, { pool: true }), RMM's "
            "CudaAsyncMemoryResource(enable_ipc=True), gpuring.exportable_pool() in Python) (" + d.Describe(rc) + ")");
    known = ids_.emplace(pool, next_id_++).first;
    fds_[known->second] = fd;
  }
  e.pool_id = known->second;
  size_t size = 0;
  Check(env, d.cuMemGetAddressRange(&e.base, &size, p), "cuMemGetAddressRange");
  e.bytes = size;
  Check(env, d.cuMemPoolExportPointer(&e.data, e.base), "cuMemPoolExportPointer");
  Check(env, d.cuPointerGetAttribute(&e.alloc_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, e.base), "cuPointerGetAttribute(BUFFER_ID)");
  exports_[e.base] = e;
  any_.store(true, std::memory_order_release);
  return e;
}

bool PoolExports::Find(CUdeviceptr p, PoolExport *out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = exports_.upper_bound(p);
  if (it == exports_.begin()) return false;
  --it;
  if (p >= it->second.base + it->second.bytes) return false;
  *out = it->second;
  return true;
}

bool PoolExports::FindOwn(uint64_t pool_id, uint64_t alloc_id, PoolExport *out) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto &[base, e] : exports_) {
    if (e.pool_id != pool_id || e.alloc_id != alloc_id) continue;
    *out = e;
    return true;
  }
  return false;
}

int PoolExports::Descriptor(uint64_t pool_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fds_.find(pool_id);
  return it == fds_.end() ? -1 : it->second;
}

CUmemoryPool ExportablePool(Napi::Env env, const Driver &d, int device) {
  static std::mutex mu;
  static std::map<int, CUmemoryPool> pools;
  std::lock_guard<std::mutex> lock(mu);
  CUmemoryPool &pool = pools[device];
  if (!pool) {
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
    Check(env, d.cuMemPoolCreate(&pool, &props), "cuMemPoolCreate");
    // Keep freed memory in the pool instead of handing it back to the driver
    // at every synchronization: consumers that imported it map it again
    // cheaply, and allocations skip the driver.
    uint64_t keep = UINT64_MAX;
    Check(env, d.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep), "cuMemPoolSetAttribute");
  }
  return pool;
}

PoolImports &PoolImports::Get() {
  static PoolImports imports;
  return imports;
}

// A pool of another process, imported once: its descriptor comes from the
// producer's channel and is closed once the driver holds the pool.
CUmemoryPool PoolImports::PoolLocked(Napi::Env env, const Driver &d, const PoolKey &key, int device) {
  auto it = pools_.find(key);
  if (it != pools_.end()) return it->second.pool;
  int fd = -1;
  gpuring::Check(env, [&](gpr_error *e) {
    return gpr_channel_fetch(std::get<0>(key).c_str(), std::get<1>(key), std::get<2>(key), GPR_MEM_CUDA_POOL, std::get<3>(key), &fd, e);
  });
  CUmemoryPool pool = nullptr;
  CUresult rc = d.cuMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void *>(static_cast<intptr_t>(fd)),
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  close(fd);
  Check(env, rc, "cuMemPoolImportFromShareableHandle");
  pools_[key] = Pool{pool, device};
  pools_imported_++;
  return pool;
}

PoolImports::Ref PoolImports::Acquire(Napi::Env env, const Driver &d, const std::string &segment, uint32_t index,
                                      uint32_t gen, const gpr_body_buffer &b, int device) {
  ScopedContext ctx(env, device);
  std::lock_guard<std::mutex> lock(mu_);
  PoolKey pool_key{segment, index, gen, b.pool_id};
  auto key = std::make_pair(pool_key, b.alloc_id);
  auto it = imports_.find(key);
  if (it == imports_.end()) {
    CUmemoryPool pool = PoolLocked(env, d, pool_key, device);
    CUmemPoolPtrExportData data;
    memcpy(data.reserved, b.handle, sizeof data.reserved);
    Import im{NextImportId(), 0, 0, device, 0};
    Check(env, d.cuMemPoolImportPointer(&im.base, pool, &data), "cuMemPoolImportPointer");
    CUdeviceptr base = 0;
    size_t size = 0;
    if (d.cuMemGetAddressRange(&base, &size, im.base) != CUDA_SUCCESS || base != im.base) size = 0;
    im.bytes = size;
    it = imports_.emplace(key, im).first;
    by_id_[im.id] = key;
    imported_++;
  }
  it->second.refs++;
  return {it->second.id, it->second.base, it->second.bytes};
}

bool PoolImports::Release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto at = by_id_.find(id);
  if (at == by_id_.end()) return false;
  auto it = imports_.find(at->second);
  if (--it->second.refs > 0) return true;
  InRetainedPrimary(it->second.device, [&](const Driver &d) { d.cuMemFree(it->second.base); });
  imports_.erase(it);
  by_id_.erase(at);
  freed_++;
  return true;
}

void PoolImports::ForgetDeadPublishers(const std::string &segment, const LivePublisher &live) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = pools_.begin(); it != pools_.end();) {
    const auto &[ring, index, gen, pool_id] = it->first;
    bool used = std::any_of(imports_.begin(), imports_.end(), [&](const auto &im) { return im.first.first == it->first; });
    if (ring != segment || used || live(index, gen)) {
      ++it;
      continue;
    }
    CUmemoryPool pool = it->second.pool;
    InRetainedPrimary(it->second.device, [&](const Driver &d) { d.cuMemPoolDestroy(pool); });
    it = pools_.erase(it);
  }
}

Napi::Object PoolImports::Stats(Napi::Env env) {
  std::lock_guard<std::mutex> lock(mu_);
  Napi::Object o = Napi::Object::New(env);
  o.Set("pools", static_cast<double>(pools_.size()));
  o.Set("poolsImported", static_cast<double>(pools_imported_));
  o.Set("imports", static_cast<double>(imports_.size()));
  o.Set("imported", static_cast<double>(imported_));
  o.Set("freed", static_cast<double>(freed_));
  return o;
}

}  // namespace gpuring::cuda
