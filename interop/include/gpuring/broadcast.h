/* gpuring/broadcast.h: broadcast rings, where every subscriber sees every frame
 * (SPEC.md §5.4).
 *
 * The slot word keeps its work-queue meaning for producers (EMPTY, WRITING,
 * READY, RELEASED); consumers never move it to CLAIMED or LEASED. Instead:
 *   - control.subscribers has bit i set while entry i is a subscriber;
 *   - a publish copies that word into the slot's `pending` before storing READY,
 *     so the frame goes to exactly the subscribers attached at publish time;
 *   - each subscriber reads positions in order from its entry's `cursor`, and
 *     takes a frame by moving its cursor past it with a CAS (its "claim");
 *   - it releases a frame by clearing its bit in `pending`; whoever clears the
 *     last bit moves the slot to RELEASED for its producer to reap.
 * A producer that finds the ring full acts on the subscribers still holding the
 * oldest frame unread, as each of them asked (gpr_on_slow): wait, drop that
 * frame for it, or evict it. Frames a subscriber has taken are never taken away.
 * Included by gpuring.h after ring.h; not a standalone header. */

/* What a producer that finds the ring full does about a subscriber that has not
 * taken the oldest frame yet. */
enum gpr_on_slow {
  GPR_ON_SLOW_BLOCK = 0u,        /* wait for it (the ring stays full until it reads) */
  GPR_ON_SLOW_DROP_OLDEST = 1u,  /* drop that frame for it; it learns FRAMES_MISSED */
  GPR_ON_SLOW_EVICT = 2u         /* unsubscribe it and drop all it has not taken; it learns EVICTED */
};

/* Cursor bit: the subscriber was evicted; the low 48 bits say where it stood. */
#define GPR_CURSOR_EVICTED (1ull << 63)
/* Cursor bit: a producer moved the cursor past the frame just before it to drop
 * that frame, and has yet to release its share and count it (gpr_bc_drop).
 * Whoever sees it finishes the drop, so a producer killed half-way through one
 * leaves nothing held. */
#define GPR_CURSOR_DROPPING (1ull << 62)

GPR_INLINE uint64_t gpr_bc_settle_drop(gpr_segment *seg, uint32_t k, uint64_t c, uint64_t wait_ns);

/* How long a participant that finds another's drop half done waits for its
 * dropper to finish it (a few instructions away, unless it lost its CPU), and
 * after how long, seen unchanged, it takes the dropper for dead and finishes the
 * drop itself (SPEC.md §5.4, Dropping). */
#define GPR_DROP_WAIT_NS 20000ull
#define GPR_DROP_STALE_NS 20000000ull

GPR_INLINE uint64_t gpr_bc_bit(uint32_t index) { return 1ull << index; }

/* Does the frame slot `s` held when its word was `w` (READY) carry `bit` in
 * its pending word? The slot word is loaded again after `pending`: the frame
 * may have gone meanwhile (its last share released, its producer reaping it)
 * and a publish of a lap later stored its own `pending`, which carries the bit
 * of every subscriber. A subscriber that took the old position on that bit
 * held no share of the frame whose reference it then read, and its producer
 * reused that frame's memory under it (the 16-core torture found Python
 * subscribers whose first frame, the oldest in the ring, changed as they read
 * it). The word cannot come back once it moved on, so an unchanged word means
 * `pending` was the frame's own. */
GPR_INLINE int gpr_bc_carries(const gpr_slot *s, uint64_t w, uint64_t bit) {
  return (__atomic_load_n(&s->pending, __ATOMIC_ACQUIRE) & bit) && gpr_slot_load(s) == w;
}

/* How long, in all, a subscriber that joins at the oldest retained frames waits
 * for the publishes in flight as it joins (slots WRITING) to end, so as to adopt
 * them too (gpr_bc_adopt_retained). A publish is WRITING for a few instructions
 * unless its producer lost its CPU or died there. */
#define GPR_ADOPT_WAIT_NS 10000000ull

/* Waits, within the budget `*left_ns`, for slot `s` to leave word `w` (a
 * publish in flight); returns its word then, or `w` once the budget is spent. */
GPR_INLINE uint64_t gpr_bc_await_publish(const gpr_slot *s, uint64_t w, uint64_t *left_ns) {
  uint64_t now = gpr_monotonic_ns(), until = now + *left_ns, v = w;
  for (int spins = 0; v == w && now < until; spins++, now = gpr_monotonic_ns()) {
    if (spins < 64)
      gpr_cpu_relax();
    else
      sched_yield();  /* its producer may be waiting for this CPU */
    v = gpr_slot_load(s);
  }
  *left_ns = now < until ? until - now : 0;
  return v;
}

/* Takes a share for `me` of the frame slot `s` serves, if READY and some
 * subscriber has yet to release it; `me` joined control.subscribers already.
 * A frame carrying `me`'s bit is its own (published after the join). One
 * without it was published before the join: the bit goes in by CAS while
 * `pending` is not 0 (a frame every share of which was released is not
 * adopted). If the slot moved on under the CAS (recycled, and the CAS met an
 * equal `pending` of a later frame), the later frame is judged again: it too
 * lacked the bit, so it too was published before the join. A frame the
 * cursor has passed meanwhile (a producer dropped frames for `me`) is given
 * back at once. */
GPR_INLINE void gpr_bc_adopt_slot(gpr_segment *seg, uint32_t me, gpr_slot *s, uint64_t *left_ns) {
  /* Seq_cst, after the join's seq_cst OR: a publish that loaded `subscribers`
   * (seq_cst) before the OR had claimed its slot before that, so this load
   * finds the slot WRITING or later, never still EMPTY. */
  uint64_t bit = gpr_bc_bit(me), w = __atomic_load_n(&s->word, __ATOMIC_SEQ_CST);
  for (;;) {
    if (gpr_word_state(w) == GPR_SLOT_WRITING && *left_ns > 0) {
      w = gpr_bc_await_publish(s, w, left_ns);
      continue;
    }
    if (gpr_word_state(w) != GPR_SLOT_READY) return;
    uint64_t m = __atomic_load_n(&s->pending, __ATOMIC_ACQUIRE);
    while (m != 0 && !(m & bit) && !__atomic_compare_exchange_n(&s->pending, &m, m | bit, 0, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) {
    }
    if (m == 0 || (m & bit)) return;  /* released meanwhile, or its own */
    uint64_t now = gpr_slot_load(s);
    if (now != w) {
      w = now;
      continue;
    }
    uint64_t c = __atomic_load_n(&seg->participants[me].cursor, __ATOMIC_SEQ_CST) & GPR_SEQ_MASK;
    if (gpr_seq_diff(c, gpr_word_seq(w)) > 0) gpr_bc_release_as(seg, me, gpr_word_seq(w));
    return;
  }
}

/* The "oldest retained" start: a share of every frame still in the ring for
 * `me`, which has just joined control.subscribers. Adopting after the join
 * leaves no frame out: a publish in flight then (WRITING; its `subscribers`
 * loaded before the join) is waited for, within GPR_ADOPT_WAIT_NS in all, and
 * adopted once READY; every later publish carries the bit. */
GPR_INLINE void gpr_bc_adopt_retained(gpr_segment *seg, uint32_t me) {
  uint64_t left_ns = GPR_ADOPT_WAIT_NS;
  for (uint32_t i = 0; i < seg->slot_count; i++) gpr_bc_adopt_slot(seg, me, &seg->slots[i], &left_ns);
}

/* Joins the subscribers of a broadcast ring as entry `me` (attached already),
 * or goes on after an eviction. Frames published from now on come to it, and
 * with `oldest` also the frames still in the ring. The cursor starts a lap
 * behind the producers' hint, before every position a frame carrying the new
 * bit can have; frames without the bit are skipped. An evicted subscriber goes
 * on from where it was evicted (it took the frames before that; those after,
 * published since, still carry its bit). */
GPR_INLINE void gpr_bc_subscribe(gpr_segment *seg, uint32_t me, uint32_t on_slow, int oldest) {
  gpr_participant *p = &seg->participants[me];
  /* Without the record (out of memory) it only cannot release stray shares. */
  if (me == seg->attached_index && !seg->held) seg->held = (uint64_t *)calloc(seg->slot_count, sizeof *seg->held);
  uint64_t tail = __atomic_load_n(&seg->control->tail, __ATOMIC_RELAXED) & GPR_SEQ_MASK;
  uint64_t c = __atomic_load_n(&p->cursor, __ATOMIC_ACQUIRE), start;
  /* A CAS: while it says EVICTED, producers drop frames for it by moving its
   * evicted position past them, and it must not start before one of those. */
  for (;;) {
    if (c & GPR_CURSOR_DROPPING) {  /* counted before it clears: wait for it, or take its dropper for dead */
      c = gpr_bc_settle_drop(seg, me, c, GPR_DROP_STALE_NS + GPR_DROP_WAIT_NS);
      continue;
    }
    start = (tail - seg->slot_count) & GPR_SEQ_MASK;
    if ((c & GPR_CURSOR_EVICTED) && gpr_seq_diff(c & GPR_SEQ_MASK, start) > 0) start = c & GPR_SEQ_MASK;
    if (__atomic_compare_exchange_n(&p->cursor, &c, start, 0, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) break;
  }
  __atomic_store_n(&p->subscription, on_slow + 1u, __ATOMIC_SEQ_CST);
  __atomic_fetch_or(&seg->control->subscribers, gpr_bc_bit(me), __ATOMIC_SEQ_CST);
  if (oldest) gpr_bc_adopt_retained(seg, me);
}

/* How long a consumer that attached waits, before it subscribes, for a proxy
 * that took its entry's proxy word before the attach to let go
 * (gpr_bc_await_proxies). A proxy holds it for a few instructions unless it
 * lost its CPU; one that holds it longer is left behind. */
#define GPR_PROXY_WAIT_NS 1000000000ull

/* A proxy word naming this process: pid << 32 | its start time mod 2^32. */
GPR_INLINE uint64_t gpr_bc_proxy_self(gpr_segment *seg) {
  if (!seg->proxy_self) seg->proxy_self = (uint64_t)getpid() << 32 | (uint32_t)gpr_self_start_time();
  return seg->proxy_self;
}

/* Does proxy word `v` name a process that runs (its pid, not a zombie, with
 * that start time), or one we cannot judge now? A proxy killed while acting
 * leaves its word behind. */
GPR_INLINE int gpr_bc_proxy_alive(uint64_t v) {
  uint64_t started;
  int rc = gpr_running_start_time((uint32_t)(v >> 32), &started);
  return rc == GPR_PROC_UNKNOWN || (rc == GPR_PROC_RUNNING && (uint32_t)started == (uint32_t)v);
}

/* Takes entry `k`'s proxy word, which anyone but `k`'s occupant holds while it
 * acts on `k`'s shares or cursor: a release made for it, a drop, the finish of
 * a drop (SPEC.md §5.4, Proxies). A consumer that attaches at `k` waits for the
 * word before it subscribes, so no action judged on an earlier occupant can
 * land on the frames the new one takes: a sweep that judged the entry FREE or
 * DEAD and was held up before its AND would release a frame under a new
 * subscriber there that had adopted or received it and taken it (SPEC.md
 * called this window open until format 2.4). Returns 0 when
 * another live process, or another thread of this one, holds it: leave `k`
 * for next time. */
GPR_INLINE int gpr_bc_proxy_take(gpr_segment *seg, uint32_t k) {
  uint64_t *word = &seg->participants[k].proxy, self = gpr_bc_proxy_self(seg), held = 0;
  if (!__atomic_compare_exchange_n(word, &held, self, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) &&
      (held == self || gpr_bc_proxy_alive(held) ||
       !__atomic_compare_exchange_n(word, &held, self, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)))
    return 0;
  return 1;  /* the CAS is a seq_cst RMW: the entry, judged after it, pairs with gpr_bc_await_proxies */
}

GPR_INLINE void gpr_bc_proxy_give(gpr_segment *seg, uint32_t k) {
  uint64_t self = seg->proxy_self;
  __atomic_compare_exchange_n(&seg->participants[k].proxy, &self, 0, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

/* A consumer that attached as entry `me` (ACTIVE stored), before it first
 * subscribes: waits until no live process holds the entry's proxy word, for
 * up to GPR_PROXY_WAIT_NS. A proxy that takes the word after this looks sees
 * the entry ACTIVE as this consumer, a subscriber or joining, and leaves its
 * shares to it. */
GPR_INLINE void gpr_bc_await_proxies(gpr_segment *seg, uint32_t me) {
  uint64_t until = gpr_monotonic_ns() + GPR_PROXY_WAIT_NS, *word = &seg->participants[me].proxy;
  /* Loaded by a seq_cst RMW, which orders our ACTIVE store before it (a fence
   * would too; ThreadSanitizer does not model fences). */
  for (uint64_t v; (v = __atomic_fetch_add(word, 0u, __ATOMIC_SEQ_CST)) != 0;) {
    if (!gpr_bc_proxy_alive(v) || gpr_monotonic_ns() >= until) return;
    struct timespec pause = {0, 20000};
    nanosleep(&pause, NULL);
  }
}

/* A consumer that attached as entry `me` joins the subscribers: once no proxy
 * that took the entry's proxy word before the attach still acts for it
 * (gpr_bc_await_proxies, SPEC.md §5.4 Proxies), it subscribes. */
GPR_INLINE void gpr_bc_join(gpr_segment *seg, uint32_t me, uint32_t on_slow, int oldest) {
  gpr_bc_await_proxies(seg, me);
  gpr_bc_subscribe(seg, me, on_slow, oldest);
}

/* Frames dropped for `me` that it has not been told of. `missed` may stand
 * below `missed_seen` after it was told of a count taken back (a dropper and
 * one that took it for dead both counted a drop, gpr_bc_finish_drop): none,
 * and `missed_seen` comes down to it, so that the next drop is told. */
GPR_INLINE uint64_t gpr_bc_untold(gpr_segment *seg, uint32_t me) {
  gpr_participant *p = &seg->participants[me];
  uint64_t missed = __atomic_load_n(&p->missed, __ATOMIC_ACQUIRE), told = p->missed_seen;
  if ((int64_t)(missed - told) >= 0) return missed - told;
  __atomic_store_n(&p->missed_seen, missed, __ATOMIC_RELAXED);
  return 0;
}

/* Frames dropped for `me` that it has not been told of; marks them told. */
GPR_INLINE uint64_t gpr_bc_take_missed(gpr_segment *seg, uint32_t me) {
  uint64_t untold = gpr_bc_untold(seg, me);
  __atomic_fetch_add(&seg->participants[me].missed_seen, untold, __ATOMIC_RELAXED);
  return untold;
}

/* The last subscriber let go of the frame at `pos` (slot word `w`, READY): the
 * slot goes to RELEASED for its producer to reap, or to EMPTY a lap on when
 * that producer is gone. */
GPR_INLINE void gpr_bc_retire(gpr_segment *seg, uint64_t pos, uint64_t w) {
  gpr_slot *s = gpr_slot_at(seg, pos);
  gpr_frame_ref ref = s->ref;
  uint64_t to = gpr_ref_producer_active(seg, &ref) && gpr_word_owner(w) == ref.producer + 1u
                    ? gpr_slot_word(pos, GPR_SLOT_RELEASED, gpr_word_owner(w))
                    : gpr_slot_word(pos + seg->slot_count, GPR_SLOT_EMPTY, 0);
  if (gpr_slot_cas(s, w, to)) gpr_notify_space(seg);
}

/* The record of this mapping's takes (gpr_segment.held), when `owner` is the
 * subscriber it attached; NULL otherwise. Taken with gpr_bc_lock held. */
GPR_INLINE uint64_t *gpr_bc_takes(gpr_segment *seg, uint32_t owner) {
  return owner == seg->attached_index ? seg->held : NULL;
}

GPR_INLINE void gpr_bc_lock(gpr_segment *seg) {
  while (__atomic_exchange_n(&seg->held_lock, 1u, __ATOMIC_ACQUIRE)) gpr_cpu_relax();
}

GPR_INLINE void gpr_bc_unlock(gpr_segment *seg) { __atomic_store_n(&seg->held_lock, 0u, __ATOMIC_RELEASE); }

/* Forgets the take of `pos`, if recorded. */
GPR_INLINE void gpr_bc_forget(uint64_t *takes, const gpr_segment *seg, uint64_t pos) {
  if (takes[pos & seg->mask] == (pos & GPR_SEQ_MASK) + 1u) takes[pos & seg->mask] = 0;
}

/* Ends subscriber `owner`'s share of the frame at `pos`: the AND of its bit,
 * and the move on of the slot when it was the last. */
GPR_INLINE int gpr_bc_release_share(gpr_segment *seg, uint32_t owner, uint64_t pos) {
  gpr_slot *s = gpr_slot_at(seg, pos);
  uint64_t w = gpr_slot_load(s);
  if (owner >= 64u || gpr_word_seq(w) != (pos & GPR_SEQ_MASK) || gpr_word_state(w) != GPR_SLOT_READY)
    return -(int)GPR_E_FRAME_STATE;
  uint64_t bit = gpr_bc_bit(owner);
  uint64_t was = __atomic_fetch_and(&s->pending, ~bit, __ATOMIC_ACQ_REL);
  if (!(was & bit)) return -(int)GPR_E_FRAME_STATE;
  if ((was & ~bit) == 0) gpr_bc_retire(seg, pos, w);
  return 0;
}

/* Ends subscriber `owner`'s share of the frame at `pos`: its own release, or
 * one made for it (it died, or the frame was dropped for it). */
GPR_INLINE int gpr_bc_release_as(gpr_segment *seg, uint32_t owner, uint64_t pos) {
  uint64_t *takes = gpr_bc_takes(seg, owner);
  if (!takes) return gpr_bc_release_share(seg, owner, pos);
  gpr_bc_lock(seg);
  int rc = gpr_bc_release_share(seg, owner, pos);
  gpr_bc_forget(takes, seg, pos);  /* a share a sweeper released for us is gone all the same */
  gpr_bc_unlock(seg);
  return rc;
}

/* SPEC.md §5.4, "Stray shares": releases `me`'s share of every READY frame its
 * cursor has passed that carries its bit and that it does not hold. Only
 * damage makes one (a pending bit set again after its release, a cursor moved
 * forward), and nothing else would release it: producers wait for a frame a
 * subscriber took (it is never taken back), so the ring would stop there.
 * Returns how many it released. Run when this subscriber sweeps. */
GPR_INLINE uint32_t gpr_bc_release_strays(gpr_segment *seg, uint32_t me) {
  uint64_t *takes = gpr_bc_takes(seg, me);
  if (!takes) return 0;
  uint32_t released = 0;
  gpr_bc_lock(seg);
  uint64_t c = __atomic_load_n(&seg->participants[me].cursor, __ATOMIC_ACQUIRE);
  for (uint32_t i = 0; i < seg->slot_count && !(c & (GPR_CURSOR_DROPPING | GPR_CURSOR_EVICTED)); i++) {
    gpr_slot *s = &seg->slots[i];
    uint64_t w = gpr_slot_load(s), pos = gpr_word_seq(w);
    if (gpr_word_state(w) != GPR_SLOT_READY || gpr_seq_diff(c & GPR_SEQ_MASK, pos) <= 0 || takes[i] == pos + 1u) continue;
    if ((__atomic_load_n(&s->pending, __ATOMIC_ACQUIRE) & gpr_bc_bit(me)) && gpr_bc_release_share(seg, me, pos) == 0)
      released++;
  }
  gpr_bc_unlock(seg);
  return released;
}

/* Puts a subscriber's bit back into control.subscribers when it is missing.
 * Only the freer of its entry and its own attach clear a bit (gpr_bc_leave),
 * so a live subscriber that finds its own bit gone finds damage (SPEC.md §5.4,
 * Claim): without the bit no frame would carry it again, and it would read
 * nothing for good. */
GPR_INLINE void gpr_bc_keep_subscribed(gpr_segment *seg, uint64_t bit) {
  if (!(__atomic_load_n(&seg->control->subscribers, __ATOMIC_ACQUIRE) & bit))
    __atomic_fetch_or(&seg->control->subscribers, bit, __ATOMIC_SEQ_CST);
}

/* A walk along one subscriber's positions (its claim, the drops made for it)
 * that finds slot word `w` at `pos`: is `pos` still being published (not yet
 * claimed by a producer, or WRITING)? Nothing there or past it is ready yet. */
GPR_INLINE int gpr_bc_unpublished(uint64_t w, uint64_t pos) {
  int64_t d = gpr_seq_diff(gpr_word_seq(w), pos);
  uint32_t st = gpr_word_state(w);
  return d < 0 || (d == 0 && (st == GPR_SLOT_EMPTY || st == GPR_SLOT_WRITING));
}

/* The position such a walk looks at after passing `pos` (slot word `w`): the
 * next, or, when the slot is more than a lap past `pos`, a lap before the
 * slot's own position at once: every position up to there was filled again,
 * so none holds a frame of this subscriber (a cursor damaged far behind would
 * otherwise crawl for good). */
GPR_INLINE uint64_t gpr_bc_pass(const gpr_segment *seg, uint64_t pos, uint64_t w) {
  int64_t d = gpr_seq_diff(gpr_word_seq(w), pos);
  return (d > (int64_t)seg->slot_count ? gpr_word_seq(w) - seg->slot_count : pos + 1) & GPR_SEQ_MASK;
}

/* Takes the next frame for subscriber `me`: 0 with the reference copied out,
 * RING_EMPTY, FRAMES_MISSED (frames were dropped for it: gpr_bc_take_missed
 * says how many, then call again) or EVICTED (gpr_bc_subscribe joins again). */
GPR_INLINE int gpr_bc_try_claim(gpr_segment *seg, uint32_t me, gpr_frame_ref *out, uint64_t *out_pos) {
  gpr_participant *p = &seg->participants[me];
  uint64_t bit = gpr_bc_bit(me);
  /* A failed cursor CAS means a producer dropped frames for us meanwhile: look
   * again, a bounded number of times (the cursor is shared memory). */
  for (int tries = 0; tries < 4; tries++) {
    uint64_t cur = __atomic_load_n(&p->cursor, __ATOMIC_ACQUIRE);
    if (cur & GPR_CURSOR_DROPPING) {  /* a producer's drop, half done: counted once its mark clears */
      if (gpr_bc_settle_drop(seg, me, cur, GPR_DROP_WAIT_NS) & GPR_CURSOR_DROPPING) return -(int)GPR_E_RING_EMPTY;
      continue;
    }
    if (cur & GPR_CURSOR_EVICTED) return -(int)GPR_E_EVICTED;
    if (gpr_bc_untold(seg, me) != 0) return -(int)GPR_E_FRAMES_MISSED;
    uint64_t pos = cur & GPR_SEQ_MASK;
    int lost = 0;
    for (uint64_t steps = gpr_scan_limit(seg); steps > 0 && !lost; steps--) {
      gpr_slot *s = gpr_slot_at(seg, pos);
      uint64_t w = gpr_slot_load(s);
      int64_t d = gpr_seq_diff(gpr_word_seq(w), pos);
      uint32_t st = gpr_word_state(w);
      if (d < -(int64_t)seg->slot_count) {  /* a cursor no slot can match: trust the slot */
        pos = gpr_word_seq(w);
        continue;
      }
      if (gpr_bc_unpublished(w, pos)) break;
      if (d == 0 && st == GPR_SLOT_READY && gpr_bc_carries(s, w, bit)) {
        /* The cursor CAS is the claim: a producer dropping frames for us moves
         * it too, so exactly one of us decides what becomes of this frame. */
        uint64_t *takes = gpr_bc_takes(seg, me);
        if (takes) gpr_bc_lock(seg);  /* the take and its record are one step for gpr_bc_release_strays */
        lost = !__atomic_compare_exchange_n(&p->cursor, &cur, (pos + 1) & GPR_SEQ_MASK, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE);
        if (takes && !lost) takes[pos & seg->mask] = pos + 1u;
        if (takes) gpr_bc_unlock(seg);
        if (lost) break;
        *out = s->ref;
        *out_pos = pos;
        return 0;
      }
      pos = gpr_bc_pass(seg, pos, w);  /* not ours: published before we joined, or done */
    }
    if (lost) continue;
    /* Frames skipped need not be looked at again; a failed CAS means a producer moved us. */
    if (pos != (cur & GPR_SEQ_MASK))
      __atomic_compare_exchange_n(&p->cursor, &cur, pos, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
    gpr_bc_keep_subscribed(seg, bit);
    return -(int)GPR_E_RING_EMPTY;
  }
  return -(int)GPR_E_RING_EMPTY;
}

/* Gives back a frame `me` took but never handed to its user: its cursor goes
 * back to it if nothing was taken since; otherwise the frame is released and
 * counted as missed, so that its user still learns of it. */
GPR_INLINE int gpr_bc_unclaim(gpr_segment *seg, uint32_t me, uint64_t pos) {
  gpr_participant *p = &seg->participants[me];
  uint64_t next = (pos + 1) & GPR_SEQ_MASK, *takes = gpr_bc_takes(seg, me);
  if (takes) gpr_bc_lock(seg);
  int back = __atomic_compare_exchange_n(&p->cursor, &next, pos & GPR_SEQ_MASK, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  if (takes && back) gpr_bc_forget(takes, seg, pos);
  if (takes) gpr_bc_unlock(seg);
  if (back) {
    gpr_notify_data(seg);
    return 0;
  }
  int rc = gpr_bc_release_as(seg, me, pos);
  if (rc == 0) __atomic_fetch_add(&p->missed, 1u, __ATOMIC_RELEASE);
  return rc;
}

/* Finishes the drop the cursor `c` of subscriber `k` names (DROPPING: the frame
 * just before its position): releases k's share of that frame (a second release
 * finds it gone, harmless), counts it as missed, and only then clears the mark,
 * so that a subscriber that finds its cursor clear finds the loss counted too and
 * learns of it before it takes a later frame. Only the dropper finishes its drop,
 * or whoever takes it for dead (gpr_bc_settle_drop); when the clearing CAS fails,
 * the other did and counted too, and this count is taken back. Returns the
 * cursor as it is now. */
GPR_INLINE uint64_t gpr_bc_finish_drop(gpr_segment *seg, uint32_t k, uint64_t c) {
  gpr_bc_release_as(seg, k, ((c & GPR_SEQ_MASK) - 1u) & GPR_SEQ_MASK);
  uint64_t *missed = &seg->participants[k].missed, done = c & ~GPR_CURSOR_DROPPING;
  __atomic_fetch_add(missed, 1u, __ATOMIC_RELEASE);
  if (__atomic_compare_exchange_n(&seg->participants[k].cursor, &c, done, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return done;
  __atomic_fetch_sub(missed, 1u, __ATOMIC_RELEASE);
  return c;
}

/* Another's drop, marked in the cursor `c` of subscriber `k`: waits up to
 * `wait_ns` for its dropper to clear the mark. A mark this mapping has seen
 * unchanged for GPR_DROP_STALE_NS is one whose dropper died half-way: finished
 * here. Returns the cursor as it is now, DROPPING still set if neither. */
GPR_INLINE uint64_t gpr_bc_settle_drop(gpr_segment *seg, uint32_t k, uint64_t c, uint64_t wait_ns) {
  if (k >= 64u) return c;
  uint64_t marked = c, now = gpr_monotonic_ns(), until = now + wait_ns, since = now;
  /* Relaxed: threads sharing this mapping (a sweep beside a claim) may race on
   * the record; the worst a torn one does is settle a live dropper's mark early,
   * whose count that dropper then takes back. */
  if (__atomic_load_n(&seg->drop_mark[k], __ATOMIC_RELAXED) == c)
    since = __atomic_load_n(&seg->drop_mark_ns[k], __ATOMIC_RELAXED);
  else
    __atomic_store_n(&seg->drop_mark[k], c, __ATOMIC_RELAXED), __atomic_store_n(&seg->drop_mark_ns[k], now, __ATOMIC_RELAXED);
  while (c == marked && now - since < GPR_DROP_STALE_NS) {
    if (now >= until) return c;
    for (int i = 0; i < 32; i++) gpr_cpu_relax();
    c = __atomic_load_n(&seg->participants[k].cursor, __ATOMIC_ACQUIRE);
    now = gpr_monotonic_ns();
  }
  return c == marked ? gpr_bc_finish_drop(seg, k, c) : c;
}

/* Drops the frame at `pos` for subscriber `k`, whose cursor is `*c` (at or
 * before `pos`; EVICTED kept): the cursor moves past the frame first, by CAS
 * and marked DROPPING, so that the subscriber can neither take it nor go on
 * from before it (gpr_bc_subscribe) and see it released under it; then the drop
 * is finished. 0 if the CAS lost (it took the frame, or went on), or if `*c`
 * is past `pos` or names a drop half done: a frame behind the cursor may be one
 * the subscriber holds. On success `*c` is the cursor this drop leaves, the one
 * a next drop expects: not the cursor as it is now, which after another
 * finisher cleared the mark may be the subscriber's own again, having gone on
 * (subscribed again after an eviction) and taken frames past `pos`. */
GPR_INLINE int gpr_bc_drop(gpr_segment *seg, uint32_t k, uint64_t *c, uint64_t pos) {
  if ((*c & GPR_CURSOR_DROPPING) || gpr_seq_diff(pos, *c & GPR_SEQ_MASK) < 0) return 0;
  uint64_t marked = GPR_CURSOR_DROPPING | (*c & GPR_CURSOR_EVICTED) | ((pos + 1) & GPR_SEQ_MASK);
  if (!__atomic_compare_exchange_n(&seg->participants[k].cursor, c, marked, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return 0;
  gpr_bc_finish_drop(seg, k, marked);
  *c = marked & ~GPR_CURSOR_DROPPING;
  return 1;
}

/* Drops for subscriber `k`, whose cursor is `*c`, each frame it has not taken,
 * in position order from its cursor through `last` (a lap at most), and stops
 * at a position still being published (its slot there EMPTY or WRITING, or a
 * lap behind): that frame may yet carry k's bit, and a cursor moved past it
 * would lose it uncounted (it would end as a stray share, gpr_bc_release_strays).
 * Stops too at the first drop whose CAS fails (it went on, or took a frame).
 * Frames on the way that are not k's (no bit, gone) are passed. */
GPR_INLINE void gpr_bc_drop_through(gpr_segment *seg, uint32_t k, uint64_t *c, uint64_t last) {
  uint64_t pos = *c & GPR_SEQ_MASK;
  for (uint64_t steps = gpr_scan_limit(seg); steps > 0 && gpr_seq_diff(last, pos) >= 0; steps--) {
    gpr_slot *s = gpr_slot_at(seg, pos);
    uint64_t w = gpr_slot_load(s);
    if (gpr_bc_unpublished(w, pos)) return;
    if (gpr_word_seq(w) == pos && gpr_word_state(w) == GPR_SLOT_READY && gpr_bc_carries(s, w, gpr_bc_bit(k)) &&
        !gpr_bc_drop(seg, k, c, pos))
      return;
    pos = gpr_bc_pass(seg, pos, w);
  }
}

/* Evicts subscriber `k`, whose cursor was `c` (at or before the oldest frame
 * `q`): every frame it had not taken is dropped for it, oldest first, and its
 * cursor says EVICTED until it has learnt so. It stays a subscriber (clearing
 * its bit in control.subscribers could race with its going on): frames
 * published meanwhile are dropped for it whenever they hold the ring up, and
 * come to it once it goes on. */
GPR_INLINE void gpr_bc_evict(gpr_segment *seg, uint32_t k, uint64_t c, uint64_t q) {
  uint64_t evicted = GPR_CURSOR_EVICTED | (c & GPR_SEQ_MASK);
  if (!__atomic_compare_exchange_n(&seg->participants[k].cursor, &c, evicted, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return;
  gpr_bc_drop_through(seg, k, &evicted, q + seg->slot_count - 1u);
  gpr_notify_data(seg);  /* wake it, so that it learns */
}

/* Is entry `k` a subscriber (attached, joined with a policy), or a consumer
 * joining (attached, not yet subscribed: its subscribe comes right after its
 * attach)? Either may take a frame carrying its bit, so its share is its own to
 * release: a sweep or a producer that released it on a check made before the
 * subscription was stored could do so after the new subscriber took the frame
 * (one with its entry's previous occupant's bit), under it. A bit of anything
 * else in a frame's `pending` is left over from an earlier occupant, or damage
 * (a `subscription` no policy has), and means nobody: were a live
 * non-subscriber counted, its share would hold every frame while its process
 * lives. */
GPR_INLINE int gpr_bc_subscribed(const gpr_segment *seg, uint32_t k) {
  if (k >= seg->participant_capacity || gpr_pstate(gpr_participant_word(seg, k)) != GPR_PARTICIPANT_ACTIVE) return 0;
  uint32_t subscription = __atomic_load_n(&seg->participants[k].subscription, __ATOMIC_ACQUIRE);
  return subscription - 1u <= GPR_ON_SLOW_EVICT || (subscription == 0 && (seg->participants[k].roles & GPR_ROLE_CONSUMER));
}

/* How many subscribers a frame published now would go to: the bits of
 * control.subscribers (0 for a work-queue ring). A killed subscriber counts
 * until the next sweep clears its bit. A producer whose first frames must
 * reach someone waits for this before publishing (gpr_producer_wait_subscribers). */
GPR_INLINE uint32_t gpr_ring_subscriber_count(const gpr_segment *seg) {
  return seg->broadcast ? (uint32_t)__builtin_popcountll(__atomic_load_n(&seg->control->subscribers, __ATOMIC_ACQUIRE)) : 0u;
}

/* What a producer that needs the slot of position q + slot_count does about
 * subscriber `k`, which still holds the frame at `q`, as its proxy. */
GPR_INLINE void gpr_bc_act_for(gpr_segment *seg, uint32_t k, uint64_t q) {
  if (!gpr_bc_subscribed(seg, k)) {
    gpr_bc_release_as(seg, k, q);
    return;
  }
  gpr_participant *p = &seg->participants[k];
  uint64_t c = __atomic_load_n(&p->cursor, __ATOMIC_ACQUIRE);
  if (c & GPR_CURSOR_DROPPING) c = gpr_bc_settle_drop(seg, k, c, GPR_DROP_WAIT_NS);  /* another producer's drop */
  if (c & GPR_CURSOR_DROPPING) return;  /* not done yet: look again next time */
  int64_t ahead = gpr_seq_diff(c & GPR_SEQ_MASK, q);  /* > 0: it has taken q and holds it */
  if (ahead > 0) return;
  uint32_t policy = __atomic_load_n(&p->subscription, __ATOMIC_ACQUIRE) - 1u;
  if ((c & GPR_CURSOR_EVICTED) || policy == GPR_ON_SLOW_DROP_OLDEST) {
    gpr_bc_drop_through(seg, k, &c, q);  /* evicted: published to it around or after its eviction */
  } else if (policy == GPR_ON_SLOW_EVICT) {
    gpr_bc_evict(seg, k, c, q);
  }
}

GPR_INLINE void gpr_bc_relieve_one(gpr_segment *seg, uint32_t k, uint64_t q) {
  if (k >= seg->participant_capacity) {
    gpr_bc_release_as(seg, k, q);  /* damage: no entry there will ever subscribe */
  } else if (gpr_bc_proxy_take(seg, k)) {
    gpr_bc_act_for(seg, k, q);
    gpr_bc_proxy_give(seg, k);
  }
}

/* A producer found the slot it needs still serving the frame at `q`: applies
 * each holder's on_slow policy. The slot frees once the last holder lets go
 * (and its producer reaps it); until then the ring stays full. */
GPR_INLINE void gpr_bc_relieve(gpr_segment *seg, uint64_t q) {
  gpr_slot *s = gpr_slot_at(seg, q);
  uint64_t w = gpr_slot_load(s);
  if (gpr_word_seq(w) != (q & GPR_SEQ_MASK) || gpr_word_state(w) != GPR_SLOT_READY) return;
  uint64_t m = __atomic_load_n(&s->pending, __ATOMIC_ACQUIRE);
  if (m == 0) gpr_bc_retire(seg, q, w);  /* every share released; its last releaser died before moving it on */
  for (; m; m &= m - 1u)
    gpr_bc_relieve_one(seg, (uint32_t)__builtin_ctzll(m), q);
}

/* The publish of a broadcast ring after the reference is written (slot WRITING
 * by `me`): the frame goes to the subscribers attached now, READY, or straight
 * to RELEASED when there are none. Every sleeping subscriber is woken. */
GPR_INLINE int gpr_bc_finish_publish(gpr_segment *seg, uint32_t me, uint64_t pos) {
  gpr_slot *s = gpr_slot_at(seg, pos);
  uint64_t subscribers = __atomic_load_n(&seg->control->subscribers, __ATOMIC_SEQ_CST);
  __atomic_store_n(&s->pending, subscribers, __ATOMIC_RELAXED);
  uint64_t writing = gpr_slot_word(pos, GPR_SLOT_WRITING, me + 1u);
  uint64_t to = gpr_slot_word(pos, subscribers ? GPR_SLOT_READY : GPR_SLOT_RELEASED, me + 1u);
  if (!__atomic_compare_exchange_n(&s->word, &writing, to, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
    return -(int)GPR_E_FRAME_STATE;
  if (subscribers) gpr_notify_data(seg);  /* every subscriber: not one sleeper per frame */
  return 0;
}

/* Sweep: the shares of the frame at `pos` held by entries that are not live
 * subscribers are released: dead ones', and bits left over from an entry freed
 * while a publish that had loaded control.subscribers before the sweep cleared
 * its bit was still in flight (the frame went READY after that sweep looked).
 * Returns how many shares. */
GPR_INLINE uint32_t gpr_bc_sweep_slot(gpr_segment *seg, uint64_t pos) {
  gpr_slot *s = gpr_slot_at(seg, pos);
  uint32_t released = 0;
  uint64_t w = gpr_slot_load(s), m = __atomic_load_n(&s->pending, __ATOMIC_ACQUIRE);
  if (m == 0 && gpr_word_seq(w) == (pos & GPR_SEQ_MASK) && gpr_word_state(w) == GPR_SLOT_READY)
    gpr_bc_retire(seg, pos, w);  /* its last releaser died between clearing its bit and moving the slot on */
  for (; m; m &= m - 1u) {
    uint32_t k = (uint32_t)__builtin_ctzll(m);
    if (k >= seg->participant_capacity) {
      released += gpr_bc_release_as(seg, k, pos) == 0;  /* damage: no entry there will ever subscribe */
    } else if (gpr_bc_proxy_take(seg, k)) {
      if (!gpr_bc_subscribed(seg, k) && gpr_bc_release_as(seg, k, pos) == 0) released++;  /* as of now */
      gpr_bc_proxy_give(seg, k);
    }
  }
  return released;
}

/* The entries that are subscribers now (gpr_bc_subscribed), as bits. */
GPR_INLINE uint64_t gpr_bc_subscribed_mask(const gpr_segment *seg) {
  uint64_t live = 0;
  for (uint32_t k = 0; k < seg->participant_capacity && k < 64u; k++)
    if (gpr_bc_subscribed(seg, k)) live |= gpr_bc_bit(k);
  return live;
}

/* Sweep step 3 of a broadcast ring over `window` slots from `from`: over every
 * slot when an entry is dead, else over the window step 2 checked. A READY frame
 * with a share of an entry that is no subscriber now, or with no share left,
 * goes through gpr_bc_sweep_slot; one whose shares all name subscribers costs
 * no proxy word. With nobody dead, such a share is left when its entry was
 * freed while its proxy word was held elsewhere, or while a publish that had
 * loaded its bit was in flight, and a producer that never fills the ring (its
 * drain(), say) would wait for that frame for good. Returns how many shares. */
GPR_INLINE uint32_t gpr_bc_sweep_window(gpr_segment *seg, uint64_t from, uint32_t window) {
  uint64_t live = gpr_bc_subscribed_mask(seg);
  uint32_t released = 0;
  for (uint32_t k = 0; k < window; k++) {
    gpr_slot *s = &seg->slots[(from + k) & seg->mask];
    uint64_t w = gpr_slot_load(s);
    if (gpr_word_state(w) != GPR_SLOT_READY) continue;
    uint64_t m = __atomic_load_n(&s->pending, __ATOMIC_ACQUIRE);
    if (m == 0 || (m & ~live)) released += gpr_bc_sweep_slot(seg, gpr_word_seq(w));
  }
  return released;
}

/* Sweep, before the slots: drops that a dead producer left half done (their
 * mark seen unchanged for GPR_DROP_STALE_NS, over this mapping's sweeps) are
 * finished for the live subscribers they name. */
GPR_INLINE void gpr_bc_finish_dead_drops(gpr_segment *seg) {
  for (uint32_t k = 0; k < seg->participant_capacity && k < 64u; k++) {
    if (!(__atomic_load_n(&seg->participants[k].cursor, __ATOMIC_ACQUIRE) & GPR_CURSOR_DROPPING) ||
        !gpr_bc_proxy_take(seg, k))
      continue;
    uint64_t c = __atomic_load_n(&seg->participants[k].cursor, __ATOMIC_ACQUIRE);
    if (gpr_bc_subscribed(seg, k) && (c & GPR_CURSOR_DROPPING)) gpr_bc_settle_drop(seg, k, c, 0);
    gpr_bc_proxy_give(seg, k);
  }
}

/* The attach of entry `index` (ATTACHING, its bit out of control.subscribers)
 * releases the entry's bit from every READY frame that carries it: the shares
 * its previous occupant left. The attacher does this itself, without the
 * entry's proxy word: it is the entry's occupant now, and a proxy holding the
 * word would leave such a share to it. Left, they would come to the new
 * subscriber, frames published before it joined, with the frames published
 * between them missing (a 16-core torture found a subscriber taking two and
 * then missing one, while relieving producers held its entry's word). */
GPR_INLINE void gpr_bc_release_leftovers(gpr_segment *seg, uint32_t index) {
  if (index >= 64u) return;
  for (uint64_t i = 0; i < seg->slot_count; i++) {
    gpr_slot *s = &seg->slots[i];
    uint64_t w = gpr_slot_load(s);
    if (gpr_word_state(w) == GPR_SLOT_READY && gpr_bc_carries(s, w, gpr_bc_bit(index)))
      gpr_bc_release_as(seg, index, gpr_word_seq(w));
  }
}

/* Entry `index` leaves control.subscribers. Only its freer (holding FREEING)
 * and its attacher (holding ATTACHING, clearing a lost occupant's bit) do
 * this: an AND made on a DEAD entry could land after another sweeper freed it
 * and a new subscriber joined there, whose bit it would clear (SPEC.md §4). */
GPR_INLINE void gpr_bc_leave(gpr_segment *seg, uint32_t index) {
  if (index < 64u) __atomic_fetch_and(&seg->control->subscribers, ~gpr_bc_bit(index), __ATOMIC_SEQ_CST);
}

/* Does consumer `me` hold the frame at `pos` (taken, not yet released)? */
GPR_INLINE int gpr_ring_holds(const gpr_segment *seg, uint32_t me, uint64_t pos) {
  const gpr_slot *s = gpr_slot_at(seg, pos);
  uint64_t w = gpr_slot_load(s);
  if (gpr_word_seq(w) != (pos & GPR_SEQ_MASK)) return 0;
  if (!seg->broadcast) return gpr_word_state(w) == GPR_SLOT_LEASED && gpr_word_owner(w) == me + 1u;
  uint64_t c = __atomic_load_n(&seg->participants[me].cursor, __ATOMIC_ACQUIRE);
  return gpr_word_state(w) == GPR_SLOT_READY && (__atomic_load_n(&s->pending, __ATOMIC_ACQUIRE) & gpr_bc_bit(me)) &&
         gpr_seq_diff(c & GPR_SEQ_MASK, pos) > 0;
}

/* Where subscriber `k` stands (for tools: inspect, fixtures): frames it took and
 * has not released (`held`), and frames it has yet to take (`unread`). */
GPR_INLINE void gpr_bc_standing(const gpr_segment *seg, uint32_t k, uint32_t *held, uint32_t *unread) {
  *held = *unread = 0;
  if (k >= 64u) return;
  uint64_t c = __atomic_load_n(&seg->participants[k].cursor, __ATOMIC_ACQUIRE) & GPR_SEQ_MASK;
  for (uint32_t i = 0; i < seg->slot_count; i++) {
    uint64_t w = gpr_slot_load(&seg->slots[i]);
    if (gpr_word_state(w) != GPR_SLOT_READY || !(__atomic_load_n(&seg->slots[i].pending, __ATOMIC_ACQUIRE) & gpr_bc_bit(k)))
      continue;
    if (gpr_seq_diff(c, gpr_word_seq(w)) > 0) ++*held;
    else ++*unread;
  }
}
