/* gpuring/ring.h: the bounded MPMC ring of frame references.
 *
 * Each slot word is seq:48 | state:3 | owner:13. A producer or consumer takes a
 * slot with one CAS that also writes its participant index into the word, so a
 * claim always names its owner and a survivor can repair the slot if that owner
 * dies (gpuring/recovery.h). `tail` and `head` are hints, moved by plain stores:
 * correctness rests on the slot CAS alone, a stale hint only costs a few probes.
 * Positions are 48-bit and compared modulo 2^48.
 * Included by gpuring.h; not a standalone header. */

#define GPR_SEQ_MASK 0xFFFFFFFFFFFFull
#define GPR_REDELIVER_NONE 0xFFFFFFFFFFFFull

GPR_INLINE uint64_t gpr_word_seq(uint64_t w) { return w >> 16; }
GPR_INLINE uint32_t gpr_word_state(uint64_t w) { return (uint32_t)(w >> 13) & 7u; }
GPR_INLINE uint32_t gpr_word_owner(uint64_t w) { return (uint32_t)w & 0x1FFFu; }

/* Broadcast rings (gpuring/broadcast.h) take these paths instead. */
GPR_INLINE int gpr_bc_finish_publish(gpr_segment *seg, uint32_t me, uint64_t pos);
GPR_INLINE void gpr_bc_relieve(gpr_segment *seg, uint64_t q);
GPR_INLINE int gpr_bc_try_claim(gpr_segment *seg, uint32_t me, gpr_frame_ref *out, uint64_t *out_pos);
GPR_INLINE int gpr_bc_unclaim(gpr_segment *seg, uint32_t me, uint64_t pos);
GPR_INLINE int gpr_bc_release_as(gpr_segment *seg, uint32_t owner, uint64_t pos);

/* a - b as a signed 48-bit difference. */
GPR_INLINE int64_t gpr_seq_diff(uint64_t a, uint64_t b) {
  return (int64_t)((a - b) << 16) >> 16;
}

GPR_INLINE gpr_slot *gpr_slot_at(const gpr_segment *seg, uint64_t pos) {
  return &seg->slots[pos & seg->mask];
}

GPR_INLINE uint64_t gpr_slot_load(const gpr_slot *s) {
  return __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
}

GPR_INLINE int gpr_slot_cas(gpr_slot *s, uint64_t expected, uint64_t desired) {
  return __atomic_compare_exchange_n(&s->word, &expected, desired, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

/* Moves a hint forward to `pos` unless another participant moved it further. */
GPR_INLINE void gpr_hint_advance(uint64_t *hint, uint64_t pos) {
  uint64_t cur = __atomic_load_n(hint, __ATOMIC_RELAXED);
  if (gpr_seq_diff(pos, cur) > 0) __atomic_store_n(hint, pos & GPR_SEQ_MASK, __ATOMIC_RELAXED);
}

/* The hint if it is ahead of `pos` by less than a lap, else pos + 1: a hint
 * is shared memory, and one moved far ahead (damage, a hostile writer) must not
 * send a scan to positions no slot serves. */
GPR_INLINE uint64_t gpr_hint_reload(const gpr_segment *seg, uint64_t *hint, uint64_t pos) {
  uint64_t h = __atomic_load_n(hint, __ATOMIC_RELAXED) & GPR_SEQ_MASK;
  int64_t ahead = gpr_seq_diff(h, pos + 1);
  return ahead > 0 && ahead < (int64_t)seg->slot_count ? h : (pos + 1) & GPR_SEQ_MASK;
}

/* Every scan over slots takes at most this many steps per call (two laps):
 * values read from shared memory must never make a non-blocking call spin. */
GPR_INLINE uint64_t gpr_scan_limit(const gpr_segment *seg) { return 2ull * seg->slot_count + 2u; }

/* Counts in the caller's own participant entry. Only the owner writes these
 * words, so a relaxed load and store do (no RMW on the hot path). */
GPR_INLINE void gpr_count_by(uint64_t *counter, uint64_t n) {
  __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

GPR_INLINE void gpr_count(uint64_t *counter) { gpr_count_by(counter, 1u); }

/* gpr_ring_try_publish_rung() that leaves the frame out of `published`: a
 * producer publishing a batch adds the batch once after it (gpr_count_by).
 * That counter shares a cache line with the entry's `state`, which every
 * consumer reads at every release (gpr_ref_producer_active): written per
 * frame, it cost each release a cache miss (prepared frames through
 * publishMany(), H100 host: 0.82 M frames/s where 0.93 M uncounted). */
GPR_INLINE int gpr_ring_try_publish_uncounted(gpr_segment *seg, uint32_t me, const gpr_frame_ref *ref,
                                              uint64_t *out_pos, uint32_t rung) {
  if (!gpr_participant_held(seg, me, ref->producer_gen)) return -(int)GPR_E_DETACHED;
  gpr_control *c = seg->control;
  uint64_t pos = __atomic_load_n(&c->tail, __ATOMIC_RELAXED) & GPR_SEQ_MASK;
  for (uint64_t steps = gpr_scan_limit(seg); steps > 0; steps--) {
    gpr_slot *s = gpr_slot_at(seg, pos);
    uint64_t w = gpr_slot_load(s);
    int64_t d = gpr_seq_diff(gpr_word_seq(w), pos);
    if (d == 0 && gpr_word_state(w) == GPR_SLOT_EMPTY) {
      if (!gpr_slot_cas(s, w, gpr_slot_word(pos, GPR_SLOT_WRITING, me + 1u))) continue;
      gpr_hint_advance(&c->tail, pos + 1);
      s->ref = *ref;
      /* A CAS, not a store: if a sweeper took the claim back (it judged us
       * dead), a plain store would put a stale word into a recycled slot. */
      uint64_t writing = gpr_slot_word(pos, GPR_SLOT_WRITING, me + 1u);
      if (seg->broadcast) {
        int rc = gpr_bc_finish_publish(seg, me, pos);
        if (rc != 0) return rc;
      } else if (!__atomic_compare_exchange_n(&s->word, &writing, gpr_slot_word(pos, GPR_SLOT_READY, me + 1u), 0,
                                              __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
        return -(int)GPR_E_FRAME_STATE;
      } else {
        gpr_notify_published_rung(seg, rung);
      }
      if (out_pos) *out_pos = pos;
      return 0;
    }
    if (d == 0) pos = (pos + 1) & GPR_SEQ_MASK;      /* taken by another producer */
    else if (d < -(int64_t)seg->slot_count) pos = gpr_word_seq(w);  /* a hint no slot can match: trust the slot */
    else if (d < 0) {                                /* previous lap still occupied */
      if (seg->broadcast) gpr_bc_relieve(seg, gpr_word_seq(w));
      return -(int)GPR_E_RING_FULL;
    } else pos = gpr_hint_reload(seg, &c->tail, pos);  /* our hint was stale */
  }
  return -(int)GPR_E_RING_FULL;  /* no free slot within two laps: full for now */
}

/* gpr_ring_try_publish() after a heads-up (gpr_doorbell_heads_up) that reached
 * entry `rung`: the publish's DATA notification rings that entry again only if
 * it went back to sleep (gpr_notify_published_rung). */
GPR_INLINE int gpr_ring_try_publish_rung(gpr_segment *seg, uint32_t me, const gpr_frame_ref *ref,
                                         uint64_t *out_pos, uint32_t rung) {
  int rc = gpr_ring_try_publish_uncounted(seg, me, ref, out_pos, rung);
  if (rc == 0) gpr_count(&seg->participants[me].published);
  return rc;
}

/* Publishes `ref` as participant `me`. One CAS on the slot; no system call
 * unless a consumer sleeps. GPR_E_RING_FULL when the slot a lap back is still
 * occupied (queued, leased or not yet reclaimed by its producer). */
GPR_INLINE int gpr_ring_try_publish(gpr_segment *seg, uint32_t me, const gpr_frame_ref *ref,
                                    uint64_t *out_pos) {
  return gpr_ring_try_publish_rung(seg, me, ref, out_pos, GPR_RUNG_NOBODY);
}

GPR_INLINE int gpr_ring_take(gpr_segment *seg, uint32_t me, uint64_t pos, uint64_t w,
                             gpr_frame_ref *out) {
  gpr_slot *s = gpr_slot_at(seg, pos);
  if (!gpr_slot_cas(s, w, gpr_slot_word(pos, GPR_SLOT_CLAIMED, me + 1u))) return 0;
  /* Copy the reference out while we own the slot; it is validated later. */
  *out = s->ref;
  return 1;
}

/* Scans positions redelivered after a consumer died or gave a frame back.
 * The redeliver word is (lowest position << 16 | generation): every hand-back
 * bumps the generation, so clearing it fails if a hand-back raced the scan. */
GPR_INLINE int gpr_ring_take_redelivered(gpr_segment *seg, uint32_t me, uint64_t upto,
                                         gpr_frame_ref *out, uint64_t *out_pos) {
  gpr_control *c = seg->control;
  uint64_t r = __atomic_load_n(&c->redeliver, __ATOMIC_ACQUIRE);
  uint64_t from = r >> 16;
  if (from == GPR_REDELIVER_NONE || r == 0) return 0;
  /* Slots hold one lap: a position more than a lap behind `upto` cannot be READY. */
  if (gpr_seq_diff(upto, from) > (int64_t)seg->slot_count) from = (upto - seg->slot_count) & GPR_SEQ_MASK;
  for (uint64_t pos = from; gpr_seq_diff(upto, pos) >= 0; pos = (pos + 1) & GPR_SEQ_MASK) {
    uint64_t w = gpr_slot_load(gpr_slot_at(seg, pos));
    if (gpr_word_seq(w) == pos && gpr_word_state(w) == GPR_SLOT_READY &&
        gpr_ring_take(seg, me, pos, w, out)) {
      *out_pos = pos;
      return 1;
    }
  }
  uint64_t none = (GPR_REDELIVER_NONE << 16) | ((r + 1) & 0xFFFFu);
  __atomic_compare_exchange_n(&c->redeliver, &r, none, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return 0;
}

/* Takes the oldest READY frame for consumer `me` (state CLAIMED). The caller
 * confirms (LEASED) once its user has the frame, or unclaims to hand it back. */
GPR_INLINE int gpr_ring_try_claim(gpr_segment *seg, uint32_t me, gpr_frame_ref *out,
                                  uint64_t *out_pos) {
  if (seg->broadcast) return gpr_bc_try_claim(seg, me, out, out_pos);
  gpr_control *c = seg->control;
  uint64_t pos = __atomic_load_n(&c->head, __ATOMIC_RELAXED) & GPR_SEQ_MASK;
  for (uint64_t steps = gpr_scan_limit(seg); steps > 0; steps--) {
    uint64_t w = gpr_slot_load(gpr_slot_at(seg, pos));
    int64_t d = gpr_seq_diff(gpr_word_seq(w), pos);
    uint32_t st = gpr_word_state(w);
    if (d == 0 && st == GPR_SLOT_READY) {
      if (!gpr_ring_take(seg, me, pos, w, out)) continue;
      gpr_hint_advance(&c->head, pos + 1);
      *out_pos = pos;
      return 0;
    }
    if (d < -(int64_t)seg->slot_count) {  /* a hint no slot can match: trust the slot */
      pos = gpr_word_seq(w);
      continue;
    }
    if (d < 0 || (d == 0 && (st == GPR_SLOT_EMPTY || st == GPR_SLOT_WRITING))) break;
    if (d == 0) pos = (pos + 1) & GPR_SEQ_MASK;  /* claimed by another consumer */
    else pos = gpr_hint_reload(seg, &c->head, pos);
  }
  if (gpr_ring_take_redelivered(seg, me, pos, out, out_pos)) return 0;
  return -(int)GPR_E_RING_EMPTY;
}

/* Moves a slot the caller owns from one state to another. */
GPR_INLINE int gpr_ring_transition(gpr_segment *seg, uint64_t pos, uint32_t from,
                                   uint32_t from_owner, uint64_t to_word) {
  gpr_slot *s = gpr_slot_at(seg, pos);
  uint64_t w = gpr_slot_word(pos, from, from_owner);
  return gpr_slot_cas(s, w, to_word) ? 0 : -(int)GPR_E_FRAME_STATE;
}

GPR_INLINE int gpr_ring_confirm(gpr_segment *seg, uint32_t me, uint64_t pos) {
  /* A broadcast claim (the cursor CAS) is final: nothing left to confirm. */
  int rc = seg->broadcast ? 0 : gpr_ring_transition(seg, pos, GPR_SLOT_CLAIMED, me + 1u,
                               gpr_slot_word(pos, GPR_SLOT_LEASED, me + 1u));
  if (rc == 0) gpr_count(&seg->participants[me].leased);
  return rc;
}

/* Publishes that a READY frame sits at `pos`, behind the consumers' head. */
GPR_INLINE void gpr_ring_mark_redeliver(gpr_segment *seg, uint64_t pos) {
  gpr_control *c = seg->control;
  uint64_t r = __atomic_load_n(&c->redeliver, __ATOMIC_ACQUIRE);
  for (;;) {
    uint64_t from = r >> 16;
    uint64_t lowest = (from == GPR_REDELIVER_NONE || r == 0 || gpr_seq_diff(pos, from) < 0)
                          ? pos : from;
    uint64_t next = (lowest << 16) | ((r + 1) & 0xFFFFu);
    if (__atomic_compare_exchange_n(&c->redeliver, &r, next, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      break;
  }
  __atomic_fetch_add(&c->redelivered, 1u, __ATOMIC_RELAXED);
  gpr_notify_data(seg);
}

/* Hands a CLAIMED frame back so that another consumer (or this one) takes it. */
GPR_INLINE int gpr_ring_unclaim_as(gpr_segment *seg, uint32_t owner, uint64_t pos,
                                   uint32_t state) {
  if (seg->broadcast) return gpr_bc_unclaim(seg, owner, pos);
  uint32_t producer = gpr_slot_at(seg, pos)->ref.producer;
  int rc = gpr_ring_transition(seg, pos, state, owner + 1u,
                               gpr_slot_word(pos, GPR_SLOT_READY, producer + 1u));
  if (rc == 0) gpr_ring_mark_redeliver(seg, pos);
  return rc;
}

GPR_INLINE int gpr_ring_unclaim(gpr_segment *seg, uint32_t me, uint64_t pos) {
  return gpr_ring_unclaim_as(seg, me, pos, GPR_SLOT_CLAIMED);
}

GPR_INLINE int gpr_ring_recycle_word(gpr_segment *seg, gpr_slot *s, uint64_t w, uint64_t pos) {
  if (!gpr_slot_cas(s, w, gpr_slot_word(pos + seg->slot_count, GPR_SLOT_EMPTY, 0))) return 0;
  gpr_notify_space(seg);
  return 1;
}

/* Is the producer named by a reference still the live owner of its entry? */
GPR_INLINE int gpr_ref_producer_active(const gpr_segment *seg, const gpr_frame_ref *ref) {
  if (ref->producer >= seg->participant_capacity) return 0;
  uint64_t w = gpr_participant_word(seg, ref->producer);
  return gpr_pstate(w) == GPR_PARTICIPANT_ACTIVE && gpr_pgen(w) == ref->producer_gen;
}

/* Ends a work-queue lease of `owner` in `state` (gpr_ring_release_as without
 * its notification). */
GPR_INLINE int gpr_wq_release_as(gpr_segment *seg, uint32_t owner, uint64_t pos, uint32_t state) {
  gpr_slot *s = gpr_slot_at(seg, pos);
  gpr_frame_ref ref = s->ref;
  uint64_t w = gpr_slot_word(pos, state, owner + 1u);
  if (!gpr_ref_producer_active(seg, &ref)) {
    if (!gpr_slot_cas(s, w, gpr_slot_word(pos + seg->slot_count, GPR_SLOT_EMPTY, 0)))
      return -(int)GPR_E_FRAME_STATE;
  } else if (!gpr_slot_cas(s, w, gpr_slot_word(pos, GPR_SLOT_RELEASED, ref.producer + 1u))) {
    return -(int)GPR_E_FRAME_STATE;
  }
  return 0;
}

/* Ends a lease (LEASED or CLAIMED by `owner`). The slot goes to RELEASED for its
 * producer to reclaim the memory, or straight back to EMPTY when that producer
 * is gone. Producers sleeping for space or releases are woken. */
GPR_INLINE int gpr_ring_release_as(gpr_segment *seg, uint32_t owner, uint64_t pos,
                                   uint32_t state) {
  if (seg->broadcast) return gpr_bc_release_as(seg, owner, pos);
  int rc = gpr_wq_release_as(seg, owner, pos, state);
  if (rc == 0) gpr_notify_space(seg);
  return rc;
}

GPR_INLINE int gpr_ring_release(gpr_segment *seg, uint32_t me, uint64_t pos) {
  int rc = gpr_ring_release_as(seg, me, pos, GPR_SLOT_LEASED);
  if (rc == 0) gpr_count(&seg->participants[me].released);
  return rc;
}

/* gpr_ring_release of a work-queue frame (not broadcast), without the space
 * notification: a consumer that releases several frames in one run of its
 * code owes one gpr_notify_space() after the last, before it next takes a
 * frame, sleeps or leaves (SPEC.md §6, "Coalescing"). */
GPR_INLINE int gpr_ring_release_unnotified(gpr_segment *seg, uint32_t me, uint64_t pos) {
  if (seg->broadcast) return -(int)GPR_E_INVALID_ARGUMENT;
  int rc = gpr_wq_release_as(seg, me, pos, GPR_SLOT_LEASED);
  if (rc == 0) gpr_count(&seg->participants[me].released);
  return rc;
}

/* Producer side: if the frame it published at `pos` was released, recycles the
 * slot and returns 1 (the caller may now reuse the frame's memory); 0 if still
 * in flight. */
GPR_INLINE int gpr_ring_reap(gpr_segment *seg, uint32_t me, uint64_t pos) {
  gpr_slot *s = gpr_slot_at(seg, pos);
  uint64_t w = gpr_slot_load(s);
  if (gpr_word_seq(w) != (pos & GPR_SEQ_MASK)) return 1; /* recycled by a sweeper */
  if (gpr_word_state(w) != GPR_SLOT_RELEASED || gpr_word_owner(w) != me + 1u) return 0;
  gpr_ring_recycle_word(seg, s, w, pos);
  return 1;
}

/* Runs attempt(ctx) until it returns something other than `again`, spinning
 * first and then sleeping on the futex word `seq`. The order matters: raise the
 * waiter count (seq_cst), read seq, try once more, and only then sleep. Paired
 * with gpr_notify's fence, a wake-up can never fall between the last try and the
 * sleep. Returns attempt's result or -GPR_E_TIMEOUT. */
GPR_INLINE int gpr_wait_for(uint32_t *seq, uint32_t *waiters, int (*attempt)(void *), void *ctx,
                            int again, uint64_t timeout_ns, uint32_t spins) {
  int rc = attempt(ctx);
  for (uint32_t i = 0; rc == again && i < spins; i++) {
    gpr_cpu_relax();
    rc = attempt(ctx);
  }
  if (rc != again) return rc;
  uint64_t start = gpr_monotonic_ns();
  for (;;) {
    __atomic_fetch_add(waiters, 1u, __ATOMIC_SEQ_CST);
    uint32_t seen = __atomic_load_n(seq, __ATOMIC_SEQ_CST);
    rc = attempt(ctx);
    uint64_t waited = gpr_monotonic_ns() - start;
    if (rc == again && waited < timeout_ns)
      gpr_futex_wait(seq, seen, timeout_ns == UINT64_MAX ? UINT64_MAX : timeout_ns - waited);
    __atomic_fetch_sub(waiters, 1u, __ATOMIC_SEQ_CST);
    if (rc != again) return rc;
    if (waited >= timeout_ns) return -(int)GPR_E_TIMEOUT;
  }
}

/* Says who holds the ring up, for the errors of a producer that found it full:
 * the slot producers must reuse next (a lap behind the tail) and its occupant.
 * One frame never released fills a ring whatever its size: positions are
 * reused in order, so the slot a lap back must come free before any other. */
GPR_INLINE void gpr_ring_describe_full(const gpr_segment *seg, char *out, size_t n) {
  static const char *const states[] = {"EMPTY", "WRITING", "READY", "CLAIMED", "LEASED", "RELEASED", "?", "?"};
  uint64_t tail = __atomic_load_n(&seg->control->tail, __ATOMIC_RELAXED) & GPR_SEQ_MASK;
  uint64_t w = gpr_slot_load(gpr_slot_at(seg, tail));
  uint32_t st = gpr_word_state(w), owner = gpr_word_owner(w);
  uint32_t pid = owner >= 1u && owner <= seg->participant_capacity
                     ? __atomic_load_n(&seg->participants[owner - 1u].pid, __ATOMIC_RELAXED) : 0u;
  const char *why = st == GPR_SLOT_READY      ? "not taken yet"
                    : st == GPR_SLOT_LEASED   ? "not released"
                    : st == GPR_SLOT_CLAIMED  ? "being taken"
                    : st == GPR_SLOT_RELEASED ? "not reclaimed"
                                              : "in use";
  snprintf(out, n, "ring '%s' full: next slot %llu (pos %llu) %s by participant %u (pid %u), %s; slots free in order",
           seg->name, (unsigned long long)(tail & seg->mask), (unsigned long long)gpr_word_seq(w), states[st],
           owner ? owner - 1u : 0u, pid, why);
}

/* Wakes every sleeper on a futex word unconditionally (close, abort). */
GPR_INLINE void gpr_kick(uint32_t *seq) {
  __atomic_fetch_add(seq, 1u, __ATOMIC_RELEASE);
  gpr_futex_wake_all(seq);
}

GPR_INLINE uint32_t gpr_data_seq(const gpr_segment *seg) {
  return __atomic_load_n(&seg->control->data_seq, __ATOMIC_ACQUIRE);
}

GPR_INLINE uint32_t gpr_space_seq(const gpr_segment *seg) {
  return __atomic_load_n(&seg->control->space_seq, __ATOMIC_ACQUIRE);
}
