// IpcHandleCache: the process-wide table of CUDA IPC mappings. Each allocation
// (keyed by its 64-byte handle) is opened once per process however many frames
// and columns name it, so CUDA_ERROR_ALREADY_MAPPED cannot happen; handles this
// process exported itself are recognised and used directly (CUDA refuses to
// open them). Unreferenced mappings stay cached for the next frame and are
// closed in batches, least recently used first, once the cache passes its
// bounds: cuIpcCloseMemHandle synchronizes the device, so never per frame.
// Handles repeat when the exporter reuses an address, so every entry also
// records the allocation's buffer id, which never repeats.
#pragma once
#include <napi.h>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include "cuda_driver.h"
#include "publisher.h"

namespace gpuring::cuda {

struct Mapping {
  uint64_t alloc_id = 0;  // the exporter's buffer id: tells a recycled allocation from the old one
  CUdeviceptr base = 0;
  int device = 0;
  uint64_t bytes = 0;    // size of the allocation
  uint32_t refs = 0;
  bool own = false;      // exported by this process: not opened, never closed
  uint64_t last_use = 0;
  Publisher from;        // the producer whose frame last named it
};

class IpcHandleCache {
 public:
  static IpcHandleCache &Get();

  // Remembers a handle this process exported (base pointer and device).
  void RememberExport(const CUipcMemHandle &h, uint64_t alloc_id, CUdeviceptr base, int device, uint64_t bytes);
  // The export of an allocation containing `p`, made earlier by this process:
  // the handle and mapping (own = true). A producer exports the same memory for
  // frame after frame; the caller must confirm the allocation is still the
  // one exported (its buffer id), since addresses are reused.
  bool FindExport(CUdeviceptr p, CUipcMemHandle *h, Mapping *m);
  // Maps `h` on `device` (opening it if needed) and takes a reference. A cached
  // mapping of the same handle but another allocation id is stale (the exporter
  // freed and reallocated at the same address): it is closed and reopened.
  Mapping Acquire(Napi::Env env, const CUipcMemHandle &h, uint64_t alloc_id, int device, Publisher from);
  void Release(const CUipcMemHandle &h);
  // Closes the unreferenced mappings last named by a producer of `segment`
  // that is no longer `live` (it closed or died): they would otherwise keep
  // its memory allocated until the cache's bounds pushed them out.
  void ForgetDeadPublishers(const std::string *segment, const LivePublisher &live);
  Napi::Object Stats(Napi::Env env);
  void SetLimits(size_t max_entries, uint64_t max_bytes);

 private:
  struct Key {
    CUipcMemHandle h;
    bool operator<(const Key &o) const { return memcmp(h.reserved, o.h.reserved, sizeof h.reserved) < 0; }
  };
  using Entry = std::pair<Key, Mapping>;
  void EvictLocked();
  void CloseIdleLocked(std::unique_lock<std::mutex> &lock);
  void ScheduleCloseLocked(std::map<Key, Mapping>::iterator it);
  // Takes back a pending close of `h` for the same allocation, or waits out one
  // for another allocation. Returns the taken-back mapping's entry, or end().
  std::map<Key, Mapping>::iterator SettlePendingLocked(std::unique_lock<std::mutex> &lock, const CUipcMemHandle &h, uint64_t alloc_id);
  bool PendingLocked(const CUipcMemHandle &h) const;
  void CloserLoop();
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Entry> closing_;    // waiting for the closer thread
  bool closing_current_ = false;  // the closer holds `current_` outside the lock
  Entry current_{};
  bool closer_started_ = false;
  std::map<Key, Mapping> entries_;
  std::map<CUdeviceptr, Key> exports_;  // by base address
  uint64_t clock_ = 0, opens_ = 0, closes_ = 0, hits_ = 0, mapped_bytes_ = 0;
  size_t max_entries_ = 256;
  uint64_t max_bytes_ = 64ull << 30;
};

}  // namespace gpuring::cuda
