#include "vmm_memory.h"
#include <unistd.h>
#include <algorithm>
#include <vector>
#include "cuda_context.h"
#include "descriptor_channels.h"
#include "errors.h"

namespace gpuring::cuda {

std::atomic<bool> VmmAllocations::any_{false};

VmmAllocations &VmmAllocations::Get() {
  static VmmAllocations allocations;
  return allocations;
}

// Chunks of kChunkBytes or more (the last one smaller, all granularity-aligned), each
// exported once; on failure everything made so far is undone.
CUdeviceptr VmmAllocations::Alloc(Napi::Env env, const Driver &d, int device, uint64_t bytes) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  size_t granularity = 0;
  Check(env, d.cuMemGetAllocationGranularity(&granularity, &prop, 0), "cuMemGetAllocationGranularity");
  auto aligned = [granularity](uint64_t n) { return (n + granularity - 1) / granularity * granularity; };
  uint64_t total = aligned(bytes);
  // A span travels in one channel reply: past 253 chunks, chunks grow instead.
  uint64_t chunk = aligned(std::max<uint64_t>(kChunkBytes, (total + GPR_CHANNEL_MAX_FDS - 1) / GPR_CHANNEL_MAX_FDS));
  Allocation a;
  a.span.device = device;
  a.span.bytes = total;
  CUresult rc = d.cuMemAddressReserve(&a.span.base, total, 0, 0, 0);
  const char *call = "cuMemAddressReserve";
  uint64_t mapped = 0;
  while (rc == CUDA_SUCCESS && mapped < total) {
    uint64_t size = std::min(chunk, total - mapped);
    CUmemGenericAllocationHandle h = 0;
    if ((rc = d.cuMemCreate(&h, size, &prop, 0)) != CUDA_SUCCESS) {
      call = "cuMemCreate";
      break;
    }
    a.handles.push_back(h);
    int fd = -1;
    rc = d.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), call = "cuMemExportToShareableHandle";
    if (rc == CUDA_SUCCESS) a.fds.push_back(fd), rc = d.cuMemMap(a.span.base + mapped, size, 0, h, 0), call = "cuMemMap";
    if (rc == CUDA_SUCCESS) mapped += size, a.sizes.push_back(size);
  }
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (rc == CUDA_SUCCESS) rc = d.cuMemSetAccess(a.span.base, total, &access, 1), call = "cuMemSetAccess";
  if (rc != CUDA_SUCCESS) {
    Destroy(d, a, mapped);
    Check(env, rc, call);
  }
  a.span.chunks = static_cast<uint32_t>(a.handles.size());
  std::lock_guard<std::mutex> lock(mu_);
  a.span.span = next_span_++;
  CUdeviceptr base = a.span.base;
  by_base_.emplace(base, std::move(a));
  any_.store(true, std::memory_order_release);
  return base;
}

void VmmAllocations::Destroy(const Driver &d, Allocation &a, uint64_t mapped) {
  if (mapped) d.cuMemUnmap(a.span.base, mapped);
  for (CUmemGenericAllocationHandle h : a.handles) d.cuMemRelease(h);
  if (a.span.base) d.cuMemAddressFree(a.span.base, a.span.bytes);
  for (int fd : a.fds) close(fd);
}

bool VmmAllocations::Free(const Driver &d, CUdeviceptr base) {
  Allocation a;
  DescriptorChannels::Get().WhileSilent([&] {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_base_.find(base);
    if (it == by_base_.end()) return;
    a = std::move(it->second);
    by_base_.erase(it);
  });
  if (!a.span.span) return false;
  Destroy(d, a, a.span.bytes);
  return true;
}

bool VmmAllocations::Find(CUdeviceptr p, SpanExport *out) {
  if (!Any()) return false;  // every export asks first: no lock for processes without VMM memory
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_base_.upper_bound(p);
  if (it == by_base_.begin()) return false;
  --it;
  if (p >= it->first + it->second.span.bytes) return false;
  *out = it->second.span;
  return true;
}

uint32_t VmmAllocations::Descriptors(uint64_t span, int *fds, uint64_t *sizes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto &[base, a] : by_base_) {
    if (a.span.span != span) continue;
    std::copy(a.fds.begin(), a.fds.end(), fds);
    std::copy(a.sizes.begin(), a.sizes.end(), sizes);
    return a.span.chunks;
  }
  return 0;
}

VmmImports &VmmImports::Get() {
  static VmmImports imports;
  return imports;
}

namespace {

// Maps `count` chunks (descriptors, closed here) side by side at a new
// address range; on failure unmaps what it mapped and throws.
CUdeviceptr MapChunks(Napi::Env env, const Driver &d, const int *fds, const uint64_t *sizes, uint32_t count,
                      uint64_t total, int device) {
  CUdeviceptr base = 0;
  CUresult rc = d.cuMemAddressReserve(&base, total, 0, 0, 0);
  uint64_t mapped = 0;
  const char *call = "cuMemAddressReserve";
  for (uint32_t i = 0; i < count; i++) {
    CUmemGenericAllocationHandle h = 0;
    if (rc == CUDA_SUCCESS)
      rc = d.cuMemImportFromShareableHandle(&h, reinterpret_cast<void *>(static_cast<intptr_t>(fds[i])),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
      call = "cuMemImportFromShareableHandle";
    close(fds[i]);
    if (rc != CUDA_SUCCESS) continue;
    rc = d.cuMemMap(base + mapped, sizes[i], 0, h, 0), call = "cuMemMap";
    d.cuMemRelease(h);  // the mapping holds the allocation now
    if (rc == CUDA_SUCCESS) mapped += sizes[i];
  }
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (rc == CUDA_SUCCESS) rc = d.cuMemSetAccess(base, total, &access, 1), call = "cuMemSetAccess";
  if (rc == CUDA_SUCCESS) return base;
  if (mapped) d.cuMemUnmap(base, mapped);
  if (base) d.cuMemAddressFree(base, total);
  Check(env, rc, call);
  return 0;
}

}  // namespace

VmmImports::Ref VmmImports::Acquire(Napi::Env env, const Driver &d, const std::string &segment, uint32_t index,
                                    uint32_t gen, const gpr_body_buffer &b, int device) {
  ScopedContext ctx(env, device);
  std::lock_guard<std::mutex> lock(mu_);
  Key key{segment, index, gen, b.alloc_id};
  auto it = spans_.find(key);
  if (it == spans_.end()) {
    uint64_t declared = 0;
    uint32_t chunks = 0;
    gpr_vmm_handle_read(b.handle, &declared, &chunks);
    std::vector<int> fds(GPR_CHANNEL_MAX_FDS, -1);
    std::vector<uint64_t> sizes(GPR_CHANNEL_MAX_FDS, 0);
    uint32_t count = 0;
    gpuring::Check(env, [&](gpr_error *e) {
      return gpr_channel_fetch_many(segment.c_str(), index, gen, GPR_MEM_CUDA_VMM, b.alloc_id, fds.data(), sizes.data(),
                                    GPR_CHANNEL_MAX_FDS, &count, e);
    });
    uint64_t total = 0;
    for (uint32_t i = 0; i < count; i++) total += sizes[i];
    if (count != chunks || total != declared) {
      for (uint32_t i = 0; i < count; i++) close(fds[i]);
      Throw(env, GPR_E_DESCRIPTOR_UNAVAILABLE, "the producer's span " + std::to_string(b.alloc_id) + " has " +
                                                   std::to_string(count) + " chunks of " + std::to_string(total) +
                                                   " bytes, not the frame's " + std::to_string(chunks) + " of " +
                                                   std::to_string(declared));
    }
    Span span{NextImportId(), MapChunks(env, d, fds.data(), sizes.data(), count, total, device), total, device, 0};
    it = spans_.emplace(key, span).first;
    by_id_[span.id] = key;
  }
  it->second.refs++;
  return {it->second.id, it->second.base, it->second.bytes};
}

bool VmmImports::Release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto at = by_id_.find(id);
  if (at == by_id_.end()) return false;
  auto it = spans_.find(at->second);
  if (--it->second.refs > 0) return true;
  InRetainedPrimary(it->second.device, [&](const Driver &d) {
    d.cuMemUnmap(it->second.base, it->second.bytes);
    d.cuMemAddressFree(it->second.base, it->second.bytes);
  });
  spans_.erase(it);
  by_id_.erase(at);
  return true;
}

}  // namespace gpuring::cuda
