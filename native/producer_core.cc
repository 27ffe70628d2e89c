#include "producer_core.h"
#include "arena_map.h"
#include "errors.h"
#include "js_values.h"

namespace gpuring {

namespace {
constexpr uint64_t kForever = UINT64_MAX;
constexpr int kLazyReapMs = 20;  // how stale released memory may get while nobody waits for it

uint64_t DeadlineAfter(double timeout_ms) {
  if (timeout_ms < 0) return kForever;
  return gpr_monotonic_ns() + static_cast<uint64_t>(timeout_ms * 1e6);
}
}  // namespace

// Frees the memory of every in-flight frame whose slot was released.
size_t ProducerState::ReapLocked() {
  size_t reaped = 0;
  for (auto it = inflight.begin(); it != inflight.end();) {
    if (!gpr_ring_reap(&seg, me, it->pos)) {
      ++it;
      continue;
    }
    for (const auto &a : it->allocs) gpr_arena_free(&pool, &a);
    released.push_back(it->id);
    it = inflight.erase(it);
    reaped++;
  }
  return reaped;
}

// Publishes waiting requests in order; stops at the first that does not fit.
bool ProducerState::PublishPendingLocked() {
  bool any = false;
  while (!pending.empty()) {
    Pending &p = pending.front();
    uint64_t pos = 0;
    p.ref.frame_id = next_frame_id;  // ids are dense, in publication order
    int rc = gpr_ring_try_publish(&seg, me, &p.ref, &pos);
    if (rc == -static_cast<int>(GPR_E_FRAME_STATE)) {  // a sweeper took our claim back: fail, never wedge
      ReturnAllocsLocked(p.allocs);
      FinishPending(p.request, 0, GPR_E_FRAME_STATE, "the ring took this producer's slot back (was it judged dead?)");
      pending.pop_front();
      continue;
    }
    if (rc != 0) break;
    next_frame_id++;
    inflight.push_back(Frame{p.ref.frame_id, pos, std::move(p.allocs)});
    FinishPending(p.request, p.ref.frame_id, GPR_E_OK, "");
    pending.pop_front();
    any = true;
  }
  return any;
}

void ProducerState::ReturnAllocsLocked(const std::vector<gpr_allocation> &allocs) {
  // The body (first) was ours; the column buffers go back to their JS owner.
  if (!allocs.empty()) gpr_arena_free(&pool, &allocs[0]);
  for (size_t i = 1; i < allocs.size(); i++) loose[{allocs[i].arena, allocs[i].offset}] = allocs[i].length;
}

void ProducerState::ExpirePendingLocked() {
  uint64_t now = gpr_monotonic_ns();
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->deadline_ns > now) {
      ++it;
      continue;
    }
    ReturnAllocsLocked(it->allocs);
    char why[512];
    gpr_ring_describe_full(&seg, why, sizeof why);
    FinishPending(it->request, 0, GPR_E_TIMEOUT, std::string("publish timed out waiting for space: ") + why);
    it = pending.erase(it);
  }
}

void ProducerState::FinishPending(uint64_t request, uint64_t frame_id, gpr_code code, std::string why) {
  auto self = shared_from_this();
  thread.Post([self, request, frame_id, code, why](Napi::Env env) {
    auto it = self->deferred.find(request);
    if (it == self->deferred.end()) return;
    if (code == GPR_E_OK) it->second.Resolve(Napi::Number::New(env, static_cast<double>(frame_id)));
    else it->second.Reject(MakeError(env, code, why).Value());
    self->deferred.erase(it);
    self->thread.Drop(env);
  });
}

void ProducerState::FlushReleases() {
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(thread.mu);
    ids.swap(released);
  }
  if (ids.empty() || !has_listener.load()) return;
  auto self = shared_from_this();
  thread.Post([self, ids](Napi::Env env) {
    if (self->on_release.IsEmpty()) return;
    Napi::Array arr = Napi::Array::New(env, ids.size());
    for (size_t i = 0; i < ids.size(); i++) arr.Set(i, Napi::Number::New(env, static_cast<double>(ids[i])));
    self->on_release.Call({arr});
  });
}

void ProducerState::Loop() {
  while (!thread.Stopping()) {
    bool busy, urgent;
    {
      std::lock_guard<std::mutex> lock(thread.mu);
      ReapLocked();
      PublishPendingLocked();
      ExpirePendingLocked();
      busy = !pending.empty() || !inflight.empty();
      urgent = !pending.empty() || (prompt.load() && !inflight.empty());
    }
    FlushReleases();  // before any sleep: JS may be waiting on these (drain)
    if (!urgent) {
      // Idle, or frames in flight that nobody waits on: reap on a timer.
      std::unique_lock<std::mutex> lock(thread.mu);
      thread.cv_.wait_for(lock, std::chrono::milliseconds(busy ? kLazyReapMs : 250), [&] {
        return thread.Stopping() || !pending.empty() || (!busy && !inflight.empty()) ||
               (prompt.load() && !inflight.empty());
      });
    } else {
      auto attempt = [](void *ctx) -> int {
        auto *self = static_cast<ProducerState *>(ctx);
        std::lock_guard<std::mutex> lock(self->thread.mu);
        bool progressed = self->ReapLocked() > 0;
        progressed = self->PublishPendingLocked() || progressed;
        return progressed || self->thread.Stopping() ? 0 : -static_cast<int>(GPR_E_RING_FULL);
      };
      gpr_wait_for(&seg.control->space_seq, &seg.control->space_waiters, attempt, this,
                   -static_cast<int>(GPR_E_RING_FULL), 50000000ull, 0);
    }
    if (sweeps.Due()) gpr_sweep(&seg, nullptr, nullptr);
  }
}

void ProducerState::Shutdown() {
  thread.Stop([this] { gpr_kick(&seg.control->space_seq); });
  Detach();  // the arenas stay named until no frame refers to them (recovery.h)
  gpr_arena_pool_destroy(&pool);
}

// ---------------------------------------------------------------------------

Napi::Function ProducerCore::Define(Napi::Env env) {
  return DefineClass(env, "ProducerCore",
                     {InstanceMethod<&ProducerCore::Allocate>("allocate"),
                      InstanceMethod<&ProducerCore::Free>("free"),
                      InstanceMethod<&ProducerCore::ArenaBuffer>("arenaBuffer"),
                      InstanceMethod<&ProducerCore::ArenaName>("arenaName"),
                      InstanceMethod<&ProducerCore::Publish>("publish"),
                      InstanceMethod<&ProducerCore::PublishMany>("publishMany"),
                      InstanceMethod<&ProducerCore::OnRelease>("onRelease"),
                      InstanceMethod<&ProducerCore::Stats>("stats"),
                      InstanceMethod<&ProducerCore::KeepAlive>("keepAlive"),
                      InstanceMethod<&ProducerCore::PromptReleases>("promptReleases"),
                      InstanceMethod<&ProducerCore::TakeReleased>("takeReleased"),
                      InstanceMethod<&ProducerCore::Close>("close")});
}

// new ProducerCore(segmentName, arenaSizeBytes, openTimeoutMs, openFlags)
ProducerCore::ProducerCore(const Napi::CallbackInfo &info) : Napi::ObjectWrap<ProducerCore>(info) {
  Napi::Env env = info.Env();
  env_ = env;
  std::string name = info[0].As<Napi::String>();
  uint64_t arena_size = static_cast<uint64_t>(info[1].As<Napi::Number>().DoubleValue());
  s_ = std::make_shared<ProducerState>();
  ProducerState &s = *s_;
  s.Attach(env, name, info[2].As<Napi::Number>().Uint32Value(), info[3].As<Napi::Number>().Uint32Value(),
           GPR_ROLE_PRODUCER);
  gpr_arena_pool_init(&s.pool, &s.seg, s.me, s.gen, arena_size);
  StartCore(env, s_, "gpuring-producer");
  Value().Set("index", Napi::Number::New(env, s.me));
  Value().Set("generation", Napi::Number::New(env, s.gen));
}

ProducerCore::~ProducerCore() {
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
  gpr_allocation a{};
  std::lock_guard<std::mutex> lock(s_->thread.mu);
  s_->ReapLocked();
  Check(env, [&](gpr_error *e) { return gpr_arena_alloc(&s_->pool, static_cast<uint64_t>(bytes), &a, e); });
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
  std::lock_guard<std::mutex> lock(s_->thread.mu);
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
  std::lock_guard<std::mutex> lock(s_->thread.mu);
  if (n >= s_->pool.count || !s_->pool.arenas[n].base) Throw(env, GPR_E_INVALID_ARGUMENT, "no such arena");
  return MapArenaBuffer(env, s_->pool.arenas[n].fd, s_->pool.arenas[n].size);
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
  return body;
}

// publish(body: Uint8Array, allocs: Float64Array [arena, offset, length]..., tag: bigint,
//         timeoutMs: number (-1 forever, 0 fail fast)) -> number | Promise<number>
Napi::Value ProducerCore::Publish(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Napi::Uint8Array body = ValidBody(env, info[0]);
  auto list = info[1].As<Napi::Float64Array>();
  uint64_t tag = ToU64(info[2]);
  double timeout_ms = info[3].As<Napi::Number>().DoubleValue();
  ProducerState &s = *s_;
  std::lock_guard<std::mutex> lock(s.thread.mu);
  std::vector<gpr_allocation> allocs(1);
  for (size_t i = 0; i + 2 < list.ElementLength(); i += 3) {
    gpr_allocation a{static_cast<uint32_t>(list[i]), static_cast<uint64_t>(list[i + 1]),
                     static_cast<uint64_t>(list[i + 2]), nullptr};
    auto it = s.loose.find({a.arena, a.offset});
    if (it == s.loose.end() || it->second != a.length)
      Throw(env, GPR_E_INVALID_ARGUMENT, "a column buffer is not an unpublished allocation of this producer");
    allocs.push_back(a);
  }
  s.ReapLocked();
  Napi::Value out = Enqueue(env, body.Data(), body.ByteLength(), std::move(allocs), tag, timeout_ms);
  if (out.IsEmpty()) {
    char why[512];
    gpr_ring_describe_full(&s.seg, why, sizeof why);
    Throw(env, GPR_E_RING_FULL, std::string(why) + " (publish with a timeout to wait for space)");
  }
  return out;
}

// publishMany(body: Uint8Array, count: number, tags: BigUint64Array | null,
//             timeoutMs: number) -> (number | Promise<number>)[]
// `count` frames of one body (validated once), in order, under one lock and one
// reap: each a number when it went into the ring at once, a promise when it
// waits for space. With timeoutMs 0 it stops at the first that does not fit:
// fewer ids than `count` come back, and the rest were never published.
Napi::Value ProducerCore::PublishMany(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Napi::Uint8Array body = ValidBody(env, info[0]);
  uint32_t count = info[1].As<Napi::Number>().Uint32Value();
  bool tagged = info[2].IsTypedArray();
  if (tagged && info[2].As<Napi::TypedArray>().ElementLength() < count)
    Throw(env, GPR_E_INVALID_ARGUMENT, "publishMany(): fewer tags than frames");
  double timeout_ms = info[3].As<Napi::Number>().DoubleValue();
  ProducerState &s = *s_;
  std::lock_guard<std::mutex> lock(s.thread.mu);
  s.ReapLocked();
  Napi::Array out = Napi::Array::New(env);
  for (uint32_t i = 0; i < count; i++) {
    uint64_t tag = tagged ? info[2].As<Napi::BigUint64Array>()[i] : 0;
    Napi::Value id = Enqueue(env, body.Data(), body.ByteLength(), std::vector<gpr_allocation>(1), tag, timeout_ms);
    if (id.IsEmpty()) break;
    out.Set(i, id);
  }
  return out;
}

// Copies `body` into the arena and publishes it (lock held, reaped): the frame
// id, a promise when it must wait for space, or an empty value when the ring is
// full and timeoutMs is 0 (nothing was kept). allocs[0] is for the body; the
// rest are column buffers the frame now owns.
Napi::Value ProducerCore::Enqueue(Napi::Env env, const uint8_t *body, size_t length, std::vector<gpr_allocation> allocs,
                                  uint64_t tag, double timeout_ms) {
  ProducerState &s = *s_;
  Check(env, [&](gpr_error *e) { return gpr_arena_alloc(&s.pool, length, &allocs[0], e); });
  memcpy(allocs[0].ptr, body, length);
  for (size_t i = 1; i < allocs.size(); i++) s.loose.erase({allocs[i].arena, allocs[i].offset});
  gpr_frame_ref ref{};
  ref.frame_id = s.next_frame_id;
  ref.producer = s.me;
  ref.producer_gen = s.gen;
  ref.body_arena = allocs[0].arena;
  ref.body_length = static_cast<uint32_t>(length);
  ref.body_offset = allocs[0].offset;
  ref.user_tag = tag;
  uint64_t pos = 0;
  if (s.pending.empty() && gpr_ring_try_publish(&s.seg, s.me, &ref, &pos) == 0) {
    s.next_frame_id++;
    s.inflight.push_back(ProducerState::Frame{ref.frame_id, pos, std::move(allocs)});
    // An idle thread sleeps on the condition variable, deaf to releases: if JS
    // waits for them, the first frame in flight moves it to the ring's futex.
    if (s.inflight.size() == 1 && s.prompt.load()) s.thread.cv_.notify_all();
    return Napi::Number::New(env, static_cast<double>(ref.frame_id));
  }
  if (timeout_ms == 0) {
    s.ReturnAllocsLocked(allocs);
    return Napi::Value();
  }
  uint64_t request = s.next_request++;
  s.pending.push_back(ProducerState::Pending{request, DeadlineAfter(timeout_ms), ref, std::move(allocs)});
  auto deferred = Napi::Promise::Deferred::New(env);
  s.deferred.emplace(request, deferred);
  s.thread.Retain(env);
  s.thread.cv_.notify_all();
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
Napi::Value ProducerCore::TakeReleased(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(s_->thread.mu);
    ids.swap(s_->released);
  }
  Napi::Array arr = Napi::Array::New(env, ids.size());
  for (size_t i = 0; i < ids.size(); i++) arr.Set(i, Napi::Number::New(env, static_cast<double>(ids[i])));
  return arr;
}

// keepAlive(true) while JS waits for releases (drain), keepAlive(false) after.
// promptReleases(on): whether JS waits for releases as they happen (see
// ProducerState::prompt). Wakes the thread so that it starts watching at once.
Napi::Value ProducerCore::PromptReleases(const Napi::CallbackInfo &info) {
  s_->prompt = info[0].As<Napi::Boolean>().Value();
  s_->thread.cv_.notify_all();
  return info.Env().Undefined();
}

Napi::Value ProducerCore::KeepAlive(const Napi::CallbackInfo &info) {
  if (info[0].As<Napi::Boolean>()) s_->thread.Retain(info.Env());
  else s_->thread.Drop(info.Env());
  return info.Env().Undefined();
}

Napi::Value ProducerCore::Stats(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  std::lock_guard<std::mutex> lock(s_->thread.mu);
  o.Set("inFlight", Napi::Number::New(env, static_cast<double>(s_->inflight.size())));
  o.Set("waiting", Napi::Number::New(env, static_cast<double>(s_->pending.size())));
  o.Set("unpublishedAllocations", Napi::Number::New(env, static_cast<double>(s_->loose.size())));
  o.Set("arenas", Napi::Number::New(env, s_->pool.count));
  o.Set("arenaFreeBytes", Napi::Number::New(env, static_cast<double>(gpr_arena_pool_free_bytes(&s_->pool))));
  return o;
}

Napi::Value ProducerCore::Close(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closed_) return env.Undefined();
  closed_ = true;
  s_->Shutdown();
  for (auto &kv : s_->deferred)
    kv.second.Reject(MakeError(env, GPR_E_CLOSED, "the producer was closed before the frame was published").Value());
  s_->deferred.clear();
  s_->on_release.Reset();
  return env.Undefined();
}

}  // namespace gpuring
