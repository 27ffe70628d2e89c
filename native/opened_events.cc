#include "opened_events.h"
#include <algorithm>
#include <cstring>

namespace gpuring::cuda {

void OpenedEvents::AddOwn(int device, const std::string &handle, CUevent event) { own_[{device, handle}] = event; }

// Other processes' events first: a consumer's every frame looks one up, and
// only a miss pays for the handle's own copy to look among this process's.
CUresult OpenedEvents::Find(const Driver &d, int device, const std::string &key, CUevent *out) {
  Foreign &f = foreign_[device];
  auto hit = f.by_key.find(key);
  if (hit != f.by_key.end()) {
    f.order.splice(f.order.begin(), f.order, hit->second.second);
    return *out = hit->second.first, CUDA_SUCCESS;
  }
  CUipcEventHandle h{};
  memcpy(h.reserved, key.data(), std::min(key.size(), sizeof h.reserved));
  auto own = own_.find({device, std::string(h.reserved, sizeof h.reserved)});
  if (own != own_.end()) return *out = own->second, CUDA_SUCCESS;
  CUresult rc = d.cuIpcOpenEventHandle(out, h);
  if (rc == CUDA_SUCCESS) Keep(d, f, key, *out);
  return rc;
}

void OpenedEvents::Keep(const Driver &d, Foreign &f, const std::string &key, CUevent event) {
  if (f.by_key.size() >= kPerDevice) {
    d.cuEventDestroy(f.by_key[f.order.back()].first);
    f.by_key.erase(f.order.back());
    f.order.pop_back();
  }
  f.order.push_front(key);
  f.by_key[key] = {event, f.order.begin()};
}

size_t OpenedEvents::Count() const {
  size_t n = 0;
  for (const auto &[device, f] : foreign_) n += f.by_key.size();
  return n;
}

}  // namespace gpuring::cuda
