#include "vmm_memory.h"
#include <unistd.h>
#include <vector>
#include "cuda_context.h"
#include "errors.h"

namespace gpuring::cuda {

VmmImports &VmmImports::Get() {
  static VmmImports imports;
  return imports;
}

namespace {

// The span's size and chunk count as the producer wrote them in the handle.
void SpanShape(const gpr_body_buffer &b, uint64_t *bytes, uint32_t *chunks) {
  memcpy(bytes, b.handle, 8);
  memcpy(chunks, b.handle + 8, 4);
}

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
    SpanShape(b, &declared, &chunks);
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
