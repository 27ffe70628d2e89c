#include "stream_release.h"
#include <memory>
#include "cuda_context.h"
#include "ipc_handle_cache.h"

namespace gpuring {

void StreamReleases::Queue(Napi::Env env, gpr_segment *seg, uint32_t me, uint64_t pos, int device, cuda::CUstream stream,
                           std::vector<cuda::CUipcMemHandle> mappings) {
  cuda::ScopedContext ctx(env, device);
  auto pending = std::make_unique<Pending>(Pending{this, seg, me, pos, std::move(mappings)});
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_++;
  }
  cuda::CUresult rc = ctx.driver().cuLaunchHostFunc(stream, Run, pending.get());
  if (rc == cuda::CUDA_SUCCESS) {
    pending.release();  // Run owns it now
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_--;
  }
  cuda::Check(env, rc, "cuLaunchHostFunc");
}

// On the driver's callback thread. A lease that a sweeper ended meanwhile (it
// took this process for dead) fails the CAS harmlessly.
void StreamReleases::Run(void *arg) {
  std::unique_ptr<Pending> p(static_cast<Pending *>(arg));
  gpr_ring_release(p->seg, p->me, p->pos);
  StreamReleases &self = *p->owner;
  std::lock_guard<std::mutex> lock(self.mu_);
  self.dropped_.insert(self.dropped_.end(), p->mappings.begin(), p->mappings.end());
  self.in_flight_--;
  self.done_.notify_all();  // under the lock: the waiter cannot destroy us before we let go
}

void StreamReleases::Collect() {
  std::vector<cuda::CUipcMemHandle> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dropped_.empty()) return;
    dropped.swap(dropped_);
  }
  for (const auto &h : dropped) cuda::IpcHandleCache::Get().Release(h);
}

void StreamReleases::WaitAll() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return in_flight_ == 0; });
  }
  Collect();
}

}  // namespace gpuring
