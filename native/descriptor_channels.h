// DescriptorChannels: the descriptor channels (SPEC.md §9c) of this process's
// producers, served by one thread. A producer binds its channel at its first
// publish after this process exported pool memory (PoolExports::Any()), so
// producers of host or legacy-IPC frames never open a socket. Answers come
// from PoolExports; each request is checked against the segment of the
// producer whose channel it came in on.
#pragma once
#include <napi.h>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "gpuring.h"

namespace gpuring {

class DescriptorChannels {
 public:
  static DescriptorChannels &Get();
  // Binds producer (index, gen)'s channel; `seg` must stay mapped until Remove.
  void Add(Napi::Env env, const gpr_segment *seg, uint32_t index, uint32_t gen);
  // Unbinds every channel of `seg` and returns once no answer uses it.
  void Remove(const gpr_segment *seg);
  // Whether producer (index, gen) of ring `segment` is one of this process's.
  bool Serves(const std::string &segment, uint32_t index, uint32_t gen);
  // Runs `fn` while no answer is being sent: descriptors closed there are never mid-send.
  template <typename Fn>
  void WhileSilent(Fn &&fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fn();
  }

 private:
  struct Listener {
    const gpr_segment *seg;
    int fd;
    uint32_t index, gen;
  };
  void Serve();
  void Wake();
  std::mutex mu_;  // held while answering, so Remove never frees a segment in use
  std::vector<Listener> listeners_;
  int wake_fd_ = -1;
  std::thread thread_;
};

}  // namespace gpuring
