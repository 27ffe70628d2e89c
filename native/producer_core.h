// ProducerCore: one producer participant. Owns its host arenas, publishes frame
// bodies into the ring, and reclaims a frame's memory only after its slot was
// released. Publishing takes the fast path on the JS thread; when the ring is
// full the request waits on the core's thread (backpressure) until space
// appears, its deadline passes, or the producer closes.
#pragma once
#include <napi.h>
#include <deque>
#include <map>
#include <string>
#include <memory>
#include <vector>
#include "attachment.h"
#include "core_thread.h"
#include "gpuring.h"

namespace gpuring {

struct ProducerState : Attachment, std::enable_shared_from_this<ProducerState> {
  gpr_arena_pool pool{};
  uint64_t next_frame_id = 1;
  CoreThread thread;
  SweepClock sweeps{250000000ull};

  struct Frame {
    uint64_t id;
    uint64_t pos;
    std::vector<gpr_allocation> allocs;  // body first, then column buffers
  };
  struct Pending {
    uint64_t request;
    uint64_t deadline_ns;
    gpr_frame_ref ref;
    std::vector<gpr_allocation> allocs;
  };
  // Guarded by thread.mu:
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> loose;  // allocated, not yet published
  std::deque<Frame> inflight;
  std::deque<Pending> pending;
  std::vector<uint64_t> released;      // frame ids not yet reported to JS
  std::map<uint64_t, Napi::Promise::Deferred> deferred;  // JS thread only
  Napi::FunctionReference on_release;  // JS thread only
  uint64_t next_request = 1;

  std::atomic<bool> has_listener{false};
  // Someone waits for releases as they happen (drain(), a 'release' listener,
  // releases()): the thread then sleeps on the ring's futex, and every release
  // wakes it. Otherwise it reaps every kLazyReapMs and at each publish, and
  // consumers' releases cost them no system call and no wake-up of ours.
  std::atomic<bool> prompt{false};

  size_t ReapLocked();
  bool PublishPendingLocked();
  void ExpirePendingLocked();
  void ReturnAllocsLocked(const std::vector<gpr_allocation> &allocs);
  void Loop();
  void FinishPending(uint64_t request, uint64_t frame_id, gpr_code code, std::string why);
  void FlushReleases();
  void Shutdown();
};

class ProducerCore : public Napi::ObjectWrap<ProducerCore> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit ProducerCore(const Napi::CallbackInfo &info);
  ~ProducerCore() override;

 private:
  Napi::Value Allocate(const Napi::CallbackInfo &info);
  Napi::Value Free(const Napi::CallbackInfo &info);
  Napi::Value ArenaBuffer(const Napi::CallbackInfo &info);
  Napi::Value ArenaName(const Napi::CallbackInfo &info);
  Napi::Value Publish(const Napi::CallbackInfo &info);
  Napi::Value PublishMany(const Napi::CallbackInfo &info);
  Napi::Uint8Array ValidBody(Napi::Env env, Napi::Value value);
  Napi::Value Enqueue(Napi::Env env, const uint8_t *body, size_t length, std::vector<gpr_allocation> allocs,
                      uint64_t tag, double timeout_ms);
  Napi::Value OnRelease(const Napi::CallbackInfo &info);
  Napi::Value Stats(const Napi::CallbackInfo &info);
  Napi::Value KeepAlive(const Napi::CallbackInfo &info);
  Napi::Value PromptReleases(const Napi::CallbackInfo &info);
  Napi::Value TakeReleased(const Napi::CallbackInfo &info);
  Napi::Value Close(const Napi::CallbackInfo &info);
  void RequireOpen(Napi::Env env) const;

  std::shared_ptr<ProducerState> s_;
  bool closed_ = false;
  napi_env env_ = nullptr;
};

}  // namespace gpuring
