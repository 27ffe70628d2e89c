// ProducerCore: one producer participant, driven entirely from the JS thread.
// Owns its host arenas, publishes frame bodies into the ring, and reclaims a
// frame's memory only after its slot was released. When the ring is full a
// request waits in order (backpressure) and the producer sleeps on its
// Doorbell's SPACE bell, which the event loop polls: a consumer's release wakes
// the loop directly (one wake-up, no waiter thread), until space appears, the
// request's deadline passes, or the producer closes.
#pragma once
#include <napi.h>
#include <deque>
#include <map>
#include <string>
#include <memory>
#include <optional>
#include <vector>
#include "direct_methods.h"
#include "loop_participant.h"
#include "gpuring.h"

namespace gpuring {

// A frame's memory: the allocation its body was copied into, and the column
// buffers it took over from JS, if any. The body's is held inline, so that a
// frame of one allocation costs no heap allocation (malloc and free were a
// sixth of a publishMany flood's CPU).
struct FrameAllocations {
  gpr_allocation body{};
  std::vector<gpr_allocation> columns;
};

struct ProducerState : LoopParticipant {
  gpr_arena_pool pool{};
  uint64_t next_frame_id = 1;

  struct Frame {
    uint64_t id;
    uint64_t pos;
    FrameAllocations allocs;
  };
  struct Pending {
    uint64_t request;
    uint64_t deadline_ns;
    gpr_frame_ref ref;
    FrameAllocations allocs;
  };
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> loose;  // allocated, not yet published
  std::deque<Frame> inflight;
  std::deque<Pending> pending;
  std::vector<uint64_t> released;      // frame ids not yet reported to JS
  double released_count = 0;           // released.size(), as JS reads it (ReleasedCountView)
  std::map<uint64_t, Napi::Promise::Deferred> deferred;
  Napi::FunctionReference on_release;
  uint64_t next_request = 1;

  bool has_listener = false;
  // Someone waits for releases as they happen (drain(), a 'release' listener,
  // releases()): the producer then sleeps on its SPACE bell, which every
  // release rings. Otherwise it reaps at each publish, and consumers' releases
  // cost them no system call and no wake-up of ours.
  bool prompt = false;
  uint32_t holds = 0;  // drains in progress: the watch keeps the process alive
  bool serves_descriptors = false;  // its descriptor channel is bound (DescriptorChannels)

  size_t Reap(bool full);
  void Retire(const Frame &f);
  size_t ReapOldest();
  size_t ReapOnWake();
  int Alloc(uint64_t bytes, gpr_allocation *out, gpr_error *err);
  size_t reaps_until_full = 0;  // ReapOldest calls before its next full pass
  bool PublishPending(Napi::Env env);
  void ExpirePending(Napi::Env env);
  void ReturnAllocs(const FrameAllocations &allocs);
  void Finish(Napi::Env env, uint64_t request, uint64_t frame_id, gpr_code code, const std::string &why);
  Napi::Float64Array TakeReleased(Napi::Env env);
  void FlushReleases(Napi::Env env);
  bool Waiting() const;
  uint64_t NextWakeMs() const;
  void Service(Napi::Env env);
  void OnWake() override;
  void Shutdown() override;
  void ServeDescriptorsIfNeeded(Napi::Env env);
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
  Napi::Value Prepare(const Napi::CallbackInfo &info);
  Napi::Value PublishPrepared(const Napi::CallbackInfo &info);
  Napi::Value PublishMany(const Napi::CallbackInfo &info);
  Napi::Uint8Array ValidBody(Napi::Env env, Napi::Value value);
  Napi::Value PublishStaged(const Napi::CallbackInfo &info);
  bool PlaceStaged(const uint8_t *body, const gpr_allocation &a, size_t columns_at, size_t staged);
  const uint8_t *ArenaHandle(uint32_t arena);
  void CopyBody(Napi::Env env, const uint8_t *body, size_t length, gpr_allocation *out);
  // With `uncounted`, a frame that goes into the ring at once adds 1 there
  // instead of to the entry's `published` (the caller adds the batch).
  Napi::Value Enqueue(Napi::Env env, FrameAllocations allocs, size_t length, uint64_t tag, double timeout_ms,
                      uint32_t rung, uint64_t *uncounted = nullptr);
  void ThrowRingFull(Napi::Env env);
  // Whom a publish's heads-up rang, and whether this producer had been idle
  // until then (see YieldToWoken).
  struct HeadsUpGiven {
    uint32_t rung;
    bool after_idle;
  };
  // How long a producer must have been idle before a publish that woke a
  // consumer yields its CPU to it (YieldToWoken).
  static constexpr uint64_t kYieldAfterIdleNs = 50'000;
  HeadsUpGiven HeadsUp();
  // The rest of a one-frame publish: the body copied into the arena and the frame enqueued.
  Napi::Value Send(Napi::Env env, const uint8_t *body, size_t length, FrameAllocations allocs, uint64_t tag,
                   double timeout_ms, HeadsUpGiven heads_up);
  // Its last step, once the body is in allocs.body: the id, a promise while it
  // waits for space, or RING_FULL with timeout 0.
  Napi::Value Commit(Napi::Env env, FrameAllocations allocs, size_t length, uint64_t tag, double timeout_ms,
                     HeadsUpGiven heads_up);
  Napi::Value GiveHeadsUp(const Napi::CallbackInfo &info);
  std::optional<HeadsUpGiven> early_;  // given by headsUp(), not yet passed to a publish
  uint64_t early_ns_ = 0;              // CLOCK_MONOTONIC when headsUp() gave it
  static constexpr uint64_t kEarlyHeadsUpNs = 1'000'000;
  void YieldToWoken(HeadsUpGiven given, bool ready);
  Napi::Value OnRelease(const Napi::CallbackInfo &info);
  Napi::Value Stats(const Napi::CallbackInfo &info);
  Napi::Value Subscribers(const Napi::CallbackInfo &info);
  Napi::Value KeepAlive(const Napi::CallbackInfo &info);
  Napi::Value PromptReleases(const Napi::CallbackInfo &info);
  Napi::Value TakeReleased(const Napi::CallbackInfo &info);
  Napi::Value Close(const Napi::CallbackInfo &info);
  void RequireOpen(Napi::Env env) const;

  std::shared_ptr<ProducerState> s_;
  bool closed_ = false;
  uint64_t last_publish_ns_ = 0;  // CLOCK_MONOTONIC when the last publish call returned
  uint32_t handle_arena_ = UINT32_MAX;  // the arena whose handle handle_ holds (ArenaHandle)
  uint8_t handle_[GPR_HANDLE_BYTES] = {};
  napi_env env_ = nullptr;
  DirectMethods<ProducerCore> direct_{this};
};

}  // namespace gpuring
