#include "opened_events.h"
#include <algorithm>
#include <cstring>

namespace gpuring::cuda {

void OpenedEvents::AddOwn(int device, const std::string &handle, CUevent event) { own_[{device, handle}] = event; }

CUresult OpenedEvents::Find(const Driver &d, int device, const std::string &handle, CUevent *out) {
  auto own = own_.find({device, handle});
  if (own != own_.end()) return *out = own->second, CUDA_SUCCESS;
  Foreign &f = foreign_[device];
  auto hit = f.by_handle.find(handle);
  if (hit != f.by_handle.end()) {
    f.order.splice(f.order.begin(), f.order, hit->second.second);
    return *out = hit->second.first, CUDA_SUCCESS;
  }
  CUipcEventHandle h{};
  memcpy(h.reserved, handle.data(), std::min(handle.size(), sizeof h.reserved));
  CUresult rc = d.cuIpcOpenEventHandle(out, h);
  if (rc != CUDA_SUCCESS) return rc;
  if (f.by_handle.size() >= kPerDevice) {
    d.cuEventDestroy(f.by_handle[f.order.back()].first);
    f.by_handle.erase(f.order.back());
    f.order.pop_back();
  }
  f.order.push_front(handle);
  f.by_handle[handle] = {*out, f.order.begin()};
  return CUDA_SUCCESS;
}

size_t OpenedEvents::Count() const {
  size_t n = 0;
  for (const auto &[device, f] : foreign_) n += f.by_handle.size();
  return n;
}

}  // namespace gpuring::cuda
