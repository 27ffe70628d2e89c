#include "descriptor_channels.h"
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "errors.h"
#include "pool_memory.h"
#include "vmm_memory.h"

namespace gpuring {

namespace {
uint32_t LookUp(void *, uint16_t kind, uint64_t id, int *fds, uint64_t *sizes) {
  if (kind == GPR_MEM_CUDA_VMM) return cuda::VmmAllocations::Get().Descriptors(id, fds, sizes);
  if (kind != GPR_MEM_CUDA_POOL || (fds[0] = cuda::PoolExports::Get().Descriptor(id)) < 0) return 0;
  return 1;
}
}  // namespace

DescriptorChannels &DescriptorChannels::Get() {
  // Never destroyed: the thread serves until the process exits.
  static DescriptorChannels *channels = new DescriptorChannels();
  return *channels;
}

void DescriptorChannels::Add(Napi::Env env, const gpr_segment *seg, uint32_t index, uint32_t gen) {
  int fd = -1;
  Check(env, [&](gpr_error *e) { return (fd = gpr_channel_listen(seg, index, gen, e)) < 0 ? -1 : 0; });
  fcntl(fd, F_SETFL, O_NONBLOCK);  // a connection poll saw may be gone by accept
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.push_back({seg, fd, index, gen});
  if (wake_fd_ < 0) {
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    thread_ = std::thread([this] { Serve(); });
    thread_.detach();
  }
  Wake();
}

void DescriptorChannels::Remove(const gpr_segment *seg) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (it->seg != seg) {
      ++it;
      continue;
    }
    close(it->fd);
    it = listeners_.erase(it);
  }
  Wake();
}

bool DescriptorChannels::Serves(const std::string &segment, uint32_t index, uint32_t gen) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Listener &l : listeners_)
    if (l.index == index && l.gen == gen && segment == l.seg->name) return true;
  return false;
}

void DescriptorChannels::Wake() {
  uint64_t one = 1;
  if (wake_fd_ >= 0 && write(wake_fd_, &one, sizeof one) < 0) {
  }
}

// Polls the wake-up descriptor and every listener; answers one connection at
// a time under the lock. The poll set is rebuilt after every wake-up, since
// Add and Remove change it.
void DescriptorChannels::Serve() {
  std::vector<pollfd> fds;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
      for (const Listener &l : listeners_) fds.push_back({l.fd, POLLIN, 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0) continue;
    uint64_t drained;
    if (fds[0].revents && read(wake_fd_, &drained, sizeof drained) < 0) {
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 1; i < fds.size(); i++) {
      if (!fds[i].revents) continue;
      for (const Listener &l : listeners_) {
        if (l.fd != fds[i].fd) continue;  // removed meanwhile
        int conn = accept4(l.fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) break;
        gpr_channel_answer(l.seg, conn, LookUp, nullptr);
        close(conn);
        break;
      }
    }
  }
}

}  // namespace gpuring
