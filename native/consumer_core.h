// ConsumerCore: one consumer participant. A frame is taken from the ring
// (CLAIMED), its body copied out of the producer's arena, and only when the JS
// side actually receives it does the slot become LEASED. A frame taken for a
// request that was meanwhile aborted or timed out is handed back for another
// consumer (or this one) to take: nothing is lost and nothing delivered twice.
#pragma once
#include <napi.h>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include "arena_map.h"
#include "attachment.h"
#include "core_thread.h"
#include "gpuring.h"
#include "stream_release.h"

namespace gpuring {

struct ConsumerState : Attachment, std::enable_shared_from_this<ConsumerState> {
  CoreThread thread;
  SweepClock sweeps{250000000ull};
  std::unique_ptr<BodyReader> bodies;
  StreamReleases stream_releases;

  struct Request {
    uint64_t id;
    uint64_t deadline_ns;
  };
  std::deque<Request> pending;                           // guarded by thread.mu
  std::atomic<uint64_t> cancel_epoch{0};                 // bumped when a request goes away
  std::map<uint64_t, Napi::Promise::Deferred> deferred;  // JS thread only
  uint64_t next_request = 1;

  void Loop();
  bool WaitForFront(const Request &front);
  void Deliver(Napi::Env env, uint64_t request, uint64_t pos, const gpr_frame_ref &ref);
  void Fail(uint64_t request, gpr_code code, std::string why);
  Napi::Value Receive(Napi::Env env, uint64_t pos, const gpr_frame_ref &ref);
  void Shutdown();
};

class ConsumerCore : public Napi::ObjectWrap<ConsumerCore> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit ConsumerCore(const Napi::CallbackInfo &info);
  ~ConsumerCore() override;

 private:
  Napi::Value TryNext(const Napi::CallbackInfo &info);
  Napi::Value Wait(const Napi::CallbackInfo &info);
  Napi::Value Cancel(const Napi::CallbackInfo &info);
  Napi::Value Release(const Napi::CallbackInfo &info);
  Napi::Value ReleaseAfter(const Napi::CallbackInfo &info);
  Napi::Value OpenArena(const Napi::CallbackInfo &info);
  Napi::Value Close(const Napi::CallbackInfo &info);
  void RequireOpen(Napi::Env env) const;

  std::shared_ptr<ConsumerState> s_;
  bool closed_ = false;
};

}  // namespace gpuring
