/* gpuring/recovery.h: finding dead participants and repairing what they held.
 *
 * Any participant may sweep at any time; every repair is a CAS from the exact
 * word the dead owner left, so concurrent sweepers and live owners never undo
 * each other. What a dead participant held becomes:
 *   WRITING  (dead producer, claimed but never published) -> EMPTY, next lap
 *   CLAIMED  (dead consumer, taken but not handed over)    -> READY, redelivered
 *   LEASED   (dead consumer, held by its user)             -> released for it
 *   RELEASED (dead producer, nobody left to reclaim)       -> EMPTY, next lap
 * and so does a RELEASED frame published under another generation of its
 * owner's entry than the entry holds now: its producer lost the entry
 * (SPEC.md §4) and will never reclaim it, though the entry may look alive.
 * READY frames of a dead producer stay deliverable: their host arenas outlive
 * it. Its entry and arenas are freed once no slot refers to it any more.
 * Included by gpuring.h; not a standalone header. */

typedef struct gpr_sweep_report {
  uint32_t found_dead;   /* participants newly found dead */
  uint32_t freed;        /* participant entries freed (arenas unlinked) */
  uint32_t skipped;      /* unpublished claims of dead producers skipped */
  uint32_t redelivered;  /* frames of dead consumers handed to others */
  uint32_t released;     /* leases of dead consumers released on their behalf */
  uint32_t recycled;     /* released frames of dead producers recycled */
  uint32_t corrupt;      /* slot words and hints no participant can have written, reset */
} gpr_sweep_report;

/* Arena N of participant (index, gen) of segment NAME: /gpuring.NAME.pIgG.aN */
GPR_INLINE void gpr_arena_shm_name(const char *segment, uint32_t index, uint32_t gen,
                                   uint32_t arena, char out[GPR_SHM_NAME_MAX]) {
  snprintf(out, GPR_SHM_NAME_MAX, "/gpuring.%s.p%ug%u.a%u", segment, index, gen, arena);
}

/* A transient state (ATTACHING, FREEING) whose process is gone: nobody will
 * finish it, so a sweeper must. */
GPR_INLINE int gpr_transient_orphaned(uint64_t w) {
  uint32_t st = gpr_pstate(w);
  return (st == GPR_PARTICIPANT_ATTACHING || st == GPR_PARTICIPANT_FREEING) &&
         !gpr_pid_running(gpr_pword_pid(w));
}

/* Marks as DEAD the ACTIVE entries whose process is gone, the ATTACHING ones
 * whose attacher died half-way (they own no slot yet), and damaged ones (state
 * 5-7, or ACTIVE with pid bits, which an ACTIVE word never carries), whose
 * occupant, if alive, fails with DETACHED from then on
 * (SPEC.md §4): no entry stays lost for good. dead[i] is the state word of a
 * DEAD entry, or of a FREEING one whose freer died (both are for freeing), as
 * seen here; 0 for every other entry. */
GPR_INLINE void gpr_sweep_mark(gpr_segment *seg, uint64_t *dead, gpr_sweep_report *rep) {
  for (uint32_t i = 0; i < seg->participant_capacity; i++) {
    uint64_t w = gpr_participant_word(seg, i);
    uint32_t st = gpr_pstate(w);
    int gone = (st == GPR_PARTICIPANT_ACTIVE && (gpr_pword_pid(w) != 0 || !gpr_participant_alive(seg, i))) ||
               (st == GPR_PARTICIPANT_ATTACHING && gpr_transient_orphaned(w)) || st > GPR_PARTICIPANT_FREEING;
    if (gone) {
      uint64_t dw = gpr_pword(gpr_pgen(w), 0, GPR_PARTICIPANT_DEAD);
      if (__atomic_compare_exchange_n(&seg->participants[i].state, &w, dw, 0, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE))
        rep->found_dead++;
      w = gpr_participant_word(seg, i);
      st = gpr_pstate(w);
    }
    dead[i] = st == GPR_PARTICIPANT_DEAD || (st == GPR_PARTICIPANT_FREEING && gpr_transient_orphaned(w)) ? w : 0;
  }
}

/* Is `owner` (index + 1, from a slot word loaded just before) an entry this
 * sweep marked, still in the very state it marked? A sweep takes a while, and
 * meanwhile another sweeper may free the entry and a new participant attach
 * there and claim slots whose words are the dead one's to the bit (owner
 * fields hold no generation). The new occupant went ACTIVE before it wrote any
 * such word, and an entry never returns to an earlier word, so the entry
 * loaded after the slot word tells them apart (SPEC.md §7, "Acting on a
 * marked entry"). */
GPR_INLINE int gpr_is_dead_owner(const gpr_segment *seg, const uint64_t *dead, uint32_t owner) {
  return owner >= 1u && owner <= seg->participant_capacity && dead[owner - 1u] != 0 &&
         gpr_participant_word(seg, owner - 1u) == dead[owner - 1u];
}

/* A RELEASED frame whose producer no longer holds its owner's entry: the
 * entry's generation is not the one the frame was published under. That
 * producer lost the entry (damage, or a sweep that judged it dead) and will not
 * reap the frame; its process may still be alive and hold the entry's pid, so
 * the entry alone does not look dead (SPEC.md §7 step 1). */
GPR_INLINE int gpr_released_orphan(const gpr_segment *seg, const gpr_slot *s, uint32_t owner) {
  return owner >= 1u && owner <= seg->participant_capacity &&
         s->ref.producer_gen != gpr_pgen(gpr_participant_word(seg, owner - 1u));
}

/* Moves on slot i when it holds a RELEASED frame whose producer lost its
 * entry (gpr_released_orphan); 1 if it did. Run over the sweep's window of
 * slots, since that entry may never be marked DEAD while its process lives. */
GPR_INLINE uint32_t gpr_sweep_orphan(gpr_segment *seg, uint64_t i) {
  gpr_slot *s = &seg->slots[i];
  uint64_t w = gpr_slot_load(s);
  if (gpr_word_state(w) != GPR_SLOT_RELEASED || !gpr_released_orphan(seg, s, gpr_word_owner(w))) return 0;
  return (uint32_t)gpr_ring_recycle_word(seg, s, w, gpr_word_seq(w));
}

/* Repairs one slot; counts in refs[] the dead producers it still refers to. */
GPR_INLINE void gpr_sweep_slot(gpr_segment *seg, uint64_t i, const uint64_t *dead, uint32_t *refs,
                               gpr_sweep_report *rep) {
  gpr_slot *s = &seg->slots[i];
  uint64_t w = gpr_slot_load(s);
  uint64_t pos = gpr_word_seq(w);
  uint32_t st = gpr_word_state(w), owner = gpr_word_owner(w);
  uint32_t producer = st >= GPR_SLOT_CLAIMED && st <= GPR_SLOT_LEASED ? s->ref.producer + 1u
                                                                       : owner;
  int owner_dead = gpr_is_dead_owner(seg, dead, owner);
  if (st == GPR_SLOT_WRITING && owner_dead) {
    gpr_ring_recycle_word(seg, s, w, pos);
    rep->skipped++;
  } else if (st == GPR_SLOT_CLAIMED && owner_dead) {
    if (gpr_ring_unclaim_as(seg, owner - 1u, pos, GPR_SLOT_CLAIMED) == 0) rep->redelivered++;
  } else if (st == GPR_SLOT_LEASED && owner_dead) {
    if (gpr_ring_release_as(seg, owner - 1u, pos, GPR_SLOT_LEASED) == 0) rep->released++;
  } else if (st == GPR_SLOT_RELEASED && owner_dead) {
    gpr_ring_recycle_word(seg, s, w, pos);
    rep->recycled++;
  }
  /* Re-read: whatever the slot holds now may still need its producer's arenas. */
  w = gpr_slot_load(s);
  st = gpr_word_state(w);
  if (st >= GPR_SLOT_READY && st <= GPR_SLOT_LEASED) {
    producer = st == GPR_SLOT_READY ? gpr_word_owner(w) : s->ref.producer + 1u;
    if (gpr_is_dead_owner(seg, dead, producer)) refs[producer - 1u]++;
  } else if (st == GPR_SLOT_RELEASED && gpr_is_dead_owner(seg, dead, gpr_word_owner(w))) {
    refs[gpr_word_owner(w) - 1u]++;
  }
}

/* Repairs every slot (and broadcast share) the entries marked in dead[] held.
 * The shares first, over every slot: a frame whose last share that releases
 * becomes RELEASED (or EMPTY), and its slot is then repaired as such. */
GPR_INLINE void gpr_sweep_owners(gpr_segment *seg, const uint64_t *dead, uint32_t *refs, gpr_sweep_report *rep) {
  if (seg->broadcast) {
    gpr_bc_finish_dead_drops(seg);
    rep->released += gpr_bc_sweep_window(seg, 0, seg->slot_count);
  }
  for (uint64_t i = 0; i < seg->slot_count; i++) gpr_sweep_slot(seg, i, dead, refs, rep);
}

/* Repairs the slots that still name entry `index`, which the caller is
 * attaching (SPEC.md §4, Attach), as a sweep repairs a dead owner's. The entry
 * was FREE, so they are leftovers of an occupant that lost it (§4, "Losing the
 * entry"): left alone, the new occupant would hold them without knowing, and a
 * lease nobody will release stalls the ring. */
GPR_INLINE void gpr_sweep_leftovers(gpr_segment *seg, uint32_t index, uint64_t attaching) {
  uint64_t *dead = (uint64_t *)calloc(seg->participant_capacity, sizeof *dead);
  uint32_t *refs = (uint32_t *)calloc(seg->participant_capacity, sizeof *refs);
  if (seg->broadcast) {
    gpr_bc_leave(seg, index);
    gpr_bc_release_leftovers(seg, index);
  }
  if (dead && refs) {
    gpr_sweep_report rep;
    memset(&rep, 0, sizeof rep);
    dead[index] = attaching;  /* our own word: it holds while we repair */
    gpr_sweep_owners(seg, dead, refs, &rep);
  }
  free(dead);
  free(refs);
}

/* A word the protocol can write: its sequence congruent to the slot index, a
 * known state, an owner in the table, and an owner exactly when not EMPTY. */
GPR_INLINE int gpr_word_consistent(const gpr_segment *seg, uint64_t i, uint64_t w) {
  uint32_t st = gpr_word_state(w);
  /* Subscribers never store CLAIMED or LEASED (their claim is the cursor): in a
   * broadcast ring such a word is damage, and nobody would ever move it on. */
  int claimed = st == GPR_SLOT_CLAIMED || st == GPR_SLOT_LEASED;
  return (gpr_word_seq(w) & seg->mask) == i && st <= GPR_SLOT_RELEASED && !(seg->broadcast && claimed) &&
         gpr_word_owner(w) <= seg->participant_capacity && (st == GPR_SLOT_EMPTY) == (gpr_word_owner(w) == 0);
}

/* A consistent word whose owner's entry is FREE or in a damaged state (5-7):
 * nobody will ever move it (an entry is freed only once no slot refers to it,
 * and a slot names an entry only after it went ACTIVE), and no sweep would. */
GPR_INLINE int gpr_word_orphaned(const gpr_segment *seg, uint64_t w) {
  if (gpr_word_state(w) == GPR_SLOT_EMPTY) return 0;
  uint32_t st = gpr_pstate(gpr_participant_word(seg, gpr_word_owner(w) - 1u));
  return st == GPR_PARTICIPANT_FREE || st > GPR_PARTICIPANT_FREEING;
}

/* Where the slots of one sweep's window agree the ring is (SPEC.md §7 step 2).
 * Healthy sequences lie within two laps of each other: occupied slots serve
 * positions producers passed, EMPTY ones positions they have yet to reach.
 * A sequence laps away from the rest is damage even when congruent to its
 * index, and so is a hint laps away: scans move one position per step from
 * a hint, so either left alone stalls the ring for good (found by writing
 * random bytes into a live segment). */
typedef struct gpr_slot_consensus {
  int64_t median;      /* the centre: the median consistent sequence, as a difference from `tail`,
                          when more than half of the window lies within two laps of it; else 0 */
  uint64_t tail;       /* the tail hint, masked */
  uint64_t reset_base; /* no producer is past it: a slot reset there is never behind them */
  uint64_t restart;    /* at most a lap before the producers: where a bogus tail hint is put */
  int64_t hi_used;     /* the greatest occupied sequence near the centre, from `tail`; INT64_MIN: none */
  uint64_t tail_hint;  /* the hints as read, unmasked: judged, and CAS'd from, as read */
  uint64_t head_hint;
} gpr_slot_consensus;

GPR_INLINE int gpr_cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

GPR_INLINE int64_t gpr_abs_i64(int64_t v) { return v < 0 ? -v : v; }

/* Reads the window's words into words[], and fills diffs[] with the consistent
 * ones, as (seq - tail) * 8 + state (the state rides in the low 3 bits: it
 * moves no median), sorted; returns how many. */
GPR_INLINE uint32_t gpr_window_diffs(gpr_segment *seg, uint32_t from, uint32_t window, uint64_t tail,
                                     int64_t *diffs, uint64_t *words) {
  uint32_t n = 0;
  for (uint32_t k = 0; k < window; k++) {
    uint64_t i = (from + k) & seg->mask, w = words[k] = gpr_slot_load(&seg->slots[i]);
    if (gpr_word_consistent(seg, i, w)) diffs[n++] = gpr_seq_diff(gpr_word_seq(w), tail) * 8 + (int64_t)gpr_word_state(w);
  }
  qsort(diffs, n, sizeof *diffs, gpr_cmp_i64);
  return n;
}

GPR_INLINE uint32_t gpr_count_near(const int64_t *diffs, uint32_t n, int64_t centre, int64_t lap) {
  uint32_t near = 0;
  for (uint32_t k = 0; k < n; k++) near += gpr_abs_i64((diffs[k] >> 3) - centre) <= 2 * lap;
  return near;
}

GPR_INLINE gpr_slot_consensus gpr_sweep_consensus(gpr_segment *seg, uint32_t from, uint32_t window,
                                                  int64_t *diffs, uint64_t *words) {
  uint64_t tail_hint = __atomic_load_n(&seg->control->tail, __ATOMIC_ACQUIRE), tail = tail_hint & GPR_SEQ_MASK;
  gpr_slot_consensus c = {0, tail, tail, tail, INT64_MIN, tail_hint, __atomic_load_n(&seg->control->head, __ATOMIC_ACQUIRE)};
  uint32_t n = gpr_window_diffs(seg, from, window, tail, diffs, words);
  if (n == 0) return c;
  int64_t lap = (int64_t)seg->slot_count, hi_used = INT64_MIN, lo_empty = INT64_MAX;
  c.median = diffs[n / 2] >> 3;
  /* A healthy window always has a majority; without one, damage is all over
   * and the tail hint is the centre the slots are brought back to. */
  if (2u * gpr_count_near(diffs, n, c.median, lap) <= window) c.median = 0;
  for (uint32_t k = 0; k < n; k++) {
    int64_t d = diffs[k] >> 3;
    if ((diffs[k] & 7) != GPR_SLOT_EMPTY && gpr_abs_i64(d - c.median) <= 2 * lap) hi_used = d;  /* sorted */
  }
  for (uint32_t k = 0; k < n; k++) {  /* the least EMPTY sequence producers have not passed */
    int64_t d = diffs[k] >> 3;
    if ((diffs[k] & 7) == GPR_SLOT_EMPTY && gpr_abs_i64(d - c.median) <= 2 * lap && d > hi_used && d < lo_empty) lo_empty = d;
  }
  if (hi_used == INT64_MIN && lo_empty == INT64_MAX) return c;  /* nothing near the centre */
  c.hi_used = hi_used;
  /* Producers are at or before every EMPTY sequence they have not passed, and
   * past every occupied one (a sane hint may be further on). */
  int64_t past_used = gpr_abs_i64(c.median) <= 2 * lap && hi_used + 1 < 0 ? 0 : hi_used + 1;
  c.reset_base = (tail + (uint64_t)(lo_empty != INT64_MAX ? lo_empty : past_used)) & GPR_SEQ_MASK;
  c.restart = (tail + (uint64_t)(hi_used != INT64_MIN ? hi_used + 1 : lo_empty - lap)) & GPR_SEQ_MASK;
  return c;
}

/* Did nothing move while the consensus was read? Both hints and every word of
 * the window read again equal what it read. Only then is it one picture of the
 * ring: a sweeper that lost the CPU, or reads slowly, while producers went
 * round the ring a few times holds words from several laps, and on such a
 * picture healthy slots and hints look laps apart, that is, damaged (SPEC.md §7
 * step 2, "A still window"). A ring that moves is not stalled by what step 2
 * repairs; one that is, stands still, and its next sweep repairs it. */
GPR_INLINE int gpr_window_still(gpr_segment *seg, uint32_t from, uint32_t window, const uint64_t *words,
                                const gpr_slot_consensus *c) {
  if (__atomic_load_n(&seg->control->tail, __ATOMIC_ACQUIRE) != c->tail_hint ||
      __atomic_load_n(&seg->control->head, __ATOMIC_ACQUIRE) != c->head_hint)
    return 0;
  for (uint32_t k = 0; k < window; k++)
    if (gpr_slot_load(&seg->slots[(from + k) & seg->mask]) != words[k]) return 0;
  return 1;
}

/* Puts hint `h` (as the consensus read it) at `to` when it lies more than two
 * laps from the window's centre (a CAS from that value: a live store wins). */
GPR_INLINE int gpr_sweep_hint(gpr_segment *seg, uint64_t *hint, uint64_t h, const gpr_slot_consensus *c, uint64_t to) {
  uint64_t centre = (c->tail + (uint64_t)c->median) & GPR_SEQ_MASK;
  if (gpr_abs_i64(gpr_seq_diff(h & GPR_SEQ_MASK, centre)) <= 2 * (int64_t)seg->slot_count) return 0;
  return __atomic_compare_exchange_n(hint, &h, to & GPR_SEQ_MASK, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* The tail where producers resume; on a work-queue ring the head a lap
 * before that, so that a claim scan passes every READY frame within its
 * step bound (broadcast subscribers keep cursors of their own, §5.4). */
GPR_INLINE uint32_t gpr_sweep_hints(gpr_segment *seg, const gpr_slot_consensus *c) {
  uint32_t fixed = (uint32_t)gpr_sweep_hint(seg, &seg->control->tail, c->tail_hint, c, c->restart);
  if (!seg->broadcast)
    fixed += (uint32_t)gpr_sweep_hint(seg, &seg->control->head, c->head_hint, c, c->restart - seg->slot_count);
  if (fixed) {
    gpr_notify_space(seg);
    gpr_notify_data(seg);
  }
  return fixed;
}

/* An EMPTY slot serving a position before an occupied one: producers passed
 * it (a tail hint moved forward within a lap sends them past), so nobody will
 * fill it, consumers stop at it, and producers a lap on find it a lap behind.
 * Healthy, that is only a claim about to happen at a lower position than one
 * just made; moving the slot on costs that claim one position, never a frame. */
GPR_INLINE int gpr_word_passed(const gpr_slot_consensus *c, uint64_t w) {
  return gpr_word_state(w) == GPR_SLOT_EMPTY && gpr_seq_diff(gpr_word_seq(w), c->tail) < c->hi_used;
}

/* A word the protocol never writes (gpr_word_consistent), one nobody will
 * move (gpr_word_orphaned), one whose sequence is more than four laps from
 * the window's centre, or an EMPTY one producers passed
 * (gpr_word_passed) can only be damage. Nobody can CAS from the first kind,
 * nobody will from the second, and the others stall every scan, so each is
 * reset to EMPTY for a position producers have yet to reach. `w` is the word
 * the consensus read: judged on the same picture, and CAS'd from. */
GPR_INLINE int gpr_sweep_corrupt(gpr_segment *seg, uint64_t i, uint64_t w, const gpr_slot_consensus *c) {
  gpr_slot *s = &seg->slots[i];
  int64_t off = gpr_seq_diff(gpr_word_seq(w), c->tail) - c->median;
  if (gpr_word_consistent(seg, i, w) && !gpr_word_orphaned(seg, w) &&
      gpr_abs_i64(off) <= 4 * (int64_t)seg->slot_count && !gpr_word_passed(c, w))
    return 0;
  uint64_t next = (c->reset_base + ((i - c->reset_base) & seg->mask)) & GPR_SEQ_MASK;
  if (!gpr_slot_cas(s, w, gpr_slot_word(next, GPR_SLOT_EMPTY, 0))) return 0;
  gpr_notify_space(seg);
  return 1;
}

/* Step 2 over the window of slots at `from`: words and hints that can only
 * be damage are reset, judged on one still picture of the ring (scratch:
 * diffs[] and words[], `window` each); how many. */
GPR_INLINE uint32_t gpr_sweep_damage(gpr_segment *seg, uint32_t from, uint32_t window, int64_t *diffs, uint64_t *words) {
  gpr_slot_consensus c = gpr_sweep_consensus(seg, from, window, diffs, words);
  if (!gpr_window_still(seg, from, window, words, &c)) return 0;
  uint32_t reset = 0;
  for (uint32_t k = 0; k < window; k++) reset += (uint32_t)gpr_sweep_corrupt(seg, (from + k) & seg->mask, words[k], &c);
  return reset + gpr_sweep_hints(seg, &c);
}

/* Frees a DEAD entry nobody refers to: unlinks its arenas, then the entry.
 * One sweeper wins the entry first (DEAD -> FREEING naming its pid, by CAS), so
 * two sweepers never both free it: a slower one would otherwise clear the pid of
 * a process that attached to the entry in between. A FREEING entry whose freer
 * died is taken over the same way; every step of freeing is idempotent. */
GPR_INLINE int gpr_sweep_free(gpr_segment *seg, uint32_t index, uint64_t marked) {
  gpr_participant *p = &seg->participants[index];
  uint64_t w = marked;  /* the word its refs were counted for: any other, and it is not ours to free */
  uint64_t mine = gpr_pword(gpr_pgen(w), (uint32_t)getpid(), GPR_PARTICIPANT_FREEING);
  if (!__atomic_compare_exchange_n(&p->state, &w, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 0;
  uint32_t arenas = __atomic_load_n(&p->arena_count, __ATOMIC_ACQUIRE);
  if (arenas > GPR_MAX_ARENAS) arenas = GPR_MAX_ARENAS;
  for (uint32_t a = 0; a < arenas; a++) {
    char name[GPR_SHM_NAME_MAX];
    gpr_arena_shm_name(seg->name, index, gpr_pgen(w), a, name);
    shm_unlink(name);
  }
  gpr_doorbell_clear(seg, index, GPR_BELL_ALL);
  if (seg->broadcast) gpr_bc_leave(seg, index);  /* only while FREEING: nobody can attach and subscribe here */
  __atomic_store_n(&p->doorbell_key, 0u, __ATOMIC_RELAXED);
  __atomic_store_n(&p->doorbell_pipe_ino, 0u, __ATOMIC_RELAXED);
  __atomic_store_n(&p->pid, 0u, __ATOMIC_RELEASE);
  return __atomic_compare_exchange_n(&p->state, &mine, gpr_pword(gpr_pgen(w), 0, GPR_PARTICIPANT_FREE), 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Slot words one sweep checks for damage, round robin: a sweep costs the same
 * on a ring of 2^20 slots as on one of 4096 (waiting consumers sweep every few
 * hundred ms), and damage anywhere is found within slot_count / 4096 sweeps. */
#define GPR_SWEEP_DAMAGE_WINDOW 4096u

/* Finds dead participants and repairs everything they held. Safe to run from
 * any participant, concurrently, as often as wanted; costs one pass over the
 * participant table and a window of slots, and a pass over every slot only
 * when a participant is dead. */
GPR_INLINE int gpr_sweep(gpr_segment *seg, gpr_sweep_report *rep, gpr_error *err) {
  gpr_sweep_report local;
  if (!rep) rep = &local;
  memset(rep, 0, sizeof *rep);
  uint64_t *dead = (uint64_t *)calloc(seg->participant_capacity, sizeof *dead);
  uint32_t *refs = (uint32_t *)calloc(seg->participant_capacity, sizeof(uint32_t));
  uint32_t window = seg->slot_count < GPR_SWEEP_DAMAGE_WINDOW ? seg->slot_count : GPR_SWEEP_DAMAGE_WINDOW;
  int64_t *diffs = (int64_t *)malloc(window * sizeof(int64_t));
  uint64_t *words = (uint64_t *)malloc(window * sizeof(uint64_t));
  if (!dead || !refs || !diffs || !words) {
    free(dead);
    free(refs);
    free(diffs);
    free(words);
    return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "sweep: out of memory");
  }
  gpr_sweep_mark(seg, dead, rep);
  int any = 0;
  for (uint32_t i = 0; i < seg->participant_capacity; i++) any |= dead[i] != 0;
  uint32_t from = __atomic_fetch_add(&seg->damage_cursor, window, __ATOMIC_RELAXED);
  rep->corrupt += gpr_sweep_damage(seg, from, window, diffs, words);
  for (uint32_t k = 0; k < window; k++) rep->recycled += gpr_sweep_orphan(seg, (from + k) & seg->mask);
  if (any) {
    gpr_sweep_owners(seg, dead, refs, rep);
    for (uint32_t i = 0; i < seg->participant_capacity; i++)
      if (dead[i] && refs[i] == 0 && gpr_sweep_free(seg, i, dead[i])) rep->freed++;
  } else if (seg->broadcast) {
    rep->released += gpr_bc_sweep_window(seg, from, window);
  }
  uint32_t repaired = rep->skipped + rep->redelivered + rep->released + rep->recycled + rep->corrupt;
  if (repaired) __atomic_fetch_add(&seg->control->recovered, repaired, __ATOMIC_RELAXED);
  free(dead);
  free(refs);
  free(diffs);
  free(words);
  return 0;
}

/* Leaves the segment: frames this participant had taken are handed back or
 * released as if it had died, and its arenas go once nothing refers to them. */
GPR_INLINE int gpr_participant_detach(gpr_segment *seg, uint32_t index, uint32_t gen,
                                      gpr_error *err) {
  gpr_participant *p = &seg->participants[index];
  uint64_t w = gpr_pword(gen, 0, GPR_PARTICIPANT_ACTIVE);
  uint64_t dw = gpr_pword(gen, 0, GPR_PARTICIPANT_DEAD);
  /* An entry taken from us (§4) may be someone else's now: its bells are not ours to clear. */
  if (!gpr_participant_held(seg, index, gen)) return gpr_fail_detached(seg, err);
  gpr_doorbell_clear(seg, index, GPR_BELL_ALL);
  if (!__atomic_compare_exchange_n(&p->state, &w, dw, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return gpr_fail_detached(seg, err);
  return gpr_sweep(seg, NULL, err);
}

#define GPR_SWEEP_INTERVAL_NS 100000000ull

/* Sweeps, and releases a broadcast subscriber's stray shares, when this
 * mapping's sweep is due: every 100 ms, counted across calls
 * (gpr_segment.sweep_due_ns), so that a caller waiting 50 ms at a time, over
 * and over, still sweeps (it never did when each wait counted its own).
 * Returns when the next sweep is due. */
GPR_INLINE uint64_t gpr_sweep_if_due(gpr_segment *seg, uint64_t now) {
  uint64_t due = __atomic_load_n(&seg->sweep_due_ns, __ATOMIC_RELAXED);
  if (due == 0) __atomic_store_n(&seg->sweep_due_ns, due = now + GPR_SWEEP_INTERVAL_NS, __ATOMIC_RELAXED);
  if (now >= due) {
    gpr_sweep(seg, NULL, NULL);
    gpr_bc_release_strays(seg, seg->attached_index);  /* a broadcast subscriber's own repair; else nothing */
    __atomic_store_n(&seg->sweep_due_ns, due = now + GPR_SWEEP_INTERVAL_NS, __ATOMIC_RELAXED);
  }
  return due;
}

/* One attempt, with no wait (a timeout of 0): when it finds nothing (`again`),
 * a sweep if one is due. A caller that only ever tries never waits, so without
 * this nobody in its process would repair the dead peer's slot it is stuck
 * behind. */
GPR_INLINE int gpr_try_sweeping(gpr_segment *seg, int (*attempt)(void *), void *ctx, int again) {
  int rc = attempt(ctx);
  if (rc == again) gpr_sweep_if_due(seg, gpr_monotonic_ns());
  return rc;
}

/* gpr_wait_for for a whole timeout (< 0: forever), sweeping when due
 * (gpr_sweep_if_due): a peer that died holding what we wait for (a lease, a
 * slot) is only noticed by a sweep, and nobody else may be running one. */
GPR_INLINE int gpr_wait_sweeping(gpr_segment *seg, uint32_t *seq, uint32_t *waiters,
                                 int (*attempt)(void *), void *ctx, int again, int64_t timeout_ms) {
  uint64_t start = gpr_monotonic_ns();
  uint64_t total = timeout_ms < 0 ? UINT64_MAX : (uint64_t)timeout_ms * 1000000ull;
  for (uint32_t spins = 64u;; spins = 0) {
    uint64_t now = gpr_monotonic_ns();
    uint64_t due = gpr_sweep_if_due(seg, now);
    uint64_t waited = now - start, left = waited >= total ? 0 : total - waited, slice = due - now;
    int rc = gpr_wait_for(seq, waiters, attempt, ctx, again, left < slice ? left : slice, spins);
    if (rc != -(int)GPR_E_TIMEOUT || left <= slice) return rc;
  }
}
