// ConsumerCore: one consumer participant, driven entirely from the JS thread.
//
// A frame is taken from the ring (CLAIMED), its body copied out of the
// producer's arena and validated, and it becomes LEASED as it is handed to JS.
// Requests that find the ring empty wait in order; the consumer then sleeps on
// its Doorbell, which the event loop polls: a producer's publish wakes the loop
// directly (one wake-up, no waiter thread), and the callback hands frames to
// the waiting requests in order. A request that times out or is aborted simply
// leaves the queue: no frame is ever taken for it.
#pragma once
#include <napi.h>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>
#include "arena_map.h"
#include "direct_methods.h"
#include "loop_participant.h"
#include "gpuring.h"
#include "stream_release.h"

namespace gpuring {

// Where records handed to JS one at a time are written: chunks of memory JS
// can see, bump-allocated, so a frame costs no ArrayBuffer of its own (an
// allocation, and work for the collector, per frame). A chunk is never
// reused: frames' views keep it alive until the last of them is collected.
class RecordChunks {
 public:
  static constexpr size_t kChunkBytes = 64 << 10;
  // Makes room for `bytes`. Returns the chunk if JS must take it (it is new),
  // else an empty value.
  Napi::Value Reserve(Napi::Env env, size_t bytes);
  uint8_t *Next() const { return data_ + used_; }
  // A first chunk, held by JS from the start (ConsumerCore.recordChunk), so
  // that even the consumer's first wait can offer a spare Frame.
  Napi::ArrayBuffer First(Napi::Env env);
  // Takes the reserved bytes; returns their offset in the chunk, which JS now holds.
  size_t Commit(size_t bytes);
  // Where the next record goes, shared with JS (ConsumerCore.recordCursor):
  // [0] the chunk's serial (1 for the first; a new chunk gets the next),
  // [1] the offset in it. JS makes a wait()'s spare Frame there (see spare).
  void Share(double *cursor) { cursor_ = cursor; }
  double Serial() const { return static_cast<double>(serial_); }
  double Used() const { return static_cast<double>(used_); }

 private:
  void Publish() const {
    if (cursor_) cursor_[0] = Serial(), cursor_[1] = Used();
  }
  Napi::Reference<Napi::ArrayBuffer> chunk_;
  uint8_t *data_ = nullptr;
  size_t used_ = 0;
  size_t size_ = 0;
  bool handed_ = false;
  uint64_t serial_ = 0;
  double *cursor_ = nullptr;
};

struct ConsumerState : LoopParticipant {
  struct Request {
    uint64_t id;
    uint64_t deadline_ns;
    Napi::Promise::Deferred deferred;
    // Non-zero: the wait of a `for await` loop (lib/consumer-frames.ts), which
    // settles as an iterator result, so that the loop's body runs one microtask
    // after the wake-up, as next()'s caller does: {value: frame, done: false},
    // or {done: true} once the consumer closed or the loop stopped (CLOSED,
    // ABORTED); other errors reject it.
    uint32_t iteration = 0;
  };

  std::unique_ptr<BodyReader> bodies;
  RecordChunks records;
  StreamReleases stream_releases;
  std::deque<Request> pending;
  uint64_t next_request = 1;
  std::optional<Napi::Error> held_error;  // a bad frame met after good ones in a batch
  // Optional JS functions a waiting request is settled through: received(record)
  // makes what the promise resolves to, failed(error) what it rejects with. The
  // caller then awaits the promise itself, one microtask after the wake-up
  // instead of one per layer of async functions that would convert it.
  Napi::FunctionReference received, failed;
  // A Frame JS made before it waited (lib/spare-frame.ts), over the place in
  // its record chunk where the next record goes: the record written exactly
  // there (same chunk, same offset) becomes that Frame, handed over with no
  // call into JS, and its pos goes to the Frame's lease: into element
  // `spare_cell` of the cells JS shares (spare_cells, -1 until then). Held
  // strongly while a request waits, weakly otherwise: a consumer dropped
  // without close() can still be collected.
  Napi::ObjectReference spare;
  uint32_t spare_cell = 0;
  double spare_at = -1, spare_serial = -1;
  bool spare_held = false;
  // A `for await` wait's iterator result over the spare, `{value: spare, done:
  // false}`, made by JS before it slept: the wait settles with it, so no object
  // is made after the wake-up (making one there cost about 8 µs of caches the
  // sleep emptied after 2 ms asleep, H200 box). Held for the wait only; `spare_result_taken`:
  // the one whose spare the last Receive handed over, else empty.
  Napi::ObjectReference spare_result, spare_result_taken;
  void OfferSpare(Napi::Object frame, double at, uint32_t cell, Napi::Value result);
  // The spares' pos cells (lib/spare-frame.ts), shared once (and again when JS
  // grows them): writing one at a hand-over is a store, not a call.
  Napi::Reference<Napi::Float64Array> spare_cells;
  double *spare_cells_data = nullptr;
  size_t spare_cells_length = 0;
  // The spare, now the frame at `pos`, if the record just committed at `at` is its; else empty.
  Napi::Value TakeSpare(double at, uint64_t pos);
  // A blocked wait's spare (nextSync()): JS holds that Frame strongly itself,
  // so the core keeps only where it stands and its cell, for the call. A
  // record committed there is handed over as `true` (JS returns its Frame):
  // no reference to make before the sleep nor to read and drop between the
  // wake-up and JS (that was 0.5 µs of a 2.5 µs wake-up on a 2-core VM).
  struct HeldSpare {
    double at = -1, serial = -1;
    uint32_t cell = 0;
  } held_spare;
  void OfferHeldSpare(double at, uint32_t cell);
  bool TakeHeldSpare(double at, uint64_t pos);
  // No request waits: the doorbell stops and the spare is held weakly.
  void StopWaiting();
  void HoldSpareWeakly();
  Napi::Reference<Napi::Float64Array> record_cursor_view;
  uint64_t woken_ns = 0;  // CLOCK_MONOTONIC of the last wake-up (latency breakdowns)
  uint64_t forgotten_at_sweep = 0;
  uint32_t on_slow = GPR_ON_SLOW_BLOCK;  // broadcast rings: what producers do when it lags

  // gpr_ring_try_claim; in a broadcast ring, frames dropped for this consumer
  // (FRAMES_MISSED) or its eviction (EVICTED) are thrown, once, as an error
  // whose `missed` says how many it lost; the next claim goes on.
  int TryClaim(Napi::Env env, gpr_frame_ref *ref, uint64_t *pos);
  // Whether our entry was taken from us (SPEC.md §4, "Losing the entry"): the
  // leases it held went with it, so releasing them is no error.
  bool Lost() const { return !gpr_participant_held(&seg, me, gen); }
  // TryClaim, busy-polling while nothing is ready: for `spin_ns`, or, with
  // `follow_stream`, until no consumer has taken a frame for `spin_ns`;
  // between looks a pause, or (after a ring) giving up the CPU.
  enum class Between { kRelax, kYield };
  int ClaimWithin(Napi::Env env, gpr_frame_ref *ref, uint64_t *pos, uint64_t spin_ns, bool follow_stream = false,
                  Between between = Between::kRelax);

  // ClaimWithin(spin_ns), then, while nothing is ready, Service's sleep (look,
  // arm, look again) with this thread blocked on the doorbell (Doorbell::Block)
  // until `deadline_ns`, or until Node stops the thread's environment.
  enum class Blocked { kClaimed, kTimedOut, kStopping };
  Blocked ClaimBlocking(Napi::Env env, gpr_frame_ref *ref, uint64_t *pos, uint64_t spin_ns, uint64_t deadline_ns);
  // How often a blocked thread looks whether Node is stopping it at most: 50
  // ms, or GPURING_TEST_STOP_CHECK_MS, which tests that must prove a ring woke
  // the thread set long, so that a missed ring shows as a TIMEOUT.
  static uint64_t StopCheckMs();
  // Serves waiting requests from the ring in order, or the listener
  // (Deliver); sleeps if any remain.
  void Service(Napi::Env env);
  // A listener (Consumer.listen(), lib/frame-listener.ts): JS's
  // deliver(record) is called with each frame from the wake-up itself, or
  // deliver(undefined, error) with what taking one threw; no promise or
  // microtask lies between the wake-up and the caller's code. Empty when
  // none; a listener and waiting requests exclude each other. Strong, as a
  // waiting request's promise is: the listener keeps the consumer.
  Napi::FunctionReference listener;
  // JS's spare() for the listener: a spare Frame ([frame, at, cell], as
  // wait() is offered) made as the listener's wake-up goes to sleep, so that
  // the next wake-up hands it over rather than have JS make one on caches
  // the sleep emptied. Held as the listener is.
  Napi::FunctionReference listener_spare;
  // The application's handler itself: a record that landed in the spare is
  // already its Frame, so it goes there with no JS of ours in between (each
  // function on the way runs on cold caches after a sleep).
  Napi::FunctionReference listener_handler;
  void SleepListening();
  // The most frames one turn of the loop hands the listener: then timers and
  // I/O run, and the next turn goes on.
  static constexpr uint32_t kDeliverMax = 1024;
  // Counts listen() calls: a listener made inside a handler gets its first
  // frame from a later turn of the loop, not from the wake-up serving the old one.
  uint64_t listens = 0;
  void Deliver(Napi::Env env);
  // The next frame for a wake-up (0, else nothing is ready): a ring may be a
  // producer's heads-up, sent before its frame is READY (gpuring/doorbell.h),
  // so after one it polls kHeadsUpWaitNs rather than sleep again and need a
  // second wake-up; in a busy stream it polls BusySpinNs().
  int ClaimAwake(Napi::Env env, gpr_frame_ref *ref, uint64_t *pos);
  // Arms the doorbell and looks once more: true, disarmed, if a frame came
  // meanwhile (the producer is spared a ring); false, armed: sleep next.
  bool ArmOrClaim(Napi::Env env, gpr_frame_ref *ref, uint64_t *pos);
  void Resolve(Request &r, Napi::Value record);
  void Reject(Request &r, const Napi::Error &e);
  // Rejects the waiting requests `which` picks with ABORTED (a loop's settle as done) and drops them.
  void Abort(Napi::Env env, const std::function<bool(const Request &)> &which, const char *why);
  void OnWake() override;
  // Collects finished stream releases, and once per sweep lets go of dead
  // producers' device memory.
  void Housekeep();
  // After a wake-up has served (the bell rang or a tick passed), and where a
  // poll (tryNext, a batch) found nothing: a consumer that only polls never
  // sleeps, so it sweeps and housekeeps as a wake-up does.
  void Tidy() override {
    SweepIfDue();
    Housekeep();
  }
  void Expire(Napi::Env env);
  uint64_t NextWakeMs() const;
  // Copies, validates and leases the frame at `pos`; throws (having released
  // the frame) if it is malformed. Empty where the claim was taken back before
  // the lease (see Accept): the caller claims again.
  Napi::Value Receive(Napi::Env env, uint64_t pos, const gpr_frame_ref &ref);
  // False if the frame is malformed (released; `err` says why) or the claim
  // was taken back (`err` left clear): a sweeper that judged a previous
  // occupant of this entry dead, stalled between its check and its CAS, found
  // our claim at the same position (SPEC.md §5.2, Confirm). That frame is
  // READY again for any consumer, so handing it over would deliver it twice.
  bool Accept(uint64_t pos, const gpr_frame_ref &ref, uint8_t *record, gpr_error *err);
  // Bytes before each body in what JS receives (see Receive).
  static constexpr size_t kRecordBytes = 32;
  // How long a consumer woken by a ring waits for a frame before sleeping
  // again: a producer's heads-up comes before its frame, which a warm producer
  // makes READY within a few microseconds and a cold one (idle for
  // milliseconds, on a virtual machine) within about 20.
  static constexpr uint64_t kHeadsUpWaitNs = 20'000;
  // How recent a frame makes a stream busy, and how long a consumer in a busy
  // stream polls before it sleeps (BusySpinNs).
  static constexpr uint64_t kBusyStreamNs = 20'000;
  // The longest a poll that follows the stream blocks the event loop.
  static constexpr uint64_t kStreamPollMaxNs = 200'000;
  bool busy_poll = false;  // polls in busy streams (BusySpinNs); set at open
  uint64_t taken_ns = 0;   // CLOCK_MONOTONIC of the last frame taken, where busy_poll
  // Stamps taken_ns once per call that took frames, not per frame: a batch
  // of hundreds would read the clock hundreds of times for one answer.
  void Taken() {
    if (busy_poll) taken_ns = gpr_monotonic_ns();
  }
  uint64_t BusySpinNs() const;
  // Lets go of the device memory of producers that left this ring, which
  // this process still maps or imports with no frame holding it (publisher.h):
  // once per sweep, and when the consumer closes.
  void ForgetDeadPublishers();
  // Lets go of the arenas of producers that left, once no frame can refer to
  // them (gpr_arena_removed, SPEC.md §9). Until then a consumer that stays
  // open would keep their memory in /dev/shm.
  // Counts in arenas_taken_back what JS must no longer read from its cache.
  void ForgetRemovedArenas();
  Napi::Reference<Napi::Uint32Array> arenas_taken_back_view;  // ConsumerCore.arenasTakenBack
  uint32_t *arenas_taken_back = nullptr;
  void Shutdown() override;
  // Releases made without their space notification (a work-queue ring's
  // Release): one is owed, and sent before this consumer next takes a frame,
  // sleeps or leaves, or when JS calls notifySpace() (SPEC.md §6, Coalescing).
  // The word is JS's too (ConsumerCore.spaceOwed), so that the end-of-job check
  // costs no call where a take already sent it.
  Napi::Reference<Napi::Uint32Array> space_owed_view;
  uint32_t *space_owed = nullptr;
  void NotifySpaceOwed();
};

class ConsumerCore : public Napi::ObjectWrap<ConsumerCore> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit ConsumerCore(const Napi::CallbackInfo &info);
  ~ConsumerCore() override;

 private:
  Napi::Value TryNext(const Napi::CallbackInfo &info);
  Napi::Value TryNextMany(const Napi::CallbackInfo &info);
  Napi::Value NextSync(const Napi::CallbackInfo &info);
  Napi::Value Wait(const Napi::CallbackInfo &info);
  Napi::Value Cancel(const Napi::CallbackInfo &info);
  Napi::Value CancelIteration(const Napi::CallbackInfo &info);
  Napi::Value Release(const Napi::CallbackInfo &info);
  Napi::Value NotifySpace(const Napi::CallbackInfo &info);
  Napi::Value ReleaseAfter(const Napi::CallbackInfo &info);
  Napi::Value HandBack(const Napi::CallbackInfo &info);
  Napi::Value OpenArena(const Napi::CallbackInfo &info);
  Napi::Value OpenArenaWindow(const Napi::CallbackInfo &info);
  Napi::Value Close(const Napi::CallbackInfo &info);
  Napi::Value WokenAt(const Napi::CallbackInfo &info);
  Napi::Value SpareCells(const Napi::CallbackInfo &info);
  Napi::Value Listen(const Napi::CallbackInfo &info);
  Napi::Value Unlisten(const Napi::CallbackInfo &info);
  void RequireOpen(Napi::Env env) const;
  // Taking frames otherwise would overtake the listener's.
  void RequireNoListener(Napi::Env env) const;
  void ThrowHeldError(Napi::Env env);

  std::shared_ptr<ConsumerState> s_;
  bool closed_ = false;
  DirectMethods<ConsumerCore> direct_{this};
};

}  // namespace gpuring
