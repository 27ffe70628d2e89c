// StreamReleases: a consumer's leases that end when a CUDA stream gets to the
// point where release was asked for. An asynchronous consumer queues work that
// reads a frame's device buffers on its stream and releases the frame at once;
// the producer must not reuse that memory before the work is done (SPEC §9a,
// Lifetime). cuLaunchHostFunc runs the release on the driver's callback thread
// once everything queued before it on the stream is complete: no host wait, no
// polling.
//
// The callback may not call CUDA, nor wait for a lock another thread holds
// across a CUDA call (that call may wait for the device, and the device for the
// callback). So it only ends the lease (one CAS and a futex wake) and queues the
// frame's mapping references, which Collect() later hands to the IpcHandleCache.
#pragma once
#include <napi.h>
#include <condition_variable>
#include <mutex>
#include <vector>
#include "cuda_driver.h"
#include "gpuring.h"

namespace gpuring {

class StreamReleases {
 public:
  // Ends consumer `me`'s lease on the frame at `pos` once `stream` (on
  // `device`) completes the work queued so far, then drops one reference on
  // each of `mappings`. If the driver refuses, throws its error having queued
  // nothing: the lease still stands.
  void Queue(Napi::Env env, gpr_segment *seg, uint32_t me, uint64_t pos, int device, cuda::CUstream stream,
             std::vector<cuda::CUipcMemHandle> mappings);
  // Hands the mapping references of releases that ran back to the IpcHandleCache.
  void Collect();
  // Waits until every queued release ran, then collects. Call before detaching
  // from the segment: a release that runs later would touch unmapped memory.
  void WaitAll();

 private:
  struct Pending {
    StreamReleases *owner;
    gpr_segment *seg;
    uint32_t me;
    uint64_t pos;
    std::vector<cuda::CUipcMemHandle> mappings;
  };
  static void Run(void *pending);

  std::mutex mu_;
  std::condition_variable done_;
  uint32_t in_flight_ = 0;
  std::vector<cuda::CUipcMemHandle> dropped_;
};

}  // namespace gpuring
