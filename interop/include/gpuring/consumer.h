/* gpuring/consumer.h: a consumer, the whole receiving side in a few calls.
 *
 *   gpr_consumer *c;
 *   gpr_consumer_open("frames", 0, &c, &err);
 *   gpr_frame *f;
 *   gpr_consumer_next(c, -1, &f, &err);                  wait for a frame
 *   ... f->desc describes it; gpr_frame_host_buffer(f, i, &ptr, &err) maps
 *       host buffer i in place; device buffers: gpuring/cuda.h ...
 *   gpr_frame_release(f);                                the producer may reuse it
 *   gpr_consumer_close(c);
 *
 * Validation. next() copies the slot's reference and the whole body out of
 * shared memory and validates the copy (SPEC.md §8.2) before handing it over.
 * A damaged frame is released at once and next() fails with its code; the
 * ring moves on. gpr_frame_host_buffer checks the arena and the bounds of the
 * one buffer it maps.
 *
 * Lifetime. A frame is leased from next() until its last reference is
 * dropped: gpr_frame_release drops the caller's, and each Arrow export
 * (gpuring/arrow_export.h) holds one until its release callback runs. After
 * the lease ends the producer may overwrite the buffers: copy what you keep.
 * Pointers from gpr_frame_host_buffer stay mapped while the frame lives.
 * gpr_consumer_close leaves the ring at once, releasing the leases still held;
 * frames and exports still alive after it stay readable (their arenas stay
 * mapped until the last one is gone) but no longer protect their memory.
 *
 * Broadcast rings (SPEC.md §5.4). A consumer is a subscriber: it receives every
 * frame published while it is attached, in publication order. When it falls a
 * ring behind, producers do what it asked at open (on_slow): wait for it, drop
 * the oldest frame for it, or evict it. next() then fails once with
 * FRAMES_MISSED or EVICTED, gpr_consumer_missed() says how many frames it lost,
 * before it hands over any frame published after them, and the next call goes
 * on with the frames published since.
 *
 * Threads. next() is for one thread at a time; frames may be released and
 * buffers mapped from any thread. Included by gpuring.h. */

#include <pthread.h>

typedef struct gpr_mapped_arena {
  char name[GPR_SHM_NAME_MAX];
  gpr_arena_view view;
} gpr_mapped_arena;

typedef struct gpr_consumer_options {
  uint32_t open_timeout_ms;      /* wait for a creator to finish; 0 = 1000 */
  uint32_t on_slow;              /* broadcast rings: gpr_on_slow (0: GPR_ON_SLOW_BLOCK) */
  uint32_t from_oldest;          /* broadcast rings: 1 = also the frames still in the ring when it joins */
} gpr_consumer_options;

typedef struct gpr_consumer {
  gpr_segment seg;
  uint32_t index;
  uint32_t gen;
  uint32_t on_slow;              /* broadcast rings: what producers do when it falls behind */
  uint64_t missed;               /* frames lost, as the last FRAMES_MISSED or EVICTED said */
  pthread_mutex_t mu;            /* guards everything below */
  uint32_t refs;                 /* 1 for the open consumer + 1 per live frame */
  int closed;
  gpr_mapped_arena *arenas;
  uint32_t arena_count;
  uint32_t arena_capacity;
  uint64_t forget_due_ns;        /* when next to let go of removed arenas (gpr_consumer_forget_removed) */
} gpr_consumer;

typedef struct gpr_frame {
  gpr_consumer *consumer;
  uint64_t frame_id;
  uint64_t user_tag;
  uint32_t producer;             /* participant index of the producer */
  uint32_t producer_gen;         /* and its generation: (producer, producer_gen) names it */
  uint64_t pos;                  /* ring position (for diagnostics) */
  gpr_frame_desc desc;           /* points into `body` and `nodes` */
  gpr_node_desc *nodes;
  uint8_t *body;                 /* private copy of the frame body */
  uint32_t refs;
} gpr_frame;

GPR_INLINE int gpr_consumer_open_with(const char *name, const gpr_consumer_options *o, gpr_consumer **out,
                                      gpr_error *err) {
  uint32_t on_slow = o ? o->on_slow : (uint32_t)GPR_ON_SLOW_BLOCK;
  if (on_slow > GPR_ON_SLOW_EVICT)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "on_slow must be GPR_ON_SLOW_BLOCK, _DROP_OLDEST or _EVICT");
  gpr_consumer *c = (gpr_consumer *)calloc(1, sizeof *c);
  if (!c) return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "consumer: out of memory");
  int rc = gpr_segment_join(&c->seg, name, o ? o->open_timeout_ms : 0u, GPR_ROLE_CONSUMER, &c->index, &c->gen, err);
  if (rc != 0) {
    free(c);
    return rc;
  }
  pthread_mutex_init(&c->mu, NULL);
  c->refs = 1;
  c->on_slow = on_slow;
  gpr_sweep(&c->seg, NULL, NULL);
  if (c->seg.broadcast) gpr_bc_join(&c->seg, c->index, on_slow, o && o->from_oldest);
  *out = c;
  return 0;
}

GPR_INLINE int gpr_consumer_open(const char *name, uint32_t open_timeout_ms, gpr_consumer **out,
                                 gpr_error *err) {
  gpr_consumer_options o = {open_timeout_ms, GPR_ON_SLOW_BLOCK, 0};
  return gpr_consumer_open_with(name, &o, out, err);
}

/* Frames this consumer lost, as the last FRAMES_MISSED or EVICTED from next() said. */
GPR_INLINE uint64_t gpr_consumer_missed(const gpr_consumer *c) { return c->missed; }

/* A broadcast subscriber learns what producers did while it lagged: one error,
 * with the count, then it goes on with the frames published since. */
GPR_INLINE int gpr_consumer_report_missed(gpr_consumer *c, int rc, gpr_error *err) {
  c->missed = gpr_bc_take_missed(&c->seg, c->index);
  if (rc == -(int)GPR_E_FRAMES_MISSED)
    return gpr_fail(err, GPR_E_FRAMES_MISSED, 0, "%llu frames of ring '%s' were dropped before this consumer took them (on_slow: drop-oldest)",
                    (unsigned long long)c->missed, c->seg.name);
  gpr_bc_subscribe(&c->seg, c->index, c->on_slow, 0);
  return gpr_fail(err, GPR_E_EVICTED, 0, "this consumer fell a ring behind and was evicted from ring '%s', losing %llu frames; it goes on with the frames published since",
                  c->seg.name, (unsigned long long)c->missed);
}

/* Drops one reference; the last one unmaps everything. Called with mu held. */
GPR_INLINE void gpr_consumer_unref_locked(gpr_consumer *c) {
  if (--c->refs > 0) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  for (uint32_t i = 0; i < c->arena_count; i++) gpr_arena_view_close(&c->arenas[i].view);
  free(c->arenas);
  gpr_segment_close(&c->seg);
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* Whether a slot holds a frame that may be read from producer `index`'s
 * arenas: READY (its owner), CLAIMED or LEASED (its reference's producer), of
 * any generation. */
GPR_INLINE int gpr_ring_refers_to(const gpr_segment *seg, uint32_t index) {
  for (uint64_t i = 0; i < seg->slot_count; i++) {
    const gpr_slot *s = &seg->slots[i];
    uint64_t w = gpr_slot_load(s);
    uint32_t st = gpr_word_state(w);
    uint32_t producer = st == GPR_SLOT_READY ? gpr_word_owner(w)
                        : st == GPR_SLOT_CLAIMED || st == GPR_SLOT_LEASED ? s->ref.producer + 1u
                                                                          : 0u;
    if (producer == index + 1u) return 1;
  }
  return 0;
}

/* Whether no frame can refer to arena NAME any more (SPEC.md §9): the entry
 * no longer holds its producer alive with that generation and its file is
 * gone, which happens only once no slot refers to the producer (§4 Free).
 * The slots are looked at too: a producer that lost its entry to damage
 * removes its arenas at once, under frames still held. */
GPR_INLINE int gpr_arena_removed(const gpr_segment *seg, const char *name) {
  uint32_t index, gen, arena;
  if (gpr_arena_name_parse(seg, name, &index, &gen, &arena) != 0 || index >= seg->participant_capacity ||
      gpr_publisher_live(seg, index, gen))
    return 0;
  int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
  if (fd >= 0) close(fd);
  return fd < 0 && errno == ENOENT && !gpr_ring_refers_to(seg, index);
}

/* Unmaps the arenas no frame can refer to any more, once per sweep interval:
 * a consumer that stays open while producers come and go would otherwise keep
 * every departed producer's arenas allocated in /dev/shm. Only while it holds
 * no frame: a pointer into a frame's buffers must stay readable until the
 * frame's release, even where damage removed its arena early. */
GPR_INLINE void gpr_consumer_forget_removed(gpr_consumer *c, uint64_t now) {
  if (now < c->forget_due_ns) return;
  pthread_mutex_lock(&c->mu);
  if (c->refs > 1) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->forget_due_ns = now + GPR_SWEEP_INTERVAL_NS;
  for (uint32_t i = 0; i < c->arena_count;) {
    if (!gpr_arena_removed(&c->seg, c->arenas[i].name)) {
      i++;
      continue;
    }
    gpr_arena_view_close(&c->arenas[i].view);
    c->arenas[i] = c->arenas[--c->arena_count];
  }
  pthread_mutex_unlock(&c->mu);
}

/* Copies the body a reference names out of its arena. */
GPR_INLINE int gpr_consumer_copy_body(gpr_consumer *c, const gpr_frame_ref *ref, uint8_t **out,
                                      gpr_error *err);

/* What gpr_consumer_hand_over returns when the claim was taken back before
 * the hand-over (SPEC.md §5.2, Confirm): a sweeper that judged a previous
 * occupant of this entry dead, stalled between its check and its CAS, found
 * our claim at the same position. The frame is READY again, for any consumer;
 * handing it over too would deliver it twice. */
#define GPR_CLAIM_TAKEN_BACK 1

/* Claims, copies and validates; on a bad frame releases it and fails. */
GPR_INLINE int gpr_consumer_hand_over(gpr_consumer *c, uint64_t pos, const gpr_frame_ref *ref,
                                      gpr_frame **out, gpr_error *err) {
  gpr_frame *f = (gpr_frame *)calloc(1, sizeof *f);
  int rc = f ? gpr_consumer_copy_body(c, ref, &f->body, err)
             : gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "consumer: out of memory");
  gpr_body_view view;
  memset(&view, 0, sizeof view);
  if (rc == 0) rc = gpr_body_validate(f->body, ref->body_length, &view, err);
  if (rc == 0) {
    f->nodes = (gpr_node_desc *)calloc(view.header->node_count + 1u, sizeof *f->nodes);
    if (!f->nodes) rc = gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "consumer: out of memory");
  }
  if (rc != 0) {
    gpr_ring_release_as(&c->seg, c->index, pos, GPR_SLOT_CLAIMED);
    if (f) free(f->body);
    free(f);
    return rc;
  }
  if (gpr_ring_confirm(&c->seg, c->index, pos) != 0) {
    free(f->nodes);
    free(f->body);
    free(f);
    return GPR_CLAIM_TAKEN_BACK;
  }
  gpr_body_describe(&view, f->nodes, &f->desc);
  f->consumer = c;
  f->frame_id = ref->frame_id;
  f->user_tag = ref->user_tag;
  f->producer = ref->producer;
  f->producer_gen = ref->producer_gen;
  f->pos = pos;
  f->refs = 1;
  pthread_mutex_lock(&c->mu);
  c->refs++;
  pthread_mutex_unlock(&c->mu);
  *out = f;
  return 0;
}

typedef struct gpr_claim_attempt {
  gpr_consumer *c;
  gpr_frame_ref ref;
  uint64_t pos;
} gpr_claim_attempt;

GPR_INLINE int gpr_consumer_try_claim(void *ctx) {
  gpr_claim_attempt *a = (gpr_claim_attempt *)ctx;
  if (!gpr_participant_held(&a->c->seg, a->c->index, a->c->gen)) return -(int)GPR_E_DETACHED;
  return gpr_ring_try_claim(&a->c->seg, a->c->index, &a->ref, &a->pos);
}

/* The error for what a claim that waited up to timeout_ms came to (rc), or rc. */
GPR_INLINE int gpr_consumer_claim_error(gpr_consumer *c, int rc, int64_t timeout_ms, gpr_error *err) {
  if (rc == -(int)GPR_E_RING_EMPTY)
    return gpr_fail(err, GPR_E_RING_EMPTY, 0, "no frame is ready in ring '%s'", c->seg.name);
  if (rc == -(int)GPR_E_DETACHED) return gpr_fail_detached(&c->seg, err);
  if (rc == -(int)GPR_E_FRAMES_MISSED || rc == -(int)GPR_E_EVICTED) return gpr_consumer_report_missed(c, rc, err);
  if (rc == -(int)GPR_E_TIMEOUT)
    return gpr_fail(err, GPR_E_TIMEOUT, 0, "no frame arrived within %lld ms", (long long)timeout_ms);
  return rc;
}

/* Claims one frame, waiting up to timeout_ms as gpr_consumer_next does: 0, or
 * the negative code of what it found (gpr_consumer_claim_error words it). */
GPR_INLINE int gpr_consumer_claim(gpr_consumer *c, int64_t timeout_ms, gpr_claim_attempt *a) {
  return timeout_ms == 0 ? gpr_try_sweeping(&c->seg, gpr_consumer_try_claim, a, -(int)GPR_E_RING_EMPTY)
                         : gpr_wait_sweeping(&c->seg, &c->seg.control->data_seq, &c->seg.control->data_waiters,
                                             gpr_consumer_try_claim, a, -(int)GPR_E_RING_EMPTY, timeout_ms);
}

/* Takes the next frame, waiting up to timeout_ms (< 0 forever; 0: fail with
 * RING_EMPTY at once when none is ready; otherwise TIMEOUT). A claim taken
 * back before the hand-over is not the caller's concern: it claims again,
 * within what is left of the timeout (with 0 it reports RING_EMPTY: a process
 * that took back every claim would otherwise hold the call). */
GPR_INLINE int gpr_consumer_next(gpr_consumer *c, int64_t timeout_ms, gpr_frame **out,
                                 gpr_error *err) {
  if (c->closed) return gpr_fail(err, GPR_E_CLOSED, 0, "the consumer is closed");
  uint64_t start = gpr_monotonic_ns();
  gpr_consumer_forget_removed(c, start);
  uint64_t deadline = timeout_ms > 0 ? start + (uint64_t)timeout_ms * 1000000u : 0;
  for (int64_t left = timeout_ms;;) {
    gpr_claim_attempt a;
    memset(&a, 0, sizeof a);
    a.c = c;
    int rc = gpr_consumer_claim(c, left, &a);
    if (rc == 0) rc = gpr_consumer_hand_over(c, a.pos, &a.ref, out, err);
    if (rc != GPR_CLAIM_TAKEN_BACK) return gpr_consumer_claim_error(c, rc, timeout_ms, err);
    uint64_t now = gpr_monotonic_ns();
    if (timeout_ms == 0) return gpr_consumer_claim_error(c, -(int)GPR_E_RING_EMPTY, timeout_ms, err);
    if (timeout_ms > 0 && now >= deadline) return gpr_consumer_claim_error(c, -(int)GPR_E_TIMEOUT, timeout_ms, err);
    if (timeout_ms > 0) left = (int64_t)((deadline - now + 999999u) / 1000000u);
  }
}

/* The mapping of arena NAME, opened on first use. Called with mu held. */
GPR_INLINE int gpr_consumer_arena_locked(gpr_consumer *c, const char *name,
                                         const gpr_arena_view **out, gpr_error *err) {
  for (uint32_t i = 0; i < c->arena_count; i++)
    if (strcmp(c->arenas[i].name, name) == 0) {
      *out = &c->arenas[i].view;
      return 0;
    }
  if (c->arena_count == c->arena_capacity) {
    uint32_t cap = c->arena_capacity ? c->arena_capacity * 2u : 8u;
    void *grown = realloc(c->arenas, cap * sizeof *c->arenas);
    if (!grown) return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "consumer: out of memory");
    c->arenas = (gpr_mapped_arena *)grown;
    c->arena_capacity = cap;
  }
  gpr_mapped_arena *m = &c->arenas[c->arena_count];
  int rc = gpr_arena_open(&c->seg, name, &m->view, err);
  if (rc != 0) return rc;
  snprintf(m->name, sizeof m->name, "%s", name);
  c->arena_count++;
  *out = &m->view;
  return 0;
}

/* Maps `length` bytes at `offset` of arena NAME, checking the bounds. */
GPR_INLINE int gpr_consumer_map(gpr_consumer *c, const char *name, uint64_t offset,
                                uint64_t length, const uint8_t **out, gpr_error *err) {
  const gpr_arena_view *v = NULL;
  pthread_mutex_lock(&c->mu);
  int rc = gpr_consumer_arena_locked(c, name, &v, err);
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) return rc;
  if (!gpr_range_ok(offset, length, v->size))
    return gpr_fail(err, GPR_E_FRAME_BOUNDS, 0, "[%llu, +%llu) lies outside arena %s (%llu bytes)",
                    (unsigned long long)offset, (unsigned long long)length, name,
                    (unsigned long long)v->size);
  *out = v->base + offset;
  return 0;
}

GPR_INLINE int gpr_consumer_copy_body(gpr_consumer *c, const gpr_frame_ref *ref, uint8_t **out,
                                      gpr_error *err) {
  if (ref->producer >= c->seg.participant_capacity || ref->body_arena >= GPR_MAX_ARENAS ||
      ref->body_length < sizeof(gpr_body_header) || ref->body_length > GPR_MAX_BODY_BYTES)
    return gpr_fail(err, GPR_E_FRAME_INVALID, 0,
                    "frame record is malformed (producer %u, arena %u, %u bytes)", ref->producer,
                    ref->body_arena, ref->body_length);
  char name[GPR_SHM_NAME_MAX];
  gpr_arena_shm_name(c->seg.name, ref->producer, ref->producer_gen, ref->body_arena, name);
  const uint8_t *src = NULL;
  int rc = gpr_consumer_map(c, name, ref->body_offset, ref->body_length, &src, err);
  if (rc != 0) return rc;
  *out = (uint8_t *)malloc(ref->body_length);
  if (!*out) return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "consumer: out of memory");
  memcpy(*out, src, ref->body_length);
  return 0;
}

/* Host buffer `b` of a frame, mapped in place: *out is NULL for an absent
 * buffer, UNSUPPORTED for device memory (see gpuring/cuda.h). */
GPR_INLINE int gpr_frame_host_buffer(const gpr_frame *f, uint32_t b, const uint8_t **out,
                                     gpr_error *err) {
  *out = NULL;
  if (b >= f->desc.buffer_count)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "the frame has %u buffers, not %u",
                    f->desc.buffer_count, b + 1u);
  const gpr_body_buffer *buf = &f->desc.buffers[b];
  if (buf->kind == GPR_MEM_ABSENT) return 0;
  if (buf->kind != GPR_MEM_HOST)
    return gpr_fail(err, GPR_E_UNSUPPORTED, 0, "buffer %u is device memory, not host memory", b);
  return gpr_consumer_map(f->consumer, (const char *)buf->handle, buf->offset, buf->length, out,
                          err);
}

/* Another reference to a frame (for code that hands it on). */
GPR_INLINE gpr_frame *gpr_frame_retain(gpr_frame *f) {
  __atomic_fetch_add(&f->refs, 1u, __ATOMIC_RELAXED);
  return f;
}

/* Drops a reference; the last one ends the lease. */
GPR_INLINE void gpr_frame_release(gpr_frame *f) {
  if (!f || __atomic_sub_fetch(&f->refs, 1u, __ATOMIC_ACQ_REL) != 0) return;
  gpr_consumer *c = f->consumer;
  pthread_mutex_lock(&c->mu);
  if (!c->closed) gpr_ring_release(&c->seg, c->index, f->pos);
  free(f->nodes);
  free(f->body);
  free(f);
  gpr_consumer_unref_locked(c);
}

/* Leaves the ring; leases still held end here (see Lifetime above). */
GPR_INLINE void gpr_consumer_close(gpr_consumer *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  if (c->closed) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->closed = 1;
  gpr_participant_detach(&c->seg, c->index, c->gen, NULL);
  gpr_consumer_unref_locked(c);
}
