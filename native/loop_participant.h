// A participant driven from the JS thread: its attachment, its Doorbell, and
// the way a wake-up runs on the event loop. Shared by the producer and consumer
// cores, which differ only in what they serve when woken.
#pragma once
#include <napi.h>
#include <atomic>
#include <functional>
#include <memory>
#include "attachment.h"
#include "doorbell.h"
#include "lent_mappings.h"

namespace gpuring {

struct LoopParticipant : Attachment {
  LoopParticipant() { alive++; }
  virtual ~LoopParticipant() { alive--; }
  // Producer and consumer states not yet freed in this process (liveParticipants(), for the leak tests).
  static inline std::atomic<int64_t> alive{0};
  napi_env env = nullptr;
  std::unique_ptr<Napi::AsyncContext> async;
  std::unique_ptr<Doorbell> bell;
  // A sleeper still wakes this often: to sweep for dead participants (whose
  // claims or leases hold the ring up), to expire requests, and so that a ring
  // lost to a peer outside our network namespace costs one tick, not a hang.
  uint64_t tick_ms = 250;
  uint64_t last_sweep_ns = 0;
  uint64_t sweeps = 0;  // how many ticks swept: what a core does once per sweep keys on it
  bool exit_hooked = false;
  bool shut = false;  // Shutdown() ran: no bell, no entry; a wake-up serves nothing more
  // What JS reads of the shared memory directly: taken back by close().
  LentMappings lent;

  // Creates the doorbell, whose rings and ticks call OnWake() on the event
  // loop. The wake-up holds `self` (this state) until it ends: the JS it runs
  // may drop the core that owns the state.
  void StartBell(Napi::Env env, const char *resource, uint32_t tick_ms, std::weak_ptr<LoopParticipant> self);
  // Runs on the event loop when the bell rang or the tick passed: serves
  // through Woken().
  virtual void OnWake() = 0;
  // Runs `serve` for a wake-up, then Tidy(). The
  // callback scope makes promises resolved there run their continuations at
  // once. Nothing may escape a libuv callback: while Node tears the
  // environment down it still runs the loop once (before our cleanup hook stops
  // these handles), and then JS cannot be called; waits die with the process.
  // Otherwise what `serve` throws (a 'release' listener's error) becomes the
  // process's uncaught exception, as a throwing listener's does anywhere in
  // Node, and the next turn of the loop serves again: the waits keep their
  // wake-up.
  void Woken(const std::function<void(Napi::Env)> &serve);
  // What a wake-up does once it has served, off the path of the frame that
  // woke it (see Woken): sweeps when due. A core adds its own upkeep.
  virtual void Tidy() { SweepIfDue(); }
  // Sweeps (and releases a subscriber's stray shares) when a tick has passed
  // since the last sweep. Wake-ups call it, and so does a poll that found
  // nothing: a caller that only polls never sleeps, so without it nobody in
  // its process would repair the dead producer's slot it is stuck behind.
  void SweepIfDue();
  // Leaves the ring: gives the entry back, stops the doorbell. Idempotent.
  virtual void Shutdown() = 0;
  // Shuts down as Node tears the environment down, for a process that exits
  // without close(). close() and the core's finalizer take the hook back
  // (UnhookExit): a hook holding the state would keep every closed
  // participant's state, and what it references, until the process ends.
  void HookExit();
  void UnhookExit();
  // Whether this process may run on 4 or more CPUs, so that a core polling
  // or waking early leaves a CPU to the process it waits for.
  static bool SpareCores();
  // Whether JS can run in `env` now: not while Node tears it down (or stops a worker).
  static bool JsRuns(napi_env env);

 private:
  static void AtExit(void *participant);
  void Failed(Napi::Env env, napi_value error);
};

}  // namespace gpuring
