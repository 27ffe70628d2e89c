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
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include "channel_import.h"
#include "cuda_driver.h"
#include "gpuring.h"

namespace gpuring::cuda {

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
