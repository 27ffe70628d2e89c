// The dedicated waiter thread shared by ProducerCore and ConsumerCore. Waiting
// happens here, never on the event loop or the libuv pool; results go back to
// JS through a ThreadSafeFunction. Posted callbacks hold a shared_ptr to the
// state they touch, so none outlives what it uses; during environment teardown
// they are called without an env and do nothing.
#pragma once
#include <napi.h>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include "gpuring.h"

namespace gpuring {

class CoreThread {
 public:
  using JsTask = std::function<void(Napi::Env)>;

  void Start(Napi::Env env, const char *name, std::function<void()> loop) {
    tsfn_ = Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo &) {}),
                                          name, 0, 1);
    tsfn_.Unref(env);
    thread_ = std::thread(std::move(loop));
  }

  // Runs `task` on the JS thread. Never blocks (unbounded queue).
  void Post(JsTask task) {
    tsfn_.NonBlockingCall([task = std::move(task)](Napi::Env env, Napi::Function) {
      if (env != nullptr) task(env);
    });
  }

  // While JS waits on this thread's work (a pending call, a drain) the process
  // must stay alive; once nothing is pending it may exit even if the user
  // forgot to close. Each reason to wait retains once and drops once.
  void Retain(Napi::Env env) {
    if (!Stopping() && holds_++ == 0) tsfn_.Ref(env);
  }
  void Drop(Napi::Env env) {
    if (!Stopping() && holds_ > 0 && --holds_ == 0) tsfn_.Unref(env);
  }

  bool Stopping() const { return stop_.load(std::memory_order_acquire); }

  // Sets the stop flag, lets `wake` interrupt the thread's wait, and joins it.
  void Stop(const std::function<void()> &wake) {
    if (stop_.exchange(true)) return;
    cv_.notify_all();
    wake();
    if (thread_.joinable()) thread_.join();
    tsfn_.Release();
  }

  std::mutex mu;
  std::condition_variable cv_;

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  Napi::ThreadSafeFunction tsfn_;
  uint32_t holds_ = 0;  // JS thread only
};

// Starts a core's waiter thread and makes environment teardown (process exit
// without close) shut it down: the thread joined, the participant detached.
template <typename State>
void StartCore(Napi::Env env, const std::shared_ptr<State> &state, const char *name) {
  state->thread.Start(env, name, [state] { state->Loop(); });
  env.AddCleanupHook([state] { state->Shutdown(); });
}

// Time-based throttle for sweeps run from waiting loops.
class SweepClock {
 public:
  explicit SweepClock(uint64_t interval_ns) : interval_(interval_ns) {}
  bool Due() {
    uint64_t now = gpr_monotonic_ns();
    if (now - last_ < interval_) return false;
    last_ = now;
    return true;
  }

 private:
  uint64_t interval_;
  uint64_t last_ = 0;
};

}  // namespace gpuring
