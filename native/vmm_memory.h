// VMM memory across processes (SPEC.md §9d, kind cuda-vmm): the allocations
// of the virtual memory management API (cuMemCreate; PyTorch's expandable
// segments) that a producer maps side by side. A buffer names a span of such
// chunks by the producer's number for it; a consumer fetches one descriptor
// per chunk over the producer's descriptor channel, reserves an address range
// of the span's size and maps the chunks into it in order. A span is mapped
// once per process while frames hold it and unmapped with the last of them,
// before the release: the producer may unmap and free the chunks after that.
#pragma once
#include <napi.h>
#include <atomic>
#include <map>
#include <vector>
#include <mutex>
#include <string>
#include <tuple>
#include "channel_import.h"
#include "cuda_driver.h"
#include "gpuring.h"

namespace gpuring::cuda {

// One span this process exports: the chunks of one of its VMM allocations.
struct SpanExport {
  uint64_t span = 0;  // the span number (alloc_id), from 1, never reused in this process
  CUdeviceptr base = 0;
  uint64_t bytes = 0;
  uint32_t chunks = 0;
  int device = 0;
};

// This process's exportable VMM memory (DeviceBuffer.alloc(n, { vmm: true })):
// chunks made with the POSIX file-descriptor handle type and mapped side by
// side, as PyTorch's expandable segments are (20 MiB each). Each allocation
// is one span whose chunk descriptors are exported once, handed out by this
// process's descriptor channels, and closed when it is freed: a consumer maps
// the span while its frames hold it (SPEC.md §9d).
class VmmAllocations {
 public:
  static VmmAllocations &Get();
  static constexpr uint64_t kChunkBytes = 20ull << 20;  // as PyTorch's expandable segments
  CUdeviceptr Alloc(Napi::Env env, const Driver &d, int device, uint64_t bytes);
  // Unmaps and frees the allocation at `base`; false when it is not one of these.
  bool Free(const Driver &d, CUdeviceptr base);
  // The span of the allocation containing `p`.
  bool Find(CUdeviceptr p, SpanExport *out);
  // For the descriptor channel: span `span`'s chunk descriptors and sizes (0: unknown).
  uint32_t Descriptors(uint64_t span, int *fds, uint64_t *sizes);
  // Whether this process ever made such memory: its producers then serve their channels.
  static bool Any() { return any_.load(std::memory_order_acquire); }

 private:
  struct Allocation {
    SpanExport span;
    std::vector<CUmemGenericAllocationHandle> handles;
    std::vector<int> fds;
    std::vector<uint64_t> sizes;
  };
  static void Destroy(const Driver &d, Allocation &a, uint64_t mapped);
  std::mutex mu_;
  std::map<CUdeviceptr, Allocation> by_base_;
  uint64_t next_span_ = 1;
  static std::atomic<bool> any_;
};

class VmmImports {
 public:
  static VmmImports &Get();
  using Ref = ImportRef;
  // Maps the span buffer `b` (cuda-vmm) of producer (index, gen) of `segment`
  // names on this process's `device` and takes a reference.
  Ref Acquire(Napi::Env env, const Driver &d, const std::string &segment, uint32_t index, uint32_t gen,
              const gpr_body_buffer &b, int device);
  // Drops a reference; unmaps the span with the last one. False: not a span id.
  bool Release(uint64_t id);

 private:
  using Key = std::tuple<std::string, uint32_t, uint32_t, uint64_t>;  // segment, index, gen, span
  struct Span {
    uint64_t id;
    CUdeviceptr base;
    uint64_t bytes;
    int device;
    uint32_t refs;
  };
  std::mutex mu_;
  std::map<Key, Span> spans_;
  std::map<uint64_t, Key> by_id_;
};

}  // namespace gpuring::cuda
