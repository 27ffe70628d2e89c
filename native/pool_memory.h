// Stream-ordered pool memory across processes (SPEC.md §9b, kind cuda-pool).
//
// Producer side, PoolExports: a pointer into a pool created with
// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is published as the export data of
// its allocation (cuMemPoolExportPointer on the allocation's base) plus a
// number for its pool; the pool's file descriptor is exported once and handed
// to consumers by the producer's descriptor channel (DescriptorChannels).
//
// Consumer side, PoolImports: each pool is imported once per process (its
// descriptor fetched over the channel), each allocation once per process
// however many frames and columns name it, counted per frame. Unlike legacy
// IPC mappings, an import is freed as soon as no frame holds it: CUDA asks
// importers to free before the exporter does, and the producer frees only
// after the frame is released.
#pragma once
#include <napi.h>
#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include "channel_import.h"
#include "cuda_driver.h"
#include "gpuring.h"
#include "publisher.h"

namespace gpuring::cuda {

struct PoolExport {
  uint64_t pool_id = 0;
  uint64_t alloc_id = 0;  // CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation
  CUdeviceptr base = 0;
  uint64_t bytes = 0;
  int device = 0;
  CUmemPoolPtrExportData data{};
};

class PoolExports {
 public:
  static PoolExports &Get();
  // Exports the allocation of `pool` that contains `p`. Throws NOT_EXPORTABLE
  // for a pool made without a file-descriptor handle type (the device's
  // default pool, which cudaMallocAsync uses, is one).
  PoolExport Export(Napi::Env env, const Driver &d, CUdeviceptr p, int device, CUmemoryPool pool);
  // The export made earlier of an allocation containing `p`; the caller
  // confirms it is still the same allocation (its buffer id).
  bool Find(CUdeviceptr p, PoolExport *out);
  // This process's own export of allocation `alloc_id` of pool `pool_id`.
  bool FindOwn(uint64_t pool_id, uint64_t alloc_id, PoolExport *out);
  // The descriptor of pool `pool_id`, or -1 (for the channel: not handed over).
  int Descriptor(uint64_t pool_id);
  // Whether this process ever exported pool memory: its producers then serve
  // their descriptor channels.
  static bool Any() { return any_.load(std::memory_order_acquire); }

 private:
  std::mutex mu_;
  std::map<CUmemoryPool, uint64_t> ids_;
  std::map<uint64_t, int> fds_;                 // pool id -> descriptor
  std::map<CUdeviceptr, PoolExport> exports_;   // by allocation base
  uint64_t next_id_ = 1;
  static std::atomic<bool> any_;
};

// gpuring's own exportable pool on `device`, made on first use: what
// DeviceBuffer.alloc(n, { pool: true }) allocates from.
CUmemoryPool ExportablePool(Napi::Env env, const Driver &d, int device);

class PoolImports {
 public:
  static PoolImports &Get();
  using Ref = ImportRef;
  // Imports (or shares) the allocation buffer `b` of producer (index, gen) of
  // `segment` names, on this process's `device`, and takes a reference.
  Ref Acquire(Napi::Env env, const Driver &d, const std::string &segment, uint32_t index, uint32_t gen,
              const gpr_body_buffer &b, int device);
  // Drops a reference; frees the import with the last one. False: not a pool import id.
  bool Release(uint64_t id);
  // Destroys the imported pools of producers of `segment` that are no longer
  // `live` and whose allocations no frame here holds: an imported pool keeps
  // the dead exporter's pool memory allocated for as long as it exists.
  void ForgetDeadPublishers(const std::string &segment, const LivePublisher &live);
  Napi::Object Stats(Napi::Env env);

 private:
  using PoolKey = std::tuple<std::string, uint32_t, uint32_t, uint64_t>;  // segment, index, gen, pool id
  struct Import {
    uint64_t id;
    CUdeviceptr base;
    uint64_t bytes;
    int device;
    uint32_t refs;
  };
  struct Pool {
    CUmemoryPool pool;
    int device;
  };
  CUmemoryPool PoolLocked(Napi::Env env, const Driver &d, const PoolKey &key, int device);
  std::mutex mu_;
  std::map<PoolKey, Pool> pools_;
  std::map<std::pair<PoolKey, uint64_t>, Import> imports_;  // by (pool, allocation id)
  std::map<uint64_t, std::pair<PoolKey, uint64_t>> by_id_;
  uint64_t imported_ = 0, freed_ = 0, pools_imported_ = 0;
};

}  // namespace gpuring::cuda
