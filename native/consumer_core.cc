#include "consumer_core.h"
#include "cuda_context.h"
#include "errors.h"

namespace gpuring {

namespace {
constexpr uint64_t kSliceNs = 100000000ull;  // wake at least this often to sweep and check deadlines
constexpr uint32_t kSpins = 2000;            // busy-poll before sleeping on the futex

struct ClaimAttempt {
  ConsumerState *state;
  uint64_t epoch;
  gpr_frame_ref ref;
  uint64_t pos;
};

int TryClaim(void *ctx) {
  auto *a = static_cast<ClaimAttempt *>(ctx);
  if (a->state->thread.Stopping() || a->state->cancel_epoch.load() != a->epoch)
    return -static_cast<int>(GPR_E_ABORTED);
  return gpr_ring_try_claim(&a->state->seg, a->state->me, &a->ref, &a->pos);
}
}  // namespace

// What JS receives for a frame: one ArrayBuffer, a fixed record (kRecordBytes)
// followed by a private copy of the body, validated here by the C validator so
// every language rejects the same bodies with the same codes. A body that
// cannot be read or fails validation is dropped (a garbage record must not
// wedge the ring) and the error thrown.
//   0 pos f64 | 8 frame id f64 | 16 producer u32 | 20 producer generation u32 | 24 tag u64
Napi::Value ConsumerState::Receive(Napi::Env env, uint64_t pos, const gpr_frame_ref &ref) {
  constexpr size_t kRecordBytes = 32;
  Napi::ArrayBuffer out;
  gpr_error err{};
  if (!bodies->Read(env, ref, kRecordBytes, &out, &err) ||
      gpr_body_validate(static_cast<uint8_t *>(out.Data()) + kRecordBytes, ref.body_length, nullptr, &err) != 0) {
    gpr_ring_release_as(&seg, me, pos, GPR_SLOT_CLAIMED);
    throw MakeError(env, err);
  }
  gpr_ring_confirm(&seg, me, pos);
  auto *record = static_cast<uint8_t *>(out.Data());
  double numbers[2] = {static_cast<double>(pos), static_cast<double>(ref.frame_id)};
  uint32_t producer[2] = {ref.producer, ref.producer_gen};
  memcpy(record, numbers, sizeof numbers);
  memcpy(record + 16, producer, sizeof producer);
  memcpy(record + 24, &ref.user_tag, sizeof ref.user_tag);
  return out;
}

void ConsumerState::Deliver(Napi::Env env, uint64_t request, uint64_t pos, const gpr_frame_ref &ref) {
  if (!attached) return;  // closed meanwhile: detaching already handed the frame back
  auto it = deferred.find(request);
  if (it == deferred.end()) {  // aborted or timed out meanwhile: hand the frame back
    gpr_ring_unclaim(&seg, me, pos);
    return;
  }
  Napi::Promise::Deferred d = it->second;
  deferred.erase(it);
  thread.Drop(env);
  try {
    d.Resolve(Receive(env, pos, ref));
  } catch (const Napi::Error &e) {
    d.Reject(e.Value());
  }
}

void ConsumerState::Fail(uint64_t request, gpr_code code, std::string why) {
  auto self = shared_from_this();
  thread.Post([self, request, code, why](Napi::Env env) {
    auto it = self->deferred.find(request);
    if (it == self->deferred.end()) return;
    it->second.Reject(MakeError(env, code, why).Value());
    self->deferred.erase(it);
    self->thread.Drop(env);
  });
}

// Waits for a frame for the oldest request; true if one was claimed and posted.
bool ConsumerState::WaitForFront(const Request &front) {
  uint64_t now = gpr_monotonic_ns();
  uint64_t slice = front.deadline_ns - now < kSliceNs ? front.deadline_ns - now : kSliceNs;
  ClaimAttempt a{this, cancel_epoch.load(), {}, 0};
  int rc = gpr_wait_for(&seg.control->data_seq, &seg.control->data_waiters, TryClaim, &a,
                        -static_cast<int>(GPR_E_RING_EMPTY), slice, kSpins);
  if (rc != 0) return false;
  {
    std::lock_guard<std::mutex> lock(thread.mu);
    if (!pending.empty() && pending.front().id == front.id) pending.pop_front();
  }
  auto self = shared_from_this();
  uint64_t pos = a.pos;
  gpr_frame_ref ref = a.ref;
  uint64_t request = front.id;
  thread.Post([self, request, pos, ref](Napi::Env env) { self->Deliver(env, request, pos, ref); });
  return true;
}

void ConsumerState::Loop() {
  while (!thread.Stopping()) {
    Request front{0, 0};
    {
      std::unique_lock<std::mutex> lock(thread.mu);
      if (pending.empty())
        thread.cv_.wait_for(lock, std::chrono::milliseconds(250),
                            [&] { return thread.Stopping() || !pending.empty(); });
      if (!pending.empty()) front = pending.front();
      if (front.id && front.deadline_ns <= gpr_monotonic_ns()) {
        pending.pop_front();
        Fail(front.id, GPR_E_TIMEOUT, "no frame arrived before the timeout");
        continue;
      }
    }
    if (front.id) WaitForFront(front);
    if (sweeps.Due()) gpr_sweep(&seg, nullptr, nullptr);
    stream_releases.Collect();
  }
}

void ConsumerState::Shutdown() {
  thread.Stop([this] { gpr_kick(&seg.control->data_seq); });
  bodies.reset();
  stream_releases.WaitAll();
  Detach();  // hands back claims, releases leases
}

// ---------------------------------------------------------------------------

Napi::Function ConsumerCore::Define(Napi::Env env) {
  return DefineClass(env, "ConsumerCore",
                     {InstanceMethod<&ConsumerCore::TryNext>("tryNext"),
                      InstanceMethod<&ConsumerCore::Wait>("wait"),
                      InstanceMethod<&ConsumerCore::Cancel>("cancel"),
                      InstanceMethod<&ConsumerCore::Release>("release"),
                      InstanceMethod<&ConsumerCore::ReleaseAfter>("releaseAfter"),
                      InstanceMethod<&ConsumerCore::OpenArena>("openArena"),
                      InstanceMethod<&ConsumerCore::Close>("close")});
}

// new ConsumerCore(segmentName, openTimeoutMs)
ConsumerCore::ConsumerCore(const Napi::CallbackInfo &info) : Napi::ObjectWrap<ConsumerCore>(info) {
  Napi::Env env = info.Env();
  std::string name = info[0].As<Napi::String>();
  s_ = std::make_shared<ConsumerState>();
  ConsumerState &s = *s_;
  s.Attach(env, name, info[1].As<Napi::Number>().Uint32Value(), GPR_ROLE_CONSUMER);
  s.bodies = std::make_unique<BodyReader>(&s.seg);
  StartCore(env, s_, "gpuring-consumer");
  Value().Set("index", Napi::Number::New(env, s.me));
  Value().Set("generation", Napi::Number::New(env, s.gen));
}

ConsumerCore::~ConsumerCore() {
  if (!closed_) s_->Shutdown();
}

void ConsumerCore::RequireOpen(Napi::Env env) const {
  if (closed_) Throw(env, GPR_E_CLOSED, "the consumer is closed");
}

// tryNext(spinMicros = 0): a frame now, or null. With spinMicros it busy-polls
// the ring on the calling (JS) thread for up to that long first: the caller
// trades a blocked event loop for a wake-up in well under a microsecond.
// Never overtakes a request already waiting.
Napi::Value ConsumerCore::TryNext(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  if (!s_->deferred.empty()) return env.Null();
  double spin_us = info.Length() > 0 && info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : 0;
  uint64_t until = gpr_monotonic_ns() + static_cast<uint64_t>(spin_us > 0 ? spin_us * 1e3 : 0);
  gpr_frame_ref ref{};
  uint64_t pos = 0;
  while (gpr_ring_try_claim(&s_->seg, s_->me, &ref, &pos) != 0) {
    if (gpr_monotonic_ns() >= until) return env.Null();
    for (int i = 0; i < 32; i++) gpr_cpu_relax();
  }
  return s_->Receive(env, pos, ref);
}

// wait(timeoutMs: number, -1 = forever) -> [requestId, Promise]
Napi::Value ConsumerCore::Wait(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  double timeout_ms = info[0].As<Napi::Number>().DoubleValue();
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : gpr_monotonic_ns() + static_cast<uint64_t>(timeout_ms * 1e6);
  uint64_t id = s_->next_request++;
  auto deferred = Napi::Promise::Deferred::New(env);
  s_->deferred.emplace(id, deferred);
  s_->thread.Retain(env);
  {
    std::lock_guard<std::mutex> lock(s_->thread.mu);
    s_->pending.push_back(ConsumerState::Request{id, deadline});
  }
  s_->thread.cv_.notify_all();
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, Napi::Number::New(env, static_cast<double>(id)));
  out.Set(1u, deferred.Promise());
  return out;
}

// cancel(requestId, reason): rejects the request with ABORTED.
Napi::Value ConsumerCore::Cancel(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  uint64_t id = static_cast<uint64_t>(info[0].As<Napi::Number>().DoubleValue());
  auto it = s_->deferred.find(id);
  if (it == s_->deferred.end()) return env.Undefined();
  it->second.Reject(MakeError(env, GPR_E_ABORTED, "the wait for a frame was aborted").Value());
  s_->deferred.erase(it);
  s_->thread.Drop(env);
  {
    std::lock_guard<std::mutex> lock(s_->thread.mu);
    for (auto p = s_->pending.begin(); p != s_->pending.end(); ++p)
      if (p->id == id) {
        s_->pending.erase(p);
        break;
      }
  }
  s_->cancel_epoch++;
  return env.Undefined();
}

Napi::Value ConsumerCore::Release(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closed_) return env.Undefined();  // detach already released everything
  uint64_t pos = static_cast<uint64_t>(info[0].As<Napi::Number>().DoubleValue());
  if (gpr_ring_release(&s_->seg, s_->me, pos) != 0)
    Throw(env, GPR_E_FRAME_STATE, "the frame is not leased by this consumer (already released?)");
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
  uint64_t w = gpr_slot_load(gpr_slot_at(&s_->seg, pos));
  if (gpr_word_seq(w) != (pos & GPR_SEQ_MASK) || gpr_word_state(w) != GPR_SLOT_LEASED || gpr_word_owner(w) != s_->me + 1u)
    Throw(env, GPR_E_FRAME_STATE, "the frame is not leased by this consumer (already released?)");
  auto bytes = info[3].As<Napi::Uint8Array>();
  std::vector<cuda::CUipcMemHandle> mappings(bytes.ByteLength() / sizeof(cuda::CUipcMemHandle));
  memcpy(mappings.data(), bytes.Data(), mappings.size() * sizeof(cuda::CUipcMemHandle));
  s_->stream_releases.Collect();
  s_->stream_releases.Queue(env, &s_->seg, s_->me, pos, info[1].As<Napi::Number>().Int32Value(), cuda::StreamOf(info[2]),
                            std::move(mappings));
  return env.Undefined();
}

Napi::Value ConsumerCore::OpenArena(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireOpen(env);
  return OpenArenaBuffer(env, s_->seg, info[0].As<Napi::String>());
}

Napi::Value ConsumerCore::Close(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (closed_) return env.Undefined();
  closed_ = true;
  s_->Shutdown();
  for (auto &kv : s_->deferred)
    kv.second.Reject(MakeError(env, GPR_E_CLOSED, "the consumer was closed").Value());
  s_->deferred.clear();
  return env.Undefined();
}

}  // namespace gpuring
