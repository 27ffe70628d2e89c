#include "consumer_core.h"
#include "cuda_context.h"
#include "errors.h"
#include "ipc_handle_cache.h"
#include "pool_memory.h"

namespace gpuring {

namespace {
// A weakly held function, or empty where it was collected.
Napi::Function Live(const Napi::FunctionReference &ref) {
  return ref.IsEmpty() ? Napi::Function() : ref.Value();
}
}  // namespace

// What JS receives for a frame: a fixed record (kRecordBytes) followed by a
// private copy of the body, validated here by the C validator so every
// language rejects the same bodies with the same codes. A body that cannot be
// read or fails validation is dropped (a garbage record must not wedge the
// ring) and the error thrown.
//   0 pos f64 | 8 frame id f64 | 16 producer u32 | 20 producer generation u32 | 24 tag u64
// Records are bump-allocated in RecordChunks: the result is the record's
// offset in the chunk JS holds, or a new chunk (the record at its start).
Napi::Value ConsumerState::Receive(Napi::Env env, uint64_t pos, const gpr_frame_ref &ref) {
  spare_result_taken.Reset();
  gpr_error err{};
  const uint8_t *body = nullptr;
  if (!bodies->Locate(ref, &body, &err)) {
    gpr_ring_release_as(&seg, me, pos, GPR_SLOT_CLAIMED);
    throw MakeError(env, err);
  }
  size_t bytes = kRecordBytes + ((ref.body_length + 7u) & ~size_t{7});
  Napi::Value fresh = records.Reserve(env, bytes);
  uint8_t *record = records.Next();
  memcpy(record + kRecordBytes, body, ref.body_length);
  if (!Accept(pos, ref, record, &err)) {
    if (err.code == GPR_E_OK) return Napi::Value();  // taken back: the record's room is used again
    throw MakeError(env, err);
  }
  Taken();
  double at = static_cast<double>(records.Commit(bytes));
  if (!fresh.IsEmpty()) return fresh;
  if (TakeHeldSpare(at, pos)) return Napi::Boolean::New(env, true);
  Napi::Value spare_frame = TakeSpare(at, pos);
  return spare_frame.IsEmpty() ? Napi::Number::New(env, at) : spare_frame;
}

void ConsumerState::OfferSpare(Napi::Object frame, double at, uint32_t cell, Napi::Value result) {
  spare_result.Reset();
  if (at != records.Used()) return;  // JS's view of the cursor is stale: no spare this time
  if (cell >= spare_cells_length) return;  // nowhere to say it was handed over: no spare
  Napi::Object held = spare.IsEmpty() ? Napi::Object() : spare.Value();  // empty if collected
  if (held.IsEmpty() || held != frame) {
    spare = Napi::Reference<Napi::Object>::New(frame, 0);
    spare_held = false;
    spare_cell = cell;
    spare_at = at;
    spare_serial = records.Serial();
  }
  if (!spare_held) spare.Ref(), spare_held = true;
  if (result.IsObject()) spare_result = Napi::Reference<Napi::Object>::New(result.As<Napi::Object>(), 1);
}

Napi::Value ConsumerState::TakeSpare(double at, uint64_t pos) {
  if (spare.IsEmpty() || at != spare_at || records.Serial() != spare_serial) return Napi::Value();
  Napi::Object frame = spare.Value();
  spare.Reset();
  spare_held = false;
  spare_result_taken = std::move(spare_result);
  // Collected unused: JS makes the Frame. The bound guards the raw store (OfferSpare checked it).
  if (frame.IsEmpty() || spare_cell >= spare_cells_length) return Napi::Value();
  spare_cells_data[spare_cell] = static_cast<double>(pos);
  return frame;
}

void ConsumerState::OfferHeldSpare(double at, uint32_t cell) {
  if (at != records.Used() || cell >= spare_cells_length) return;  // stale, or nowhere to say it was handed over
  held_spare = {at, records.Serial(), cell};
}

bool ConsumerState::TakeHeldSpare(double at, uint64_t pos) {
  if (at != held_spare.at || records.Serial() != held_spare.serial || held_spare.cell >= spare_cells_length) return false;
  spare_cells_data[held_spare.cell] = static_cast<double>(pos);
  held_spare.at = -1;
  return true;
}

void ConsumerState::StopWaiting() {
  bell->Disarm();
  bell->Stop();
  HoldSpareWeakly();
}

void ConsumerState::HoldSpareWeakly() {
  if (spare_held) spare.Unref(), spare_held = false;
  spare_result.Reset();
}

Napi::Value RecordChunks::Reserve(Napi::Env env, size_t bytes) {
  if (chunk_.IsEmpty() || size_ - used_ < bytes) {
    size_ = std::max(kChunkBytes, bytes);
    Napi::ArrayBuffer fresh = Napi::ArrayBuffer::New(env, size_);
    chunk_ = Napi::Persistent(fresh);
    data_ = static_cast<uint8_t *>(fresh.Data());
    used_ = 0;
    handed_ = false;
    serial_++;
    Publish();
  }
  // A chunk whose first record was dropped (malformed) has not reached JS yet.
  return handed_ ? Napi::Value() : chunk_.Value();
}

Napi::ArrayBuffer RecordChunks::First(Napi::Env env) {
  Reserve(env, 0);
  handed_ = true;
  return chunk_.Value();
}

size_t RecordChunks::Commit(size_t bytes) {
  handed_ = true;
  size_t at = used_;
  used_ += bytes;
  Publish();
  return at;
}

// The body is already copied to record + kRecordBytes: validates it, leases
// the frame and writes the record; false (the frame released) if malformed.
bool ConsumerState::Accept(uint64_t pos, const gpr_frame_ref &ref, uint8_t *record, gpr_error *err) {
  if (gpr_body_validate(record + kRecordBytes, ref.body_length, nullptr, err) != 0) {
    gpr_ring_release_as(&seg, me, pos, GPR_SLOT_CLAIMED);
    return false;
  }
  if (gpr_ring_confirm(&seg, me, pos) != 0) return false;
  double numbers[2] = {static_cast<double>(pos), static_cast<double>(ref.frame_id)};
  uint32_t producer[2] = {ref.producer, ref.producer_gen};
  memcpy(record, numbers, sizeof numbers);
  memcpy(record + 16, producer, sizeof producer);
  memcpy(record + 24, &ref.user_tag, sizeof ref.user_tag);
  return true;
}

int ConsumerState::TryClaim(Napi::Env env, gpr_frame_ref *ref, uint64_t *pos) {
  if (!gpr_participant_held(&seg, me, gen)) Check(env, [&](gpr_error *e) { return gpr_fail_detached(&seg, e); });
  int rc = gpr_ring_try_claim(&seg, me, ref, pos);
  if (rc != -(int)GPR_E_FRAMES_MISSED && rc != -(int)GPR_E_EVICTED) return rc;
  double missed = static_cast<double>(gpr_bc_take_missed(&seg, me));
  std::string count = std::to_string(static_cast<uint64_t>(missed));
  Napi::Error e = rc == -(int)GPR_E_FRAMES_MISSED
                      ? MakeError(env, GPR_E_FRAMES_MISSED, count + " frames of ring '" + seg.name +
                                                                "' were dropped before this consumer took them (onSlow: 'drop-oldest')")
                      : MakeError(env, GPR_E_EVICTED, "this consumer fell a ring behind and was evicted from ring '" +
                                                          std::string(seg.name) + "', losing " + count +
                                                          " frames (onSlow: 'evict'); it goes on with the frames published since");
  if (rc == -(int)GPR_E_EVICTED) gpr_bc_subscribe(&seg, me, on_slow, 0);
  e.Value().Set("missed", Napi::Number::New(env, missed));
  throw e;
}

// Following the stream: where several consumers share a busy ring, each
// takes only every Nth frame, and a poll of kBusyStreamNs after its own last
// frame often ended just before its next one; it then slept, and the
// producer paid a system call to ring it (publish(table) to 4 batched
// consumers on the 16-core H100 host: a sleep per 4-5 frames, 8-9 µs of
// producer CPU per frame against 7 with one consumer, fewer frames/s than
// one consumer). So the poll goes on while the consumers' head moves, that
// is while other consumers take frames, up to kStreamPollMaxNs.
//
// Yielding between looks, after a ring: Linux often wakes a sleeper on the
// CPU of the producer that rang it, and a sleeper woken by a heads-up (rung
// before its frame is READY) may run there ahead of that producer. Polling
// then holds up the very publish it waits for, until the poll gives up and
// sleeps, and the publish rings it a second time (frames 2 ms apart, 2-core
// VM, a producer at nice 10 so that its woken consumer always runs first:
// 27-29 µs from publish to nextSync()'s wake-up; yielding, 5-6). Where the
// CPU is the sleeper's alone, sched_yield() returns at once.
int ConsumerState::ClaimWithin(Napi::Env env, gpr_frame_ref *ref, uint64_t *pos, uint64_t spin_ns, bool follow_stream,
                               Between between) {
  int rc = TryClaim(env, ref, pos);
  if (rc == 0 || spin_ns == 0) return rc;
  uint64_t now = gpr_monotonic_ns(), until = now + spin_ns, cap = now + kStreamPollMaxNs;
  uint64_t head = __atomic_load_n(&seg.control->head, __ATOMIC_RELAXED);
  while (rc != 0 && now < until) {
    if (between == Between::kYield)
      sched_yield();
    else
      for (int i = 0; i < 32; i++) gpr_cpu_relax();
    rc = TryClaim(env, ref, pos);
    now = gpr_monotonic_ns();
    if (!follow_stream) continue;
    uint64_t moved = __atomic_load_n(&seg.control->head, __ATOMIC_RELAXED);
    if (moved != head) head = moved, until = std::min(now + spin_ns, cap);
  }
  return rc;
}

void ConsumerState::Expire(Napi::Env env) {
  uint64_t now = gpr_monotonic_ns();
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->deadline_ns > now) {
      ++it;
      continue;
    }
    Reject(*it, MakeError(env, GPR_E_TIMEOUT, "no frame arrived before the timeout"));
    it = pending.erase(it);
  }
}

uint64_t ConsumerState::NextWakeMs() const {
  uint64_t now = gpr_monotonic_ns(), wake = tick_ms;
  for (const Request &r : pending)
    if (r.deadline_ns != UINT64_MAX) wake = std::min(wake, (r.deadline_ns - now + 999999) / 1000000);
  return wake;
}

// A consumer whose last frame came less than kBusyStreamNs ago polls the ring
// that long before it arms its doorbell: in a busy stream the next frame is
// microseconds away, and sleeping would cost the producer a ring (a system
// call) per frame and us a wake-up per frame (publishMany to a batched
// consumer on the 16-core H100 host: means of 0.90 M frames/s without, over
// five runs, and 1.03 M with, over six). Only where a core is spare: on 2
// cores the poll takes the producer's CPU (-13% there). Not on a broadcast
// ring, whose subscribers all poll the slots its one producer writes (fan-out
// to 1-4 subscribers fell by 12-30% in one run). `busy_poll` says whether
// both hold; it is decided once, at open.
uint64_t ConsumerState::BusySpinNs() const {
  return busy_poll && gpr_monotonic_ns() - taken_ns < kBusyStreamNs ? kBusyStreamNs : 0;
}

// The doorbell protocol's sleeper side (gpuring/doorbell.h): look, arm, look
// once more, and only then sleep; a publish between the two looks rings us.
void ConsumerState::Service(Napi::Env env) {
  NotifySpaceOwed();
  for (;;) {
    if (pending.empty()) return listener.IsEmpty() ? StopWaiting() : Deliver(env);
    gpr_frame_ref ref{};
    uint64_t pos = 0;
    Request r = pending.front();
    try {
      if (ClaimAwake(env, &ref, &pos) != 0) {
        // Requests time out only when no frame is ready: a loop held up past a
        // deadline (a synchronous call elsewhere in the process) still hands
        // over the frame that was waiting, as a producer publishes before it
        // expires its waits.
        Expire(env);
        if (pending.empty() || pending.front().id != r.id) continue;
        if (!ArmOrClaim(env, &ref, &pos)) return bell->Sleep(NextWakeMs());
      }
      Napi::Value record = Receive(env, pos, ref);
      if (record.IsEmpty()) {
        // Taken back: claim again after a turn of the loop, so that a process
        // taking back every claim cannot hold the loop, nor keep requests
        // from expiring.
        Expire(env);
        return bell->Sleep(0);
      }
      pending.pop_front();
      Resolve(r, record);
    } catch (const Napi::Error &e) {
      if (!pending.empty() && pending.front().id == r.id) pending.pop_front();
      Reject(r, e);
    }
  }
}

int ConsumerState::ClaimAwake(Napi::Env env, gpr_frame_ref *ref, uint64_t *pos) {
  bool rung = bell->TakeRung();
  return ClaimWithin(env, ref, pos, rung ? kHeadsUpWaitNs : BusySpinNs(), busy_poll,
                     rung ? Between::kYield : Between::kRelax);
}

bool ConsumerState::ArmOrClaim(Napi::Env env, gpr_frame_ref *ref, uint64_t *pos) {
  bell->Arm(GPR_BELL_DATA);
  if (TryClaim(env, ref, pos) != 0) return false;
  bell->Disarm();
  return true;
}

// A frame is taken only when the one before it went to JS: the frames behind
// one the listener is slow with stay in the ring for other consumers. An
// error taking one (a malformed frame, dropped; frames missed) goes to JS
// too, and the next frame follows.
void ConsumerState::Deliver(Napi::Env env) {
  const uint64_t serving = listens;
  for (uint32_t n = 0; n < kDeliverMax; n++) {
    if (shut || listener.IsEmpty() || listens != serving) return;  // stopped, closed, or another listener
    gpr_frame_ref ref{};
    uint64_t pos = 0;
    Napi::Value record;
    try {
      if (ClaimAwake(env, &ref, &pos) != 0 && !ArmOrClaim(env, &ref, &pos)) return SleepListening();
      record = Receive(env, pos, ref);
    } catch (const Napi::Error &e) {
      bell->Disarm();
      listener.Call({env.Undefined(), e.Value()});
      continue;
    }
    if (record.IsEmpty()) return bell->Sleep(0);  // taken back: claim again after a turn of the loop
    bool made = record.IsObject() && !record.IsArrayBuffer() && !listener_handler.IsEmpty();
    (made ? listener_handler : listener).Call({record});
  }
  if (!shut && !listener.IsEmpty()) bell->Sleep(0);
}

void ConsumerState::SleepListening() {
  Napi::Value offered = listener_spare.IsEmpty() ? Napi::Value() : listener_spare.Call({});
  if (!offered.IsEmpty() && offered.IsArray()) {
    Napi::Array spare_of = offered.As<Napi::Array>();
    OfferSpare(spare_of.Get(0u).As<Napi::Object>(), spare_of.Get(1u).As<Napi::Number>().DoubleValue(),
               spare_of.Get(2u).As<Napi::Number>().Uint32Value(), Napi::Value());
  }
  bell->Sleep(tick_ms);
}

namespace {
Napi::Object IterationResult(Napi::Env env, Napi::Value value, bool done) {
  Napi::Object result = Napi::Object::New(env);
  result.Set("value", value);
  result.Set("done", Napi::Boolean::New(env, done));
  return result;
}

// What ends a loop quietly rather than throws out of it.
bool EndsIteration(const Napi::Error &e) {
  Napi::Value code = e.Value().Get("code");
  if (!code.IsString()) return false;
  std::string name = code.As<Napi::String>().Utf8Value();
  return name == gpr_code_name(GPR_E_CLOSED) || name == gpr_code_name(GPR_E_ABORTED);
}
}  // namespace

void ConsumerState::Resolve(Request &r, Napi::Value record) {
  Napi::Function make = Live(received);
  bool spare_frame = record.IsObject() && !record.IsArrayBuffer();  // made already (see spare)
  Napi::Value frame = make.IsEmpty() || spare_frame ? record : make.Call({record});
  if (!r.iteration) return r.deferred.Resolve(frame);
  Napi::Object made = spare_frame && !spare_result_taken.IsEmpty() ? spare_result_taken.Value() : Napi::Object();
  spare_result_taken.Reset();
  r.deferred.Resolve(made.IsEmpty() ? IterationResult(r.deferred.Env(), frame, false) : made);
}

void ConsumerState::Abort(Napi::Env env, const std::function<bool(const Request &)> &which, const char *why) {
  for (auto it = pending.begin(); it != pending.end();) {
    if (!which(*it)) {
      ++it;
      continue;
    }
    Reject(*it, MakeError(env, GPR_E_ABORTED, why));
    it = pending.erase(it);
  }
  if (pending.empty() && bell) StopWaiting();
}

void ConsumerState::Reject(Request &r, const Napi::Error &e) {
  if (r.iteration && EndsIteration(e)) return r.deferred.Resolve(IterationResult(r.deferred.Env(), r.deferred.Env().Undefined(), true));
  Napi::Function make = Live(failed);
  if (make.IsEmpty()) return r.deferred.Reject(e.Value());
  try {
    r.deferred.Reject(make.Call({e.Value()}));
  } catch (const Napi::Error &thrown) {
    r.deferred.Reject(thrown.Value());
  }
}

// Runs on the event loop when the bell rang or the tick passed.
void ConsumerState::OnWake() {
  woken_ns = gpr_monotonic_ns();
  Woken([this](Napi::Env e) { Service(e); });
}

void ConsumerState::Housekeep() {
  stream_releases.Collect();
  if (forgotten_at_sweep != sweeps) {
    forgotten_at_sweep = sweeps;
    ForgetDeadPublishers();
    ForgetRemovedArenas();
  }
}

uint64_t ConsumerState::StopCheckMs() {
  static const uint64_t ms = [] {
    const char *set = getenv("GPURING_TEST_STOP_CHECK_MS");
    return set && *set ? std::max<uint64_t>(1, strtoull(set, nullptr, 10)) : uint64_t{50};
  }();
  return ms;
}

ConsumerState::Blocked ConsumerState::ClaimBlocking(Napi::Env env, gpr_frame_ref *ref, uint64_t *pos, uint64_t spin_ns,
                                                    uint64_t deadline_ns) {
  // Node stops a worker (worker.terminate(), process.exit()) by making its JS
  // unable to run and waiting for its thread: a thread asleep here must notice
  // and return, so it looks every StopCheckMs() at most.
  auto stopping = [&] { return !JsRuns(env); };
  bool rung = false;
  try {
    for (;;) {
      NotifySpaceOwed();
      if (ClaimWithin(env, ref, pos, std::max(spin_ns, BusySpinNs()), busy_poll,
                      rung ? Between::kYield : Between::kRelax) == 0)
        return Blocked::kClaimed;
      uint64_t now = gpr_monotonic_ns();
      if (now >= deadline_ns) return Blocked::kTimedOut;
      // Before the sleep rather than after the wake-up, where every step
      // delays the frame it woke for.
      Tidy();
      bell->Arm(GPR_BELL_DATA | GPR_BELL_FUTEX);
      if (TryClaim(env, ref, pos) == 0) break;
      uint64_t left_ms = deadline_ns == UINT64_MAX ? UINT64_MAX : (deadline_ns - now + 999999) / 1000000;
      // A ring may be a heads-up, sent before its frame is READY (see Service).
      rung = bell->Block(GPR_BELL_DATA, std::min<uint64_t>({tick_ms, left_ms, StopCheckMs()}));
      spin_ns = rung ? kHeadsUpWaitNs : 0;
      woken_ns = gpr_monotonic_ns();
      bell->Disarm();  // a ringer cleared our bit; a timeout or a signal did not
      if (!rung && stopping()) return Blocked::kStopping;
    }
  } catch (...) {
    bell->Disarm();
    throw;
  }
  bell->Disarm();  // found one after arming: spare the producer a ring
  return Blocked::kClaimed;
}

void ConsumerState::ForgetDeadPublishers() {
  cuda::LivePublisher live = [this](uint32_t index, uint32_t gen) { return gpr_publisher_live(&seg, index, gen) != 0; };
  cuda::IpcHandleCache::Get().ForgetDeadPublishers(cuda::InternSegment(seg.name), live);
  cuda::PoolImports::Get().ForgetDeadPublishers(seg.name, live);
}

// Views of removed arenas go at once: bodies were copied out at the claim. A
// buffer lent to JS is replaced with zero pages, so even a table kept past
// its release reads zeros rather than faulting.
void ConsumerState::ForgetRemovedArenas() {
  if (bodies)
    bodies->ForgetRemoved([this](uint32_t index, uint32_t gen, uint32_t arena) {
      char name[GPR_SHM_NAME_MAX];
      gpr_arena_shm_name(seg.name, index, gen, arena, name);
      return gpr_arena_removed(&seg, name) != 0;
    });
  if (lent.TakeBackRemoved([this](const std::string &file) { return gpr_arena_removed(&seg, file.c_str()) != 0; }))
    ++*arenas_taken_back;
}

void ConsumerState::Shutdown() {
  if (shut) return;
  shut = true;
  NotifySpaceOwed();
  bell.reset();  // disarmed: nobody rings a participant that left
  spare.Reset();
  spare_result.Reset();
  spare_result_taken.Reset();
  spare_cells.Reset();
  spare_cells_data = nullptr;
  spare_cells_length = 0;
  bodies.reset();
  records = RecordChunks();
  stream_releases.WaitAll();
  ForgetDeadPublishers();
  Detach();  // hands back claims, releases leases
}

// ---------------------------------------------------------------------------

// tryNext, tryNextMany, wait and release are defined on each instance (DirectMethods).
Napi::Function ConsumerCore::Define(Napi::Env env) {
  return DefineClass(env, "ConsumerCore",
                     {InstanceMethod<&ConsumerCore::Cancel>("cancel"),
                      InstanceMethod<&ConsumerCore::CancelIteration>("cancelIteration"),
                      InstanceMethod<&ConsumerCore::NotifySpace>("notifySpace"),
                      InstanceMethod<&ConsumerCore::ReleaseAfter>("releaseAfter"),
                      InstanceMethod<&ConsumerCore::HandBack>("handBack"),
                      InstanceMethod<&ConsumerCore::OpenArena>("openArena"),
                      InstanceMethod<&ConsumerCore::OpenArenaWindow>("openArenaWindow"),
                      InstanceMethod<&ConsumerCore::Close>("close"),
                      InstanceMethod<&ConsumerCore::WokenAt>("wokenAt"),
                      InstanceMethod<&ConsumerCore::SpareCells>("spareCells"),
                      InstanceMethod<&ConsumerCore::Listen>("listen"),
                      InstanceMethod<&ConsumerCore::Unlisten>("unlisten")});
}

// new ConsumerCore(segmentName, openTimeoutMs, sweepIntervalMs, openFlags[, received, failed])
ConsumerCore::ConsumerCore(const Napi::CallbackInfo &info) : Napi::ObjectWrap<ConsumerCore>(info) {
  Napi::Env env = info.Env();
  std::string name = info[0].As<Napi::String>();
  s_ = std::make_shared<ConsumerState>();
  ConsumerState &s = *s_;
  s.Attach(env, name, info[1].As<Napi::Number>().Uint32Value(), info[3].As<Napi::Number>().Uint32Value(),
           GPR_ROLE_CONSUMER);
  s.on_slow = info.Length() > 6 && info[6].IsNumber() ? info[6].As<Napi::Number>().Uint32Value() : 0u;
  bool oldest = info.Length() > 7 && info[7].IsBoolean() && info[7].As<Napi::Boolean>().Value();
  if (s.seg.broadcast) gpr_bc_join(&s.seg, s.me, s.on_slow, oldest);
  static const bool spare_cores = LoopParticipant::SpareCores();
  s.busy_poll = spare_cores && !s.seg.broadcast;
  try {
    s.bodies = std::make_unique<BodyReader>(&s.seg);
    s.StartBell(env, "gpuring-consumer", info[2].As<Napi::Number>().Uint32Value(), s_);
    if (info.Length() > 5 && info[4].IsFunction() && info[5].IsFunction()) {
      // Weak: the Consumer holds them, and a strong reference from here would
      // keep it (and so this core) alive forever.
      s.received = Napi::Weak(info[4].As<Napi::Function>());
      s.failed = Napi::Weak(info[5].As<Napi::Function>());
    }
  } catch (...) {
    s.Shutdown();
    throw;
  }
  Napi::Uint32Array owed = Napi::Uint32Array::New(env, 1);
  s.space_owed = owed.Data();
  s.space_owed_view = Napi::Persistent(owed);
  Value().Set("spaceOwed", owed);
  Napi::Uint32Array taken_back = Napi::Uint32Array::New(env, 1);
  s.arenas_taken_back = taken_back.Data();
  s.arenas_taken_back_view = Napi::Persistent(taken_back);
  Value().Set("arenasTakenBack", taken_back);
  Napi::Float64Array cursor = Napi::Float64Array::New(env, 2);
  s.records.Share(cursor.Data());
  s.record_cursor_view = Napi::Persistent(cursor);
  Value().Set("recordCursor", cursor);
  Value().Set("recordChunk", s.records.First(env));
  s.HookExit();
  Value().Set("index", Napi::Number::New(env, s.me));
  Value().Set("generation", Napi::Number::New(env, s.gen));
  direct_.Define<&ConsumerCore::TryNext>(Value(), "tryNext");
  direct_.Define<&ConsumerCore::TryNextMany>(Value(), "tryNextMany");
  direct_.Define<&ConsumerCore::NextSync>(Value(), "nextSync");
  direct_.Define<&ConsumerCore::Wait>(Value(), "wait");
  direct_.Define<&ConsumerCore::Release>(Value(), "release");
}

ConsumerCore::~ConsumerCore() {
  s_->UnhookExit();
  if (!closed_) s_->Shutdown();
}

void ConsumerCore::RequireOpen(Napi::Env env) const {
  if (closed_) Throw(env, GPR_E_CLOSED, "the consumer is closed");
}

void ConsumerCore::RequireNoListener(Napi::Env env) const {
  if (!s_->listener.IsEmpty())
    Throw(env, GPR_E_UNSUPPORTED, "this consumer hands its frames to a listener (listen()); stop() it before taking frames otherwise");
}

// A malformed frame met after good ones in a batch is reported by the next call.
void ConsumerCore::ThrowHeldError(Napi::Env env) {
  if (!s_->held_error) return;
  Napi::Error e = *s_->held_error;
  s_->held_error.reset();
  throw e;
}

// tryNext(spinMicros = 0): a frame now (see Receive), or null. With spinMicros it busy-polls
// the ring on the calling (JS) thread for up to that long first: the caller
// trades a blocked event loop for a wake-up in well under a microsecond.
// Never overtakes a request already waiting.
Napi::Value ConsumerCore::TryNext(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  RequireNoListener(env);
  ThrowHeldError(env);
  s_->NotifySpaceOwed();
  if (!s_->pending.empty()) return env.Null();
  double spin_us = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : 0;
  gpr_frame_ref ref{};
  uint64_t pos = 0;
  if (s_->ClaimWithin(env, &ref, &pos, static_cast<uint64_t>(spin_us > 0 ? spin_us * 1e3 : 0)) != 0) {
    s_->Tidy();
    return env.Null();
  }
  Napi::Value record = s_->Receive(env, pos, ref);
  return record.IsEmpty() ? env.Null() : record;  // taken back: none for now
}

// nextSync(timeoutMs, -1 = forever, spinMicros[, at, cell]): the next frame
// (as tryNext returns it, or `true`: the spare Frame JS made at `at`, whose
// pos went into cell `cell`), with the calling thread blocked until it comes;
// TIMEOUT after timeoutMs. Refused while a wait() request is pending: that request would be
// overtaken, and the event loop that serves it cannot run while we block.
Napi::Value ConsumerCore::NextSync(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  RequireNoListener(env);
  ThrowHeldError(env);
  if (!s_->pending.empty())
    Throw(env, GPR_E_UNSUPPORTED, "nextSync() was called while a next() of this consumer waits; use one or the other at a time");
  double timeout_ms = info[0].As<Napi::Number>().DoubleValue();
  double spin_us = info[1].As<Napi::Number>().DoubleValue();
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : gpr_monotonic_ns() + static_cast<uint64_t>(timeout_ms * 1e6);
  // Where JS made a spare Frame: made before the sleep, it spares the caller's
  // wake-up making one on cold caches. JS holds it; offered for this call only.
  if (info.Length() > 3) s_->OfferHeldSpare(info[2].As<Napi::Number>().DoubleValue(), info[3].As<Napi::Number>().Uint32Value());
  struct ForgetAfter {
    ConsumerState &s;
    ~ForgetAfter() { s.held_spare.at = -1; }
  } forget_after{*s_};
  for (;;) {
    gpr_frame_ref ref{};
    uint64_t pos = 0;
    switch (s_->ClaimBlocking(env, &ref, &pos, static_cast<uint64_t>(spin_us * 1e3), deadline)) {
      case ConsumerState::Blocked::kClaimed: {
        Napi::Value record = s_->Receive(env, pos, ref);
        if (!record.IsEmpty()) return record;
        if (gpr_monotonic_ns() < deadline) continue;  // taken back: claim again, while time is left
        [[fallthrough]];
      }
      case ConsumerState::Blocked::kTimedOut:
        s_->SweepIfDue();
        Throw(env, GPR_E_TIMEOUT, "no frame arrived before the timeout");
      case ConsumerState::Blocked::kStopping:
        return Napi::Value();  // no JS runs after this: the thread is being stopped
    }
  }
}

// tryNextMany(max[, after]): every frame ready now, up to max, in one
// ArrayBuffer: records one after another, each 8-aligned (record, then its
// body). Returns null when none is ready. Never waits, never overtakes a
// waiting request. `after`: the batch's first frame went to the caller
// already (nextBatch() waited for it): an error is held for the next call,
// never thrown, which would cost the caller that frame.
Napi::Value ConsumerCore::TryNextMany(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  RequireNoListener(env);
  bool after = info.Length() > 1 && info[1].ToBoolean().Value();
  ThrowHeldError(env);
  uint32_t max = info[0].As<Napi::Number>().Uint32Value();
  s_->NotifySpaceOwed();
  if (!s_->pending.empty()) return env.Null();
  struct Claim {
    uint64_t pos;
    gpr_frame_ref ref;
    const uint8_t *body;
  };
  std::vector<Claim> claims;
  gpr_error err{};
  size_t total = 0;
  Claim c{};
  auto claim = [&]() {
    try {
      return s_->TryClaim(env, &c.ref, &c.pos) == 0;
    } catch (const Napi::Error &e) {
      if (claims.empty() && !after) throw;
      s_->held_error = e;  // the frames before it come now, the loss with the next call
      return false;
    }
  };
  while (claims.size() < max && claim()) {
    if (!s_->bodies->Locate(c.ref, &c.body, &err)) {  // the malformed frame goes; the ones before it come
      gpr_ring_release_as(&s_->seg, s_->me, c.pos, GPR_SLOT_CLAIMED);
      break;
    }
    claims.push_back(c);
    total += ConsumerState::kRecordBytes + ((c.ref.body_length + 7u) & ~size_t{7});
  }
  if (claims.empty() && err.code == GPR_E_OK) s_->Tidy();
  // Locate again before copying: mapping a new arena may have evicted earlier views.
  Napi::ArrayBuffer out = Napi::ArrayBuffer::New(env, total);
  auto *at = static_cast<uint8_t *>(out.Data());
  size_t used = 0;
  bool any = false;
  for (const Claim &k : claims) {
    const uint8_t *body = nullptr;
    gpr_error e{};
    if (!s_->bodies->Locate(k.ref, &body, &e)) {
      gpr_ring_release_as(&s_->seg, s_->me, k.pos, GPR_SLOT_CLAIMED);
    } else {
      memcpy(at + used + ConsumerState::kRecordBytes, body, k.ref.body_length);
      if (s_->Accept(k.pos, k.ref, at + used, &e)) {
        used += ConsumerState::kRecordBytes + ((k.ref.body_length + 7u) & ~size_t{7});
        any = true;
        continue;
      }
    }
    // A malformed frame is dropped, one taken back (`e` clear) goes to whoever
    // claims it next; the others still come, in order.
    if (err.code == GPR_E_OK) err = e;
  }
  if (err.code != GPR_E_OK) {
    if (!any && !after) Throw(env, err);
    if (!s_->held_error) s_->held_error = MakeError(env, err);
  }
  if (!any) return env.Null();
  s_->Taken();
  // Slots of dropped frames, if any, stay at the end, zeroed: JS stops at `used`.
  Napi::Array result = Napi::Array::New(env, 2);
  result.Set(0u, out);
  result.Set(1u, Napi::Number::New(env, static_cast<double>(used)));
  return result;
}

// wait(timeoutMs: number, -1 = forever[, spare, at, cell]) -> [requestId, Promise]. `spare`,
// a Frame over offset `at` of the current record chunk, is what the promise
// resolves to if its record is written there; element `cell` of the shared
// spare cells (spareCells) then gets the frame's pos (ConsumerState::spare).
Napi::Value ConsumerCore::Wait(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  RequireNoListener(env);
  double timeout_ms = info[0].As<Napi::Number>().DoubleValue();
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : gpr_monotonic_ns() + static_cast<uint64_t>(timeout_ms * 1e6);
  uint32_t iteration = info[1].As<Napi::Number>().Uint32Value();
  if (info.Length() > 4 && info[2].IsObject())
    s_->OfferSpare(info[2].As<Napi::Object>(), info[3].As<Napi::Number>().DoubleValue(), info[4].As<Napi::Number>().Uint32Value(), info[5]);
  uint64_t id = s_->next_request++;
  auto deferred = Napi::Promise::Deferred::New(env);
  s_->pending.push_back(ConsumerState::Request{id, deadline, deferred, iteration});
  s_->Service(env);
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, Napi::Number::New(env, static_cast<double>(id)));
  out.Set(1u, deferred.Promise());
  return out;
}

// cancel(requestId): rejects the request with ABORTED.
Napi::Value ConsumerCore::Cancel(const Napi::CallbackInfo &info) {
  uint64_t id = static_cast<uint64_t>(info[0].As<Napi::Number>().DoubleValue());
  s_->Abort(info.Env(), [id](const ConsumerState::Request &r) { return r.id == id; }, "the wait for a frame was aborted");
  return info.Env().Undefined();
}

// cancelIteration(iteration): ends every wait of that `for await` loop (it stopped): each resolves {done: true}.
Napi::Value ConsumerCore::CancelIteration(const Napi::CallbackInfo &info) {
  uint32_t iteration = info[0].As<Napi::Number>().Uint32Value();
  s_->Abort(info.Env(), [iteration](const ConsumerState::Request &r) { return r.iteration == iteration; }, "the loop stopped");
  return info.Env().Undefined();
}

// release(pos) -> whether JS must call notifySpace() at the end of its job:
// true for the first release of a work-queue ring since the last notification
// (see NotifySpaceOwed). Broadcast rings notify at once.
Napi::Value ConsumerCore::Release(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closed_) return env.Undefined();  // detach already released everything
  uint64_t pos = static_cast<uint64_t>(info[0].As<Napi::Number>().DoubleValue());
  bool coalesced = !s_->seg.broadcast;
  int rc = coalesced ? gpr_ring_release_unnotified(&s_->seg, s_->me, pos) : gpr_ring_release(&s_->seg, s_->me, pos);
  if (rc != 0 && s_->Lost()) return Napi::Boolean::New(env, false);  // the lease went with the entry
  if (rc != 0) Throw(env, GPR_E_FRAME_STATE, "the frame is not leased by this consumer (already released?)");
  bool first = coalesced && !*s_->space_owed;
  if (coalesced) *s_->space_owed = 1;
  return Napi::Boolean::New(env, first);
}

// notifySpace(): the space notification the releases since the last one owe
// (see Release). JS calls it at the end of the job that released, when
// `spaceOwed[0]` says a take has not sent it already.
Napi::Value ConsumerCore::NotifySpace(const Napi::CallbackInfo &info) {
  s_->NotifySpaceOwed();
  return info.Env().Undefined();
}

// A producer waiting for space is woken once for the releases of one run of
// JS, not per frame: a consumer releasing a batch rang it at the first
// release, and it woke to one free slot, filled it and slept again, a system
// call for the consumer and a wake-up for the producer every few frames
// (300,000 frames through a 1,024-slot ring on the 16-core H100 host: 27,000 to
// 31,000 rings; coalesced: 66 to 150).
void ConsumerState::NotifySpaceOwed() {
  if (!space_owed || !*space_owed) return;
  *space_owed = 0;
  gpr_notify_space(&seg);
}

// handBack(pos): a frame this consumer took but never gave its user (a batch
// cut short) goes back to the ring, to be redelivered to any consumer.
Napi::Value ConsumerCore::HandBack(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closed_) return env.Undefined();  // detach already handed everything back
  uint64_t pos = static_cast<uint64_t>(info[0].As<Napi::Number>().DoubleValue());
  if (gpr_ring_unclaim_as(&s_->seg, s_->me, pos, GPR_SLOT_LEASED) != 0 && !s_->Lost())
    Throw(env, GPR_E_FRAME_STATE, "the frame is not leased by this consumer");
  return env.Undefined();
}

// releaseAfter(pos, device, stream, mappings): ends the lease when `stream`
// (a CUstream on `device`, 0n for the legacy default stream) completes the
// work queued on it so far; returns at once. `mappings` holds the 64-byte IPC
// handles the frame took references on, dropped at the same moment. Closing
// the consumer waits for these releases.
Napi::Value ConsumerCore::ReleaseAfter(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closed_) return env.Undefined();  // detach already released everything
  uint64_t pos = static_cast<uint64_t>(info[0].As<Napi::Number>().DoubleValue());
  if (!gpr_ring_holds(&s_->seg, s_->me, pos)) {
    if (s_->Lost()) return env.Undefined();  // the lease went with the entry
    Throw(env, GPR_E_FRAME_STATE, "the frame is not leased by this consumer (already released?)");
  }
  auto bytes = info[3].As<Napi::Uint8Array>();
  std::vector<cuda::CUipcMemHandle> mappings(bytes.ByteLength() / sizeof(cuda::CUipcMemHandle));
  memcpy(mappings.data(), bytes.Data(), mappings.size() * sizeof(cuda::CUipcMemHandle));
  s_->stream_releases.Collect();
  s_->stream_releases.Queue(env, &s_->seg, s_->me, pos, info[1].As<Napi::Number>().Int32Value(), cuda::StreamOf(info[2]),
                            std::move(mappings));
  return env.Undefined();
}

// spareCells(cells: Float64Array): where spares' pos go from now on (see
// ConsumerState::spare); JS keeps it, and passes a larger one when it grows.
Napi::Value ConsumerCore::SpareCells(const Napi::CallbackInfo &info) {
  auto cells = info[0].As<Napi::Float64Array>();
  s_->spare_cells = Napi::Persistent(cells);
  s_->spare_cells_data = cells.Data();
  s_->spare_cells_length = cells.ElementLength();
  return info.Env().Undefined();
}

Napi::Value ConsumerCore::WokenAt(const Napi::CallbackInfo &info) {
  return Napi::BigInt::New(info.Env(), s_->woken_ns);
}

Napi::Value ConsumerCore::OpenArena(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  return OpenArenaBuffer(env, s_->lent, s_->seg, info[0].As<Napi::String>());
}

// openArenaWindow(name, start, length): see OpenArenaWindow (arena_map.h).
Napi::Value ConsumerCore::OpenArenaWindow(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  return gpuring::OpenArenaWindow(env, s_->lent, s_->seg, info[0].As<Napi::String>(), static_cast<uint64_t>(info[1].As<Napi::Number>().DoubleValue()),
                                  static_cast<uint64_t>(info[2].As<Napi::Number>().DoubleValue()));
}

Napi::Value ConsumerCore::Close(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closed_) return env.Undefined();
  closed_ = true;
  s_->UnhookExit();
  s_->Shutdown();
  s_->lent.TakeBack();
  for (auto &r : s_->pending) s_->Reject(r, MakeError(env, GPR_E_CLOSED, "the consumer was closed"));
  s_->pending.clear();
  s_->listener.Reset();
  s_->listener_spare.Reset();
  s_->listener_handler.Reset();
  return env.Undefined();
}

// listen(deliver[, spare, handler]): frames go to deliver(record) from now on
// (those that landed in the spare() made before a sleep, to handler(frame)),
// the first from a turn of the event loop after this call, never from within
// it (see ConsumerState::listener). Refused while a wait() request is pending.
Napi::Value ConsumerCore::Listen(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  RequireNoListener(env);
  if (!s_->pending.empty())
    Throw(env, GPR_E_UNSUPPORTED, "listen() was called while a next() of this consumer waits; use one or the other at a time");
  s_->listener = Napi::Persistent(info[0].As<Napi::Function>());
  s_->listens++;
  if (info.Length() > 1 && info[1].IsFunction()) s_->listener_spare = Napi::Persistent(info[1].As<Napi::Function>());
  if (info.Length() > 2 && info[2].IsFunction()) s_->listener_handler = Napi::Persistent(info[2].As<Napi::Function>());
  s_->NotifySpaceOwed();
  s_->bell->Sleep(0);
  return env.Undefined();
}

// unlisten(): no frame goes to the listener after this; those not yet taken
// stay in the ring.
Napi::Value ConsumerCore::Unlisten(const Napi::CallbackInfo &info) {
  if (closed_ || s_->listener.IsEmpty()) return info.Env().Undefined();
  s_->listener.Reset();
  s_->listener_spare.Reset();
  s_->listener_handler.Reset();
  s_->StopWaiting();
  return info.Env().Undefined();
}

}  // namespace gpuring
