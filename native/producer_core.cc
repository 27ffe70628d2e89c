#include "producer_core.h"
#include <algorithm>
#include <utility>
#include <sched.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>
#include "arena_map.h"
#include "descriptor_channels.h"
#include "pool_memory.h"
#include "vmm_memory.h"
#include "errors.h"
#include "js_values.h"

namespace gpuring {

namespace {
constexpr uint64_t kForever = UINT64_MAX;
constexpr uint64_t kLazyReapMs = 20;  // how stale released memory may get while nobody waits for it
constexpr uint32_t kFullReapEvery = 128;  // publish-path reaps between full passes (ReapOldest)

// The largest allocation whose arena JS can be lent whole: gpr_arena_create
// gives a larger allocation (rounded up to GPR_ARENA_ALIGN) and the arena
// header an arena of whole 2 MiB.
uint64_t LargestAllocation() {
  uint64_t arena = LentMappings::Limit() & ~((uint64_t{2} << 20) - 1);
  return arena > sizeof(gpr_arena_header) ? (arena - sizeof(gpr_arena_header)) & ~uint64_t{GPR_ARENA_ALIGN - 1} : 0;
}
using PreparedBody = Napi::External<std::vector<uint8_t>>;  // a body prepare() checked (Prepare)

uint64_t DeadlineAfter(double timeout_ms) {
  if (timeout_ms < 0) return kForever;
  return gpr_monotonic_ns() + static_cast<uint64_t>(timeout_ms * 1e6);
}

// Whether headsUp() rings at all: only where a CPU is spare (see GiveHeadsUp).
bool GivesEarlyHeadsUps() {
  static const bool spare_cores = LoopParticipant::SpareCores();
  return spare_cores;
}

// The ring's count of consumers asleep on a DATA doorbell, as JS sees it: a
// publish gives its heads-up (headsUp()) before its own JS work, but only when
// that count says someone sleeps, so a stream nobody sleeps on pays no call.
// A second mapping of the segment's first page (mremap with old size 0
// duplicates a shared mapping), lent to JS: it reads 0 after close(). Without
// one, the count reads 1: always ring. Where headsUp() gives none (fewer than
// 4 CPUs, see GiveHeadsUp) it reads 0 always: the call would only cost a
// publish on a CPU just woken its coldest step (6-8 µs on a 2-core VM, 2 ms
// asleep), before the native publish that gives the heads-up there.
Napi::Uint32Array SleepersView(Napi::Env env, LentMappings &lent, const gpr_segment &seg) {
  if (!GivesEarlyHeadsUps()) return Napi::Uint32Array::New(env, 1);
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void *copy = mremap(seg.base, 0, page, MREMAP_MAYMOVE);
  if (copy == MAP_FAILED) {
    Napi::Uint32Array always = Napi::Uint32Array::New(env, 1);
    always[0] = 1;
    return always;
  }
  return Napi::Uint32Array::New(env, 1, lent.Lend(env, copy, page), GPR_CONTROL_OFFSET + offsetof(gpr_control, data_doorbells));
}

// How many released frame ids wait for takeReleased(), as JS sees it: a
// publish asks for them only when there are some (takeReleased() makes a
// Float64Array per call, about 0.13 µs of a 2.3 µs publish(table), dev box).
// The view is the state's own cell, and holds the state alive while JS holds
// the view.
Napi::Float64Array ReleasedCountView(Napi::Env env, const std::shared_ptr<ProducerState> &state) {
  using Hold = std::shared_ptr<ProducerState>;
  auto *hold = new Hold(state);
  Napi::ArrayBuffer buffer;
  try {
    buffer = Napi::ArrayBuffer::New(env, &state->released_count, sizeof(double), [](Napi::Env, void *, Hold *h) { delete h; }, hold);
  } catch (...) {
    delete hold;
    throw;
  }
  return Napi::Float64Array::New(env, 1, buffer, 0);
}
}  // namespace

// Frees the memory of in-flight frames whose slots were released: the oldest
// up to the first still out, then (full) every other one, keeping the order.
size_t ProducerState::Reap(bool full) {
  size_t reaped = 0;
  for (; !inflight.empty() && gpr_ring_reap(&seg, me, inflight.front().pos); reaped++) {
    Retire(inflight.front());
    inflight.pop_front();
  }
  if (!full) return reaped;
  auto kept = inflight.begin();
  for (auto &f : inflight) {
    if (gpr_ring_reap(&seg, me, f.pos)) {
      Retire(f);
      reaped++;
      continue;
    }
    if (&*kept != &f) *kept = std::move(f);
    ++kept;
  }
  inflight.erase(kept, inflight.end());
  reaps_until_full = std::max<size_t>(kFullReapEvery, inflight.size());
  gpr_arena_pool_restore_headers(&pool);
  return reaped;
}

void ProducerState::Retire(const Frame &f) {
  gpr_arena_free(&pool, &f.allocs.body);
  for (const auto &a : f.allocs.columns) gpr_arena_free(&pool, &a);
  released.push_back(f.id);
  released_count = static_cast<double>(released.size());
}

// The publish and wait paths' reap. A full pass costs a slot load per frame
// in flight, most of them cache misses on slots a consumer just wrote; run on
// every wake-up it made each publish O(queue depth) behind a lagging consumer
// (a 1,024-slot flood on the 2-core box: 297 slot loads per frame). Frames are
// mostly released in order, and only the oldest frame's slot can give the ring
// space, so these paths reap the oldest only; a full pass runs once per
// max(kFullReapEvery, frames in flight after the last full pass) calls (about
// one slot load per call), when a wake-up reaped nothing in order (ReapOnWake),
// and when memory is short (Alloc). A frame released behind one still held is
// so reaped a little later, never lost.
size_t ProducerState::ReapOldest() {
  if (reaps_until_full > 0 && --reaps_until_full > 0) return Reap(false);
  return Reap(true);
}

// A wake-up (a release rang us, or the idle tick passed): a release that found
// nothing to reap in order lay behind a frame still held, and its memory and
// 'release' event are due now.
size_t ProducerState::ReapOnWake() {
  size_t reaped = Reap(false);
  return reaped > 0 ? reaped : Reap(true);
}

// Arena memory. When shared memory is short (NO_SPACE: /dev/shm is full;
// OUT_OF_MEMORY: the last arena), frames released behind one still held may be
// what fills it: reclaim every released frame and try once more.
int ProducerState::Alloc(uint64_t bytes, gpr_allocation *out, gpr_error *err) {
  int rc = gpr_arena_alloc(&pool, bytes, out, err);
  bool short_of_memory = rc == -static_cast<int>(GPR_E_NO_SPACE) || rc == -static_cast<int>(GPR_E_OUT_OF_MEMORY);
  if (short_of_memory && Reap(true) > 0) rc = gpr_arena_alloc(&pool, bytes, out, err);
  return rc;
}

// Publishes waiting requests in order; stops at the first that does not fit.
bool ProducerState::PublishPending(Napi::Env env) {
  bool any = false;
  while (!pending.empty()) {
    Pending &p = pending.front();
    uint64_t pos = 0;
    p.ref.frame_id = next_frame_id;  // ids are dense, in publication order
    int rc = gpr_ring_try_publish(&seg, me, &p.ref, &pos);
    if (rc == -static_cast<int>(GPR_E_FRAME_STATE) || rc == -static_cast<int>(GPR_E_DETACHED)) {  // fail, never wedge
      gpr_error lost{};
      if (rc == -static_cast<int>(GPR_E_DETACHED)) gpr_fail_detached(&seg, &lost);
      else gpr_fail(&lost, GPR_E_FRAME_STATE, 0, "the ring took this producer's slot back (was it judged dead?)");
      ReturnAllocs(p.allocs);
      Finish(env, p.request, 0, lost.code, lost.message);
      pending.pop_front();
      continue;
    }
    if (rc != 0) break;
    next_frame_id++;
    inflight.push_back(Frame{p.ref.frame_id, pos, std::move(p.allocs)});
    Finish(env, p.request, p.ref.frame_id, GPR_E_OK, "");
    pending.pop_front();
    any = true;
  }
  return any;
}

void ProducerState::ReturnAllocs(const FrameAllocations &allocs) {
  // The body's was ours; the column buffers go back to their JS owner.
  gpr_arena_free(&pool, &allocs.body);
  for (const auto &a : allocs.columns) loose[{a.arena, a.offset}] = a.length;
}

void ProducerState::ExpirePending(Napi::Env env) {
  uint64_t now = gpr_monotonic_ns();
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->deadline_ns > now) {
      ++it;
      continue;
    }
    ReturnAllocs(it->allocs);
    char why[512];
    gpr_ring_describe_full(&seg, why, sizeof why);
    Finish(env, it->request, 0, GPR_E_TIMEOUT, std::string("publish timed out waiting for space: ") + why);
    it = pending.erase(it);
  }
}

void ProducerState::Finish(Napi::Env env, uint64_t request, uint64_t frame_id, gpr_code code, const std::string &why) {
  auto it = deferred.find(request);
  if (it == deferred.end()) return;
  if (code == GPR_E_OK) it->second.Resolve(Napi::Number::New(env, static_cast<double>(frame_id)));
  else it->second.Reject(MakeError(env, code, why).Value());
  deferred.erase(it);
}

// The ids of frames released since the last call, for JS: a typed array, as
// an array element per frame was a tenth of a publishMany flood's CPU.
Napi::Float64Array ProducerState::TakeReleased(Napi::Env env) {
  Napi::Float64Array ids = Napi::Float64Array::New(env, released.size());
  for (size_t i = 0; i < released.size(); i++) ids[i] = static_cast<double>(released[i]);
  released.clear();
  released_count = 0;
  return ids;
}

// Calls the JS release listener with the frames reaped since the last report.
// Only from the event loop (OnWake): never inside a call JS made to us.
void ProducerState::FlushReleases(Napi::Env env) {
  if (released.empty() || !has_listener || on_release.IsEmpty()) return;
  on_release.Call({TakeReleased(env)});
}

// Requests waiting for space, or JS waiting for releases as they happen.
bool ProducerState::Waiting() const { return !pending.empty() || (prompt && !inflight.empty()); }

uint64_t ProducerState::NextWakeMs() const {
  uint64_t now = gpr_monotonic_ns(), wake = tick_ms;
  for (const Pending &p : pending)
    if (p.deadline_ns != UINT64_MAX) wake = std::min(wake, p.deadline_ns > now ? (p.deadline_ns - now + 999999) / 1000000 : 0);
  return wake;
}

// The doorbell protocol's sleeper side (gpuring/doorbell.h), for space: reap
// and publish, arm the SPACE bell, look once more, and only then sleep. A
// consumer's release rings us in one hop (no waiter thread), and the loop runs
// OnWake. Releases reaped here that JS listens for are reported from the loop
// (a zero-length sleep), never from inside the call that found them.
void ProducerState::Service(Napi::Env env) {
  bool armed = false;
  for (;;) {
    bool progressed = ReapOldest() > 0;
    progressed = PublishPending(env) || progressed;
    ExpirePending(env);
    if (!Waiting()) {
      bell->Disarm();
      if (!released.empty() && has_listener) bell->Sleep(0, holds > 0);
      // Frames in flight and nobody waiting: reap now and then (and sweep every
      // tick), so memory, inFlight and 'release' events come back while this
      // producer is idle, without the consumers' releases ringing us.
      else if (!inflight.empty()) bell->Sleep(kLazyReapMs, false);
      else bell->Stop();
      return;
    }
    if (armed && !progressed) {
      // Keeps the process alive while a publish or a drain waits; a bare
      // 'release' listener does not.
      bell->Sleep(NextWakeMs(), !pending.empty() || holds > 0);
      return;
    }
    if (!armed) bell->Arm(GPR_BELL_SPACE);
    armed = true;
  }
}

// Runs on the event loop when the bell rang or the tick passed.
void ProducerState::OnWake() {
  Woken([this](Napi::Env e) {
    ReapOnWake();
    FlushReleases(e);
    if (!shut) Service(e);  // a 'release' listener may have closed the producer
  });
}

// Binds the descriptor channel once this process has pool or VMM memory to
// hand out: consumers of this producer's frames fetch descriptors there. A
// process that has neither pays two loads per publish.
void ProducerState::ServeDescriptorsIfNeeded(Napi::Env env) {
  if (serves_descriptors || (!cuda::PoolExports::Any() && !cuda::VmmAllocations::Any())) return;
  DescriptorChannels::Get().Add(env, &seg, me, gen);
  serves_descriptors = true;
}

void ProducerState::Shutdown() {
  if (shut) return;
  shut = true;
  bell.reset();  // disarmed: nobody rings a participant that left
  if (serves_descriptors) DescriptorChannels::Get().Remove(&seg);
  // The arenas stay named until no frame refers to them (recovery.h), unless
  // the entry was taken from us: then nobody else will unlink them.
  if (!Detach()) gpr_arena_pool_unlink(&pool);
  gpr_arena_pool_destroy(&pool);
}

// ---------------------------------------------------------------------------

// headsUp, publish, publishPrepared, publishMany, publishStaged and
// takeReleased are defined on each instance (DirectMethods).
Napi::Function ProducerCore::Define(Napi::Env env) {
  return DefineClass(env, "ProducerCore",
                     {InstanceMethod<&ProducerCore::Allocate>("allocate"),
                      InstanceMethod<&ProducerCore::Free>("free"),
                      InstanceMethod<&ProducerCore::ArenaBuffer>("arenaBuffer"),
                      InstanceMethod<&ProducerCore::ArenaName>("arenaName"),
                      InstanceMethod<&ProducerCore::Prepare>("prepare"),
                      InstanceMethod<&ProducerCore::OnRelease>("onRelease"),
                      InstanceMethod<&ProducerCore::Stats>("stats"),
                      InstanceMethod<&ProducerCore::Subscribers>("subscribers"),
                      InstanceMethod<&ProducerCore::KeepAlive>("keepAlive"),
                      InstanceMethod<&ProducerCore::PromptReleases>("promptReleases"),
                      InstanceMethod<&ProducerCore::Close>("close")});
}

// new ProducerCore(segmentName, arenaSizeBytes, openTimeoutMs, openFlags, sweepIntervalMs)
ProducerCore::ProducerCore(const Napi::CallbackInfo &info) : Napi::ObjectWrap<ProducerCore>(info) {
  Napi::Env env = info.Env();
  env_ = env;
  std::string name = info[0].As<Napi::String>();
  uint64_t arena_size = static_cast<uint64_t>(info[1].As<Napi::Number>().DoubleValue());
  // Every arena of a Node producer is lent to JS whole (allocate(), loans,
  // copies in): regular arenas are cut to what one ArrayBuffer holds, as
  // they are cut to what /dev/shm holds.
  arena_size = std::min<uint64_t>(arena_size, LentMappings::Limit() & ~uint64_t{4095});
  s_ = std::make_shared<ProducerState>();
  ProducerState &s = *s_;
  s.Attach(env, name, info[2].As<Napi::Number>().Uint32Value(), info[3].As<Napi::Number>().Uint32Value(),
           GPR_ROLE_PRODUCER);
  gpr_arena_pool_init(&s.pool, &s.seg, s.me, s.gen, arena_size);
  try {
    s.StartBell(env, "gpuring-producer", info[4].As<Napi::Number>().Uint32Value(), s_);
  } catch (...) {
    s.Shutdown();
    throw;
  }
  s.HookExit();
  Value().Set("index", Napi::Number::New(env, s.me));
  Value().Set("generation", Napi::Number::New(env, s.gen));
  Value().Set("sleepers", SleepersView(env, s.lent, s.seg));
  Value().Set("releasedCount", ReleasedCountView(env, s_));
  Value().Set("largestAllocation", Napi::Number::New(env, static_cast<double>(LargestAllocation())));
  direct_.Define<&ProducerCore::GiveHeadsUp>(Value(), "headsUp");
  direct_.Define<&ProducerCore::Publish>(Value(), "publish");
  direct_.Define<&ProducerCore::PublishPrepared>(Value(), "publishPrepared");
  direct_.Define<&ProducerCore::PublishMany>(Value(), "publishMany");
  direct_.Define<&ProducerCore::PublishStaged>(Value(), "publishStaged");
  direct_.Define<&ProducerCore::TakeReleased>(Value(), "takeReleased");
}

ProducerCore::~ProducerCore() {
  s_->UnhookExit();
  if (!closed_) s_->Shutdown();
}

void ProducerCore::RequireOpen(Napi::Env env) const {
  if (closed_) Throw(env, GPR_E_CLOSED, "the producer is closed");
}

Napi::Value ProducerCore::Allocate(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  double bytes = info[0].As<Napi::Number>().DoubleValue();
  if (!(bytes >= 0) || bytes > static_cast<double>(GPR_MAX_COUNT))
    Throw(env, GPR_E_INVALID_ARGUMENT, "allocation size must be a non-negative integer");
  if (static_cast<uint64_t>(bytes) > LargestAllocation())
    Throw(env, GPR_E_UNSUPPORTED, "an allocation of " + std::to_string(static_cast<uint64_t>(bytes)) +
                                      " bytes needs an arena larger than this Node.js lends as one ArrayBuffer (" +
                                      std::to_string(LentMappings::Limit()) + " bytes, buffer.constants.MAX_LENGTH); Node.js 22 or later lends up to 2^53 - 1");
  gpr_allocation a{};
  s_->ReapOldest();
  Check(env, [&](gpr_error *e) { return s_->Alloc(static_cast<uint64_t>(bytes), &a, e); });
  s_->loose[{a.arena, a.offset}] = a.length;
  Napi::Array out = Napi::Array::New(env, 3);
  out.Set(0u, Napi::Number::New(env, a.arena));
  out.Set(1u, Napi::Number::New(env, static_cast<double>(a.offset)));
  out.Set(2u, Napi::Number::New(env, static_cast<double>(a.length)));
  return out;
}

Napi::Value ProducerCore::Free(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  uint32_t arena = info[0].As<Napi::Number>().Uint32Value();
  uint64_t offset = static_cast<uint64_t>(info[1].As<Napi::Number>().DoubleValue());
  auto it = s_->loose.find({arena, offset});
  if (it == s_->loose.end()) Throw(env, GPR_E_INVALID_ARGUMENT, "not an unpublished allocation of this producer");
  gpr_allocation a{arena, offset, it->second, nullptr};
  gpr_arena_free(&s_->pool, &a);
  s_->loose.erase(it);
  return env.Undefined();
}

Napi::Value ProducerCore::ArenaBuffer(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  uint32_t n = info[0].As<Napi::Number>().Uint32Value();
  if (n >= s_->pool.count || !s_->pool.arenas[n].base) Throw(env, GPR_E_INVALID_ARGUMENT, "no such arena");
  return MapArenaBuffer(env, s_->lent, s_->pool.arenas[n].fd, 0, s_->pool.arenas[n].size);
}

Napi::Value ProducerCore::ArenaName(const Napi::CallbackInfo &info) {
  char name[GPR_SHM_NAME_MAX];
  gpr_arena_shm_name(s_->seg.name, s_->me, s_->gen, info[0].As<Napi::Number>().Uint32Value(), name);
  return Napi::String::New(info.Env(), name);
}

// The body to publish, checked by the C validator as every consumer will
// check it: a frame no consumer could accept fails now, with the consumer's
// error code, instead of being dropped at the other end.
Napi::Uint8Array ProducerCore::ValidBody(Napi::Env env, Napi::Value value) {
  RequireOpen(env);
  auto body = value.As<Napi::Uint8Array>();
  gpr_error invalid{};
  if (gpr_body_validate(body.Data(), body.ByteLength(), nullptr, &invalid) != 0) throw MakeError(env, invalid);
  s_->ServeDescriptorsIfNeeded(env);
  return body;
}

// The heads-up of gpuring/doorbell.h, when this publish can go into the ring
// at once (not behind frames waiting for space): whom it rang, now or by a
// recent headsUp() call (GiveHeadsUp), which it uses up.
ProducerCore::HeadsUpGiven ProducerCore::HeadsUp() {
  std::optional<HeadsUpGiven> early = std::exchange(early_, std::nullopt);
  if (closed_ || !s_->pending.empty()) return {GPR_RUNG_NOBODY, false};
  // One that reached nobody is no heads-up: ring afresh, as a consumer may have gone to sleep since.
  if (early && early->rung != GPR_RUNG_NOBODY && gpr_monotonic_ns() - early_ns_ < kEarlyHeadsUpNs) return *early;
  uint32_t rung = gpr_doorbell_heads_up(&s_->seg);
  return {rung, rung != GPR_RUNG_NOBODY && gpr_monotonic_ns() - last_publish_ns_ >= kYieldAfterIdleNs};
}

// headsUp(): the heads-up now, as a publish call starts, where JS describes
// and encodes the frame before the native publish: a sleeping consumer's
// wake-up then overlaps that work too (publish(table) of a small frame, 2 ms
// apart, H100 host: p50 50 and 55 µs against 88 and 87). The next publish
// call passes on whom it rang instead of ringing again, unless it comes
// kEarlyHeadsUpNs later or more (the call that gave it failed before
// publishing): it then rings afresh, as the sleeper rung then may have gone.
// Only where a CPU is spare: on 2 cores the consumer woke onto the CPU of the
// producer still encoding, and waited for it (24 and 23 µs became 42 and 29).
// The application's own Producer.headsUp() (`asked`, as it starts making a
// frame) rings on any machine, as gpr_producer_heads_up does: the work it
// overlaps is the application's, which it knows to be worth a wake-up.
// headsUp(asked: boolean) -> whether it reached a sleeper (now or earlier)
Napi::Value ProducerCore::GiveHeadsUp(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  bool asked = info[0].ToBoolean();
  if (!asked && !GivesEarlyHeadsUps()) return Napi::Boolean::New(env, false);
  // One pending that reached a sleeper stands (as gpr_producer_heads_up keeps
  // one): a call per kEarlyHeadsUpNs must not keep it alive forever.
  if (!early_ || early_->rung == GPR_RUNG_NOBODY || gpr_monotonic_ns() - early_ns_ >= kEarlyHeadsUpNs) {
    early_ = HeadsUp();
    early_ns_ = gpr_monotonic_ns();
  }
  return Napi::Boolean::New(env, early_->rung != GPR_RUNG_NOBODY);
}

// The consumer a heads-up woke is often queued on this very CPU: a socket's
// wake-up tells the scheduler that the sender is about to sleep, and a Node
// producer is not, so the consumer would wait until this thread blocks. Once
// its frame is READY (`ready`), give up the CPU once, so that it runs at once
// (on a 2-core VM, frames 2 ms apart: 22-26 µs hand-offs became 11-20 µs).
// Only after an idle spell: in a busy stream the consumer takes frames in
// batches when it gets a CPU, and a switch per frame would cost throughput.
// Where the consumer woke on another CPU, the yield returns at once.
void ProducerCore::YieldToWoken(HeadsUpGiven given, bool ready) {
  if (given.after_idle && ready) sched_yield();
  last_publish_ns_ = gpr_monotonic_ns();
}

// publish(body: Uint8Array, allocs: Float64Array [arena, offset, length]..., tag: bigint,
//         timeoutMs: number (-1 forever, 0 fail fast)) -> number | Promise<number>
Napi::Value ProducerCore::Publish(const Napi::CallbackInfo &info) {
  // First of all, before any work a cold CPU does slowly: a sleeping
  // consumer's wake-up then overlaps this publish instead of following it.
  HeadsUpGiven heads_up = HeadsUp();
  Napi::Env env = info.Env();
  Napi::Uint8Array body = ValidBody(env, info[0]);
  auto list = info[1].As<Napi::Float64Array>();
  uint64_t tag = ToU64(info[2]);
  double timeout_ms = info[3].As<Napi::Number>().DoubleValue();
  ProducerState &s = *s_;
  FrameAllocations allocs;
  for (size_t i = 0; i + 2 < list.ElementLength(); i += 3) {
    gpr_allocation a{static_cast<uint32_t>(list[i]), static_cast<uint64_t>(list[i + 1]),
                     static_cast<uint64_t>(list[i + 2]), nullptr};
    auto it = s.loose.find({a.arena, a.offset});
    if (it == s.loose.end() || it->second != a.length)
      Throw(env, GPR_E_INVALID_ARGUMENT, "a column buffer is not an unpublished allocation of this producer");
    allocs.columns.push_back(a);
  }
  return Send(env, body.Data(), body.ByteLength(), std::move(allocs), tag, timeout_ms, heads_up);
}

Napi::Value ProducerCore::Send(Napi::Env env, const uint8_t *body, size_t length, FrameAllocations allocs,
                               uint64_t tag, double timeout_ms, HeadsUpGiven heads_up) {
  CopyBody(env, body, length, &allocs.body);
  return Commit(env, std::move(allocs), length, tag, timeout_ms, heads_up);
}

// The reap comes after the frame is READY: a consumer waits for that, not for
// the reap, whose slot loads are misses on slots a consumer just wrote (a
// prepared frame 20 µs apart to a spinning consumer, H200 host: 0.3 µs of
// reap and 0.4 µs more on the publish itself before READY; hand-off p50 3.3-4.1
// -> 2.8-2.9 µs in three of four alternated pairs). Space is not lost by it:
// an allocation short of memory and a publish that finds the ring full reap
// first themselves (Alloc, Enqueue).
Napi::Value ProducerCore::Commit(Napi::Env env, FrameAllocations allocs, size_t length, uint64_t tag,
                                 double timeout_ms, HeadsUpGiven heads_up) {
  Napi::Value out = Enqueue(env, std::move(allocs), length, tag, timeout_ms, heads_up.rung);
  YieldToWoken(heads_up, out.IsNumber());
  if (out.IsEmpty()) ThrowRingFull(env);
  s_->ReapOldest();
  return out;
}

// prepare(body): a private copy of a body that owns no allocation, checked
// once. JS never sees those bytes, so publishPrepared() need not check them
// again: the checks were the biggest part of a prepared publish, and it runs
// on a CPU just woken from sleep, where every step costs several times more.
Napi::Value ProducerCore::Prepare(const Napi::CallbackInfo &info) {
  Napi::Uint8Array body = ValidBody(info.Env(), info[0]);
  auto *copy = new std::vector<uint8_t>(body.Data(), body.Data() + body.ByteLength());
  return PreparedBody::New(info.Env(), copy, [](Napi::Env, std::vector<uint8_t> *bytes) { delete bytes; });
}

// publishPrepared(prepared, tag, timeoutMs): publish() of a prepare()d body.
Napi::Value ProducerCore::PublishPrepared(const Napi::CallbackInfo &info) {
  HeadsUpGiven heads_up = HeadsUp();  // first, as in Publish()
  Napi::Env env = info.Env();
  RequireOpen(env);
  if (!info[0].IsExternal()) Throw(env, GPR_E_INVALID_ARGUMENT, "publishPrepared(): not a prepared body");
  const std::vector<uint8_t> &body = *info[0].As<PreparedBody>().Data();
  s_->ServeDescriptorsIfNeeded(env);
  return Send(env, body.data(), body.size(), FrameAllocations{}, ToU64(info[1]),
              info[2].As<Napi::Number>().DoubleValue(), heads_up);
}

void ProducerCore::ThrowRingFull(Napi::Env env) {
  char why[512];
  gpr_ring_describe_full(&s_->seg, why, sizeof why);
  Throw(env, GPR_E_RING_FULL, std::string(why) + " (publish with a timeout to wait for space)");
}

// publishMany(body: Uint8Array, count: number, tags: BigUint64Array | null,
//             timeoutMs: number) -> [firstId, atOnce, ...Promise<number>[]]
// `count` frames of one body (validated once), in order, under one lock and one
// reap: the first `atOnce` went into the ring at once, with ids firstId,
// firstId + 1, ...; each later one waits for space, a promise of its id. With
// timeoutMs 0 it stops at the first that does not fit: fewer than `count`
// come back, and the rest were never published.
Napi::Value ProducerCore::PublishMany(const Napi::CallbackInfo &info) {
  HeadsUpGiven heads_up = HeadsUp();
  Napi::Env env = info.Env();
  Napi::Uint8Array body = ValidBody(env, info[0]);
  uint32_t count = info[1].As<Napi::Number>().Uint32Value();
  const uint64_t *tags = info[2].IsTypedArray() ? info[2].As<Napi::BigUint64Array>().Data() : nullptr;
  if (tags && info[2].As<Napi::TypedArray>().ElementLength() < count)
    Throw(env, GPR_E_INVALID_ARGUMENT, "publishMany(): fewer tags than frames");
  double timeout_ms = info[3].As<Napi::Number>().DoubleValue();
  ProducerState &s = *s_;
  s.ReapOldest();
  // `published` counts the batch once, also when a later frame throws (see gpr_ring_try_publish_uncounted).
  struct CountOnExit {
    uint64_t *counter;
    uint64_t frames = 0;
    ~CountOnExit() { gpr_count_by(counter, frames); }
  } went{&s.seg.participants[s.me].published};
  // Not an array element per frame: setting elements from here was a fifth
  // of a publishMany's CPU.
  double first = 0, at_once = 0;
  std::vector<Napi::Value> waiting;
  for (uint32_t i = 0; i < count; i++) {
    FrameAllocations allocs;
    CopyBody(env, body.Data(), body.ByteLength(), &allocs.body);
    Napi::Value id = Enqueue(env, std::move(allocs), body.ByteLength(), tags ? tags[i] : 0, timeout_ms,
                             i == 0 ? heads_up.rung : GPR_RUNG_NOBODY, &went.frames);
    if (id.IsEmpty()) break;
    if (!id.IsNumber()) waiting.push_back(id);
    else if (at_once++ == 0) first = id.As<Napi::Number>().DoubleValue();
  }
  YieldToWoken(heads_up, at_once > 0);
  Napi::Array out = Napi::Array::New(env, 2 + waiting.size());
  out.Set(0u, Napi::Number::New(env, first));
  out.Set(1u, Napi::Number::New(env, at_once));
  for (size_t i = 0; i < waiting.size(); i++) out.Set(static_cast<uint32_t>(2 + i), waiting[i]);
  return out;
}

// A body into a new arena allocation of its own.
void ProducerCore::CopyBody(Napi::Env env, const uint8_t *body, size_t length, gpr_allocation *out) {
  Check(env, [&](gpr_error *e) { return s_->Alloc(length, out, e); });
  memcpy(out->ptr, body, length);
}

// publishStaged(body: Uint8Array, staged: Uint8Array, bytes: number, tag: bigint, timeoutMs: number)
//   -> number | Promise<number>
// A small host frame in one call (publish(table) of a flat batch): the first
// `bytes` of `staged` hold its column bytes, and each host buffer of `body`
// gives its offset from the start of `staged` (its handle is not read). One arena allocation takes
// the body and, at the next 64-byte boundary, the columns; the published copy
// of the body names that place. Saves the separate allocate() call, and its
// JS array, per frame: the copy into `staged` replaces the copy into the arena.
Napi::Value ProducerCore::PublishStaged(const Napi::CallbackInfo &info) {
  HeadsUpGiven heads_up = HeadsUp();
  Napi::Env env = info.Env();
  Napi::Uint8Array body = ValidBody(env, info[0]);
  auto staged = info[1].As<Napi::Uint8Array>();
  double bytes = info[2].As<Napi::Number>().DoubleValue();
  if (!(bytes >= 0 && bytes <= static_cast<double>(staged.ByteLength())))
    Throw(env, GPR_E_INVALID_ARGUMENT, "publishStaged(): more bytes than staged");
  size_t columns = static_cast<size_t>(bytes);
  uint64_t tag = ToU64(info[3]);
  double timeout_ms = info[4].As<Napi::Number>().DoubleValue();
  size_t columns_at = gpr_align_up(body.ByteLength(), 64u);
  FrameAllocations allocs;
  Check(env, [&](gpr_error *e) { return s_->Alloc(columns_at + columns, &allocs.body, e); });
  memcpy(allocs.body.ptr, body.Data(), body.ByteLength());
  memcpy(allocs.body.ptr + columns_at, staged.Data(), columns);
  if (!PlaceStaged(body.Data(), allocs.body, columns_at, columns)) {
    gpr_arena_free(&s_->pool, &allocs.body);
    Throw(env, GPR_E_INVALID_ARGUMENT, "publishStaged(): a host buffer lies outside the staged bytes");
  }
  return Commit(env, std::move(allocs), body.ByteLength(), tag, timeout_ms, heads_up);
}

// Points the host buffers of the body copied to the start of `a` at the
// staged bytes copied `columns_at` bytes into it: offset from the arena's
// base, and the arena's name. What it reads comes from `body`, the validated
// private copy: the arena is shared memory, which another process could
// change under us. False when a buffer lies outside those `staged` bytes.
bool ProducerCore::PlaceStaged(const uint8_t *body, const gpr_allocation &a, size_t columns_at, size_t staged) {
  gpr_body_header h;
  memcpy(&h, body, sizeof h);
  size_t first = sizeof h + static_cast<size_t>(h.node_count) * sizeof(gpr_body_node);
  const uint8_t *handle = ArenaHandle(a.arena);
  gpr_body_buffer b;
  for (size_t at = first; at < first + static_cast<size_t>(h.buffer_count) * sizeof b; at += sizeof b) {
    memcpy(&b, body + at, sizeof b);
    if (b.kind != GPR_MEM_HOST) continue;
    if (!gpr_range_ok(b.offset, b.length, staged)) return false;
    b.offset += a.offset + columns_at;
    memcpy(b.handle, handle, sizeof b.handle);
    memcpy(a.ptr + at, &b, sizeof b);
  }
  return true;
}

// A host buffer's handle for this producer's arena `arena`: its shm name,
// NUL-padded. Made again only when the arena changes (a stream's frames mostly
// share one), not per frame.
const uint8_t *ProducerCore::ArenaHandle(uint32_t arena) {
  if (arena != handle_arena_) {
    char name[GPR_SHM_NAME_MAX];
    gpr_arena_shm_name(s_->seg.name, s_->me, s_->gen, arena, name);
    memset(handle_, 0, sizeof handle_);
    memcpy(handle_, name, strnlen(name, sizeof handle_ - 1));
    handle_arena_ = arena;
  }
  return handle_;
}

// Publishes the `length`-byte body already copied to the start of
// allocs.body (reaped): the frame id, a promise when it must wait for space,
// or an empty value when the ring is full and timeoutMs is 0 (nothing was
// kept: the body's allocation is freed). allocs.columns are buffers the frame
// now owns.
Napi::Value ProducerCore::Enqueue(Napi::Env env, FrameAllocations allocs, size_t length, uint64_t tag,
                                  double timeout_ms, uint32_t rung, uint64_t *uncounted) {
  ProducerState &s = *s_;
  for (const auto &a : allocs.columns) s.loose.erase({a.arena, a.offset});
  gpr_frame_ref ref{};
  ref.frame_id = s.next_frame_id;
  ref.producer = s.me;
  ref.producer_gen = s.gen;
  ref.body_arena = allocs.body.arena;
  ref.body_length = static_cast<uint32_t>(length);
  ref.body_offset = allocs.body.offset;
  ref.user_tag = tag;
  uint64_t pos = 0;
  // Space comes from the oldest slot only: reap in order (PublishMany's consumers may have caught up) before waiting.
  int rc = 0;
  auto publish = [&] {
    rc = (uncounted ? gpr_ring_try_publish_uncounted : gpr_ring_try_publish_rung)(&s.seg, s.me, &ref, &pos, rung);
    return rc == 0;
  };
  bool went = s.pending.empty() && (publish() || (s.Reap(false) > 0 && publish()));
  if (went) {
    if (uncounted) ++*uncounted;
    s.next_frame_id++;
    s.inflight.push_back(ProducerState::Frame{ref.frame_id, pos, std::move(allocs)});
    // The first frame in flight starts the watch for releases (prompt, or lazy).
    if (s.inflight.size() == 1) s.Service(env);
    return Napi::Number::New(env, static_cast<double>(ref.frame_id));
  }
  if (rc == -static_cast<int>(GPR_E_DETACHED)) {
    s.ReturnAllocs(allocs);
    Check(env, [&](gpr_error *e) { return gpr_fail_detached(&s.seg, e); });
  }
  if (timeout_ms == 0) {
    s.ReturnAllocs(allocs);
    return Napi::Value();
  }
  uint64_t request = s.next_request++;
  s.pending.push_back(ProducerState::Pending{request, DeadlineAfter(timeout_ms), ref, std::move(allocs)});
  auto deferred = Napi::Promise::Deferred::New(env);
  s.deferred.emplace(request, deferred);
  s.Service(env);
  return deferred.Promise();
}

Napi::Value ProducerCore::OnRelease(const Napi::CallbackInfo &info) {
  if (info[0].IsFunction()) {
    s_->on_release = Napi::Persistent(info[0].As<Napi::Function>());
    s_->has_listener = true;
  } else {
    s_->has_listener = false;
    s_->on_release.Reset();
  }
  return info.Env().Undefined();
}

// takeReleased() -> frame ids reaped since the last report (every publish
// reaps first). Lets a producer that publishes in a tight loop (its event loop
// never idle) reclaim memory without waiting for the release callback.
Napi::Value ProducerCore::TakeReleased(const Napi::CallbackInfo &info) { return s_->TakeReleased(info.Env()); }

// promptReleases(on): whether JS waits for releases as they happen (see
// ProducerState::prompt). Starts the watch at once.
Napi::Value ProducerCore::PromptReleases(const Napi::CallbackInfo &info) {
  s_->prompt = info[0].As<Napi::Boolean>().Value();
  if (!closed_) s_->Service(info.Env());
  return info.Env().Undefined();
}

// keepAlive(true) while JS waits for releases (drain), keepAlive(false) after:
// a watch for releases keeps the process alive only then.
Napi::Value ProducerCore::KeepAlive(const Napi::CallbackInfo &info) {
  if (info[0].As<Napi::Boolean>()) s_->holds++;
  else if (s_->holds > 0) s_->holds--;
  if (!closed_) s_->Service(info.Env());
  return info.Env().Undefined();
}

Napi::Value ProducerCore::Stats(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("inFlight", Napi::Number::New(env, static_cast<double>(s_->inflight.size())));
  o.Set("waiting", Napi::Number::New(env, static_cast<double>(s_->pending.size())));
  o.Set("unpublishedAllocations", Napi::Number::New(env, static_cast<double>(s_->loose.size())));
  o.Set("arenas", Napi::Number::New(env, s_->pool.count));
  o.Set("arenaFreeBytes", Napi::Number::New(env, static_cast<double>(gpr_arena_pool_free_bytes(&s_->pool))));
  return o;
}

// subscribers() -> number: the broadcast ring's subscribers now, -1 on a work-queue ring.
Napi::Value ProducerCore::Subscribers(const Napi::CallbackInfo &info) {
  const gpr_segment &seg = s_->seg;
  return Napi::Number::New(info.Env(), seg.broadcast ? static_cast<double>(gpr_ring_subscriber_count(&seg)) : -1.0);
}

Napi::Value ProducerCore::Close(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closed_) return env.Undefined();
  closed_ = true;
  s_->UnhookExit();
  s_->Shutdown();
  s_->lent.TakeBack();
  for (auto &kv : s_->deferred)
    kv.second.Reject(MakeError(env, GPR_E_CLOSED, "the producer was closed before the frame was published").Value());
  s_->deferred.clear();
  s_->on_release.Reset();
  return env.Undefined();
}

}  // namespace gpuring
