#include "segment_handle.h"
#include "errors.h"

namespace gpuring {

namespace {
const char *const kSlotStates[] = {"empty", "writing", "ready", "claimed", "leased", "released"};

Napi::Value Num(Napi::Env env, uint64_t v) { return Napi::Number::New(env, static_cast<double>(v)); }

Napi::Array Roles(Napi::Env env, uint32_t roles) {
  Napi::Array a = Napi::Array::New(env);
  if (roles & GPR_ROLE_PRODUCER) a.Set(a.Length(), Napi::String::New(env, "producer"));
  if (roles & GPR_ROLE_CONSUMER) a.Set(a.Length(), Napi::String::New(env, "consumer"));
  if (roles & GPR_ROLE_BRIDGE) a.Set(a.Length(), Napi::String::New(env, "bridge"));
  return a;
}

// A broadcast subscriber's standing (SPEC.md §5.4).
Napi::Object Subscriber(Napi::Env env, const gpr_segment &seg, uint32_t i, uint32_t subscription) {
  static const char *const policies[] = {"block", "drop-oldest", "evict"};
  const gpr_participant &p = seg.participants[i];
  uint64_t cursor = __atomic_load_n(&p.cursor, __ATOMIC_ACQUIRE);
  uint32_t held = 0, unread = 0;
  gpr_bc_standing(&seg, i, &held, &unread);
  Napi::Object o = Napi::Object::New(env);
  o.Set("onSlow", Napi::String::New(env, subscription <= 3 ? policies[subscription - 1] : "damaged"));
  o.Set("cursor", Num(env, cursor & GPR_SEQ_MASK));
  o.Set("evicted", Napi::Boolean::New(env, (cursor & GPR_CURSOR_EVICTED) != 0));
  o.Set("held", Num(env, held));
  o.Set("unread", Num(env, unread));
  o.Set("missed", Num(env, __atomic_load_n(&p.missed, __ATOMIC_RELAXED)));
  return o;
}

Napi::Object Participant(Napi::Env env, const gpr_segment &seg, uint32_t i, uint64_t leases) {
  const gpr_participant &p = seg.participants[i];
  uint64_t w = gpr_participant_word(&seg, i);
  static const char *const states[] = {"free", "active", "dead", "attaching", "freeing", "damaged", "damaged", "damaged"};
  Napi::Object o = Napi::Object::New(env);
  o.Set("index", Num(env, i));
  o.Set("generation", Num(env, gpr_pgen(w)));
  o.Set("state", Napi::String::New(env, states[gpr_pstate(w)]));
  o.Set("alive", Napi::Boolean::New(env, gpr_participant_alive(&seg, i)));
  o.Set("pid", Num(env, __atomic_load_n(&p.pid, __ATOMIC_ACQUIRE)));
  o.Set("roles", Roles(env, p.roles));
  uint32_t bell = __atomic_load_n(&p.doorbell, __ATOMIC_ACQUIRE);
  Napi::Array asleep = Napi::Array::New(env);
  if (bell & GPR_BELL_DATA) asleep.Set(asleep.Length(), Napi::String::New(env, "data"));
  if (bell & GPR_BELL_SPACE) asleep.Set(asleep.Length(), Napi::String::New(env, "space"));
  o.Set("asleep", asleep);
  o.Set("attachedUnixMs", Num(env, p.attached_unix_ns / 1000000ull));
  o.Set("arenas", Num(env, p.arena_count));
  o.Set("leases", Num(env, leases));
  o.Set("published", Num(env, __atomic_load_n(&p.published, __ATOMIC_RELAXED)));
  o.Set("leased", Num(env, __atomic_load_n(&p.leased, __ATOMIC_RELAXED)));
  o.Set("released", Num(env, __atomic_load_n(&p.released, __ATOMIC_RELAXED)));
  uint32_t subscription = __atomic_load_n(&p.subscription, __ATOMIC_ACQUIRE);
  if (seg.broadcast && subscription != 0) {
    Napi::Object sub = Subscriber(env, seg, i, subscription);
    o.Set("subscriber", sub);
    o.Set("leases", sub.Get("held"));  // a subscriber's leases are the frames it took and holds
  }
  return o;
}

// An occupied slot: where it is, its frame's position, its state and the participant its word names.
Napi::Object SlotInfo(Napi::Env env, const gpr_segment &seg, uint32_t slot, uint64_t w) {
  uint32_t st = gpr_word_state(w), owner = gpr_word_owner(w);
  Napi::Object o = Napi::Object::New(env);
  o.Set("slot", Num(env, slot));
  o.Set("position", Num(env, gpr_word_seq(w)));
  o.Set("state", Napi::String::New(env, st < 6 ? kSlotStates[st] : "damaged"));
  bool named = owner >= 1 && owner <= seg.participant_capacity;
  o.Set("participant", named ? Num(env, owner - 1) : env.Null());
  return o;
}
}  // namespace

Napi::Function SegmentHandle::Define(Napi::Env env) {
  return DefineClass(env, "SegmentHandle",
                     {StaticMethod<&SegmentHandle::Unlink>("unlink"),
                      InstanceMethod<&SegmentHandle::Inspect>("inspect"),
                      InstanceMethod<&SegmentHandle::Sweep>("sweep"),
                      InstanceMethod<&SegmentHandle::Close>("close")});
}

// new SegmentHandle(name, create: boolean, slotCount, participantCapacity, mode, openTimeoutMs, openFlags?, delivery?)
SegmentHandle::SegmentHandle(const Napi::CallbackInfo &info) : Napi::ObjectWrap<SegmentHandle>(info) {
  Napi::Env env = info.Env();
  std::string name = info[0].As<Napi::String>();
  bool create = info[1].As<Napi::Boolean>();
  gpr_segment_options o{info[2].As<Napi::Number>().Uint32Value(), info[3].As<Napi::Number>().Uint32Value(),
                        info[4].As<Napi::Number>().Uint32Value(), info[5].As<Napi::Number>().Uint32Value(),
                        info.Length() > 6 ? info[6].As<Napi::Number>().Uint32Value() : 0u,
                        info.Length() > 7 ? info[7].As<Napi::Number>().Uint32Value() : 0u};
  Check(env, [&](gpr_error *e) {
    return create ? gpr_segment_create(&seg_, name.c_str(), &o, e) : gpr_segment_open(&seg_, name.c_str(), &o, e);
  });
  open_ = true;
}

SegmentHandle::~SegmentHandle() {
  if (open_) gpr_segment_close(&seg_);
}

const gpr_segment &SegmentHandle::Open(Napi::Env env) const {
  if (!open_) Throw(env, GPR_E_CLOSED, "the segment handle is closed");
  return seg_;
}

Napi::Value SegmentHandle::Unlink(const Napi::CallbackInfo &info) {
  std::string name = info[0].As<Napi::String>();
  Check(info.Env(), [&](gpr_error *e) { return gpr_segment_unlink(name.c_str(), e); });
  return info.Env().Undefined();
}

// A snapshot of header, participants, slot occupancy and leases per consumer.
Napi::Value SegmentHandle::Inspect(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  const gpr_segment &seg = Open(env);
  const gpr_segment_header *h = seg.header;
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", Napi::String::New(env, seg.name));
  uint32_t v = __atomic_load_n(&h->ready_version, __ATOMIC_ACQUIRE);
  o.Set("version", Napi::String::New(env, std::to_string(v >> 16) + "." + std::to_string(v & 0xFFFFu)));
  char hash[20];
  snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(h->layout_hash));
  o.Set("layoutHash", Napi::String::New(env, hash));
  o.Set("totalBytes", Num(env, seg.size));
  o.Set("slotCount", Num(env, seg.slot_count));
  o.Set("participantCapacity", Num(env, seg.participant_capacity));
  o.Set("delivery", Napi::String::New(env, seg.broadcast ? "all" : "each"));
  o.Set("creatorPid", Num(env, h->creator_pid));
  o.Set("createdUnixMs", Num(env, h->created_unix_ns / 1000000ull));
  std::vector<uint64_t> counts(6, 0), leases(seg.participant_capacity, 0);
  Napi::Array held = Napi::Array::New(env);
  uint64_t oldest_word = 0, first_empty = 0;
  uint32_t oldest_slot = UINT32_MAX;
  bool any_empty = false;
  for (uint32_t i = 0; i < seg.slot_count; i++) {
    uint64_t w = gpr_slot_load(&seg.slots[i]);
    uint32_t st = gpr_word_state(w), owner = gpr_word_owner(w);
    if (st < 6) counts[st]++;
    if (st == GPR_SLOT_EMPTY) {
      if (!any_empty || gpr_seq_diff(gpr_word_seq(w), first_empty) < 0) first_empty = gpr_word_seq(w);
      any_empty = true;
      continue;
    }
    if (oldest_slot == UINT32_MAX || gpr_seq_diff(gpr_word_seq(w), gpr_word_seq(oldest_word)) < 0)
      oldest_word = w, oldest_slot = i;
    if ((st == GPR_SLOT_LEASED || st == GPR_SLOT_CLAIMED) && owner >= 1 && owner <= seg.participant_capacity) {
      leases[owner - 1]++;
      held.Set(held.Length(), SlotInfo(env, seg, i, w));
    }
  }
  Napi::Object slots = Napi::Object::New(env);
  for (int i = 0; i < 6; i++) slots.Set(kSlotStates[i], Num(env, counts[i]));
  o.Set("slots", slots);
  o.Set("heldSlots", held);
  if (oldest_slot == UINT32_MAX) {
    o.Set("oldest", env.Null());
  } else {
    // Producers write positions in order: the next one they need is the first
    // empty slot's, and a slot a whole ring behind it must be freed first.
    int64_t behind = any_empty ? gpr_seq_diff(first_empty, gpr_word_seq(oldest_word)) : INT64_MAX;
    Napi::Object oldest = SlotInfo(env, seg, oldest_slot, oldest_word);
    oldest.Set("blocksProducers", Napi::Boolean::New(env, behind >= static_cast<int64_t>(seg.slot_count)));
    o.Set("oldest", oldest);
  }
  Napi::Array parts = Napi::Array::New(env);
  for (uint32_t i = 0; i < seg.participant_capacity; i++)
    if (gpr_pstate(gpr_participant_word(&seg, i)) != GPR_PARTICIPANT_FREE)
      parts.Set(parts.Length(), Participant(env, seg, i, leases[i]));
  o.Set("participants", parts);
  o.Set("recovered", Num(env, __atomic_load_n(&seg.control->recovered, __ATOMIC_RELAXED)));
  o.Set("redelivered", Num(env, __atomic_load_n(&seg.control->redelivered, __ATOMIC_RELAXED)));
  Napi::Object bells = Napi::Object::New(env);
  bells.Set("data", Num(env, __atomic_load_n(&seg.control->data_doorbells, __ATOMIC_RELAXED)));
  bells.Set("space", Num(env, __atomic_load_n(&seg.control->space_doorbells, __ATOMIC_RELAXED)));
  o.Set("doorbells", bells);
  return o;
}

Napi::Value SegmentHandle::Sweep(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  gpr_segment &seg = const_cast<gpr_segment &>(Open(env));
  gpr_sweep_report r{};
  Check(env, [&](gpr_error *e) { return gpr_sweep(&seg, &r, e); });
  Napi::Object o = Napi::Object::New(env);
  o.Set("foundDead", Num(env, r.found_dead));
  o.Set("freed", Num(env, r.freed));
  o.Set("skipped", Num(env, r.skipped));
  o.Set("redelivered", Num(env, r.redelivered));
  o.Set("released", Num(env, r.released));
  o.Set("recycled", Num(env, r.recycled));
  o.Set("corrupt", Num(env, r.corrupt));
  return o;
}

Napi::Value SegmentHandle::Close(const Napi::CallbackInfo &info) {
  if (open_) gpr_segment_close(&seg_);
  open_ = false;
  return info.Env().Undefined();
}

}  // namespace gpuring
