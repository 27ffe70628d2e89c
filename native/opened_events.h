// OpenedEvents: the interprocess events this process waits on, by device and
// key, so that a frame's wait opens nothing when its producer's event was
// opened before. Producers pool their events (SPEC.md §9a), so a handful per
// producer come round again and again.
//
// A key is the event's 64-byte handle, which the caller may follow with the
// producer's identity (a Frame adds its entry, generation and ring): a handle
// names its event only while that producer lives, and a later process may be
// given the same bytes, which must not find the dead one's event.
//
// A producer that makes a new event per frame, against §9a, or a long run of
// producers that come and go, would otherwise grow the process by one opened
// event per frame: each device keeps at most kPerDevice of them, and the least
// recently used goes. Destroying an event a stream already waits on is allowed
// (the wait holds what it needs), and no caller keeps one past its call.
//
// This process's own events are found under their handles too (CUDA will not
// open a handle in the process that made it) and are never destroyed here:
// their pool owns them. Not thread-safe: the caller holds the event pool's lock.
#pragma once
#include <list>
#include <map>
#include <string>
#include "cuda_driver.h"

namespace gpuring::cuda {

class OpenedEvents {
 public:
  static constexpr size_t kPerDevice = 256;

  // Files an event this process made under its own handle.
  void AddOwn(int device, const std::string &handle, CUevent event);
  // The event `key` (its handle first) names on `device`, whose context is
  // current: this process's own, or one opened before, or opened now (the
  // device's least recently used foreign event destroyed when past
  // kPerDevice). On failure the driver's result, and nothing cached.
  CUresult Find(const Driver &d, int device, const std::string &key, CUevent *out);
  // Foreign events held open now, on every device.
  size_t Count() const;

 private:
  struct Foreign {
    std::list<std::string> order;  // keys, most recently used first
    std::map<std::string, std::pair<CUevent, std::list<std::string>::iterator>> by_key;
  };
  // Files a newly opened event first, destroying the least recently used past kPerDevice.
  static void Keep(const Driver &d, Foreign &f, const std::string &key, CUevent event);

  std::map<std::pair<int, std::string>, CUevent> own_;
  std::map<int, Foreign> foreign_;
};

}  // namespace gpuring::cuda
