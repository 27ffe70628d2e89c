// What a consumer imported through a producer's descriptor channel (a pool
// allocation, PoolImports; a VMM span, VmmImports), as a frame holds it.
#pragma once
#include <atomic>
#include <cstdint>
#include "cuda_driver.h"

namespace gpuring::cuda {

struct ImportRef {
  uint64_t id;  // the reference to drop at release; unique across both kinds
  CUdeviceptr base;
  uint64_t bytes;
};

// Ids of both kinds come from one sequence, so one list of ids releases both.
inline uint64_t NextImportId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace gpuring::cuda
