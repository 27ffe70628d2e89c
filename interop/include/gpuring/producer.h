/* gpuring/producer.h: a producer, the whole publishing side in a few calls.
 *
 *   gpr_producer *p;
 *   gpr_producer_open("frames", NULL, &p, &err);
 *   gpr_producer_alloc(p, bytes, &alloc, &err);          host column memory
 *   ... fill alloc.ptr, describe the columns (gpr_producer_host_buffer) ...
 *   gpr_producer_publish(p, &desc, &opts, &frame_id, &err);
 *   gpr_producer_drain(p, -1, &err);                     until every frame is released
 *   gpr_producer_close(p);
 *
 * Ownership. An allocation is the caller's until it is passed in
 * gpr_publish_options.owned to a publish that succeeds; from then on it belongs
 * to the frame and is freed when the frame is released (SPEC.md §10). If the
 * publish fails, the allocations are still the caller's. Device memory is never
 * owned by gpuring: the caller keeps it unchanged until `on_release` fires for
 * the frame, which happens inside gpr_producer_reap, _publish, _drain or _alloc
 * on the calling thread, never on another. An on_release may publish on the
 * same producer. Publish and alloc reap in order: a frame released behind one
 * still held is reported by the next gpr_producer_reap or _drain, or by
 * publishing within max(128, frames in flight) publishes.
 *
 * Ordering. Frames are published in call order; `frame_id`s are dense from 1.
 * A producer is for one thread at a time. Included by gpuring.h. */

typedef void (*gpr_release_fn)(void *context, uint64_t frame_id);

typedef struct gpr_producer_options {
  uint64_t arena_size;           /* bytes per host arena; 0: from GPR_ARENA_FIRST_SIZE, doubling up to GPR_ARENA_DEFAULT_SIZE */
  uint32_t open_timeout_ms;      /* wait for a creator to finish; 0 = 1000 */
} gpr_producer_options;

typedef struct gpr_publish_options {
  uint64_t user_tag;             /* carried to the consumer untouched */
  int64_t timeout_ms;            /* wait for a free slot: < 0 forever, 0 not at all */
  const gpr_allocation *owned;   /* host allocations the frame takes over */
  uint32_t owned_count;
  gpr_release_fn on_release;     /* optional: the consumer released the frame */
  void *context;                 /* passed to on_release */
} gpr_publish_options;

typedef struct gpr_inflight_frame {
  uint64_t pos;
  uint64_t frame_id;
  gpr_allocation *allocs;        /* the body first, then the owned allocations */
  uint32_t alloc_count;
  gpr_release_fn on_release;
  void *context;
} gpr_inflight_frame;

typedef struct gpr_producer {
  gpr_segment seg;
  uint32_t index;
  uint32_t gen;
  gpr_arena_pool pool;           /* points at seg: a producer never moves (heap only) */
  uint64_t next_frame_id;
  gpr_inflight_frame *inflight;  /* a circular queue in publish order: see gpr_producer_inflight_at */
  uint32_t inflight_head;        /* index in `inflight` of the oldest frame */
  uint32_t inflight_count;
  uint32_t inflight_capacity;    /* 0 or a power of two */
  uint32_t full_reap_in;         /* publishes before publishing reaps every frame in flight again */
  int channel_fd;                /* descriptor channel listener (SPEC.md §9c), -1 until served */
  pthread_t channel_thread;
  gpr_channel_lookup channel_lookup;
  void *channel_context;
  uint32_t heads_up;             /* entry the pending heads-up reached, or GPR_RUNG_NOBODY */
  uint64_t heads_up_ns;          /* CLOCK_MONOTONIC when it reached that entry */
  uint64_t published_ns;         /* CLOCK_MONOTONIC as the last publish ended (gpr_producer_yield_to_woken) */
  char arena_prefix[GPR_SHM_NAME_MAX]; /* "/gpuring.SEG.pIgG.a": its arenas' names without the number */
  uint32_t arena_prefix_len;
} gpr_producer;

/* Arena 0's name without its "0": every arena name of the producer starts
 * with it. Made once, at open. */
GPR_INLINE void gpr_producer_make_arena_prefix(gpr_producer *p) {
  gpr_arena_shm_name(p->seg.name, p->index, p->gen, 0, p->arena_prefix);
  p->arena_prefix_len = (uint32_t)strlen(p->arena_prefix) - 1u;
}

/* Attaches to ring NAME (created beforehand with gpr_segment_create) and sweeps
 * away what crashed participants left. */
GPR_INLINE int gpr_producer_open(const char *name, const gpr_producer_options *opt,
                                 gpr_producer **out, gpr_error *err) {
  gpr_producer *p = (gpr_producer *)calloc(1, sizeof *p);
  if (!p) return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "producer: out of memory");
  int rc = gpr_segment_join(&p->seg, name, opt ? opt->open_timeout_ms : 0u, GPR_ROLE_PRODUCER, &p->index, &p->gen, err);
  if (rc != 0) {
    free(p);
    return rc;
  }
  gpr_arena_pool_init(&p->pool, &p->seg, p->index, p->gen, opt ? opt->arena_size : 0u);
  p->next_frame_id = 1;
  p->channel_fd = -1;
  p->heads_up = GPR_RUNG_NOBODY;
  gpr_producer_make_arena_prefix(p); /* every publish with host buffers uses it */
  gpr_sweep(&p->seg, NULL, NULL);
  *out = p;
  return 0;
}

/* The `i`-th oldest frame in flight (i < inflight_count). */
GPR_INLINE gpr_inflight_frame *gpr_producer_inflight_at(gpr_producer *p, uint32_t i) {
  return &p->inflight[(p->inflight_head + i) & (p->inflight_capacity - 1u)];
}

/* Frees a reaped frame's memory and reports it. */
GPR_INLINE void gpr_producer_retire(gpr_producer *p, const gpr_inflight_frame *f) {
  for (uint32_t a = 0; a < f->alloc_count; a++) gpr_arena_free(&p->pool, &f->allocs[a]);
  free(f->allocs);
  if (f->on_release) f->on_release(f->context, f->frame_id);
}

/* Takes the `i`-th oldest frame out of the queue, keeping the order: the
 * frames older than it (typically few: those still held) move up one place. */
GPR_INLINE gpr_inflight_frame gpr_producer_remove(gpr_producer *p, uint32_t i) {
  gpr_inflight_frame f = *gpr_producer_inflight_at(p, i);
  for (uint32_t j = i; j > 0; j--) *gpr_producer_inflight_at(p, j) = *gpr_producer_inflight_at(p, j - 1u);
  p->inflight_head = (p->inflight_head + 1u) & (p->inflight_capacity - 1u);
  p->inflight_count--;
  return f;
}

/* Frees the memory of released frames and calls their on_release; returns how
 * many. Looks at every frame in flight. Each on_release runs with the queue
 * consistent, so it may publish on this producer. */
GPR_INLINE uint32_t gpr_producer_reap(gpr_producer *p) {
  uint32_t reaped = 0;
  for (uint32_t i = 0; i < p->inflight_count;) {
    if (!gpr_ring_reap(&p->seg, p->index, gpr_producer_inflight_at(p, i)->pos)) {
      i++;
      continue;
    }
    gpr_inflight_frame f = gpr_producer_remove(p, i);
    gpr_producer_retire(p, &f);
    reaped++;
  }
  p->full_reap_in = p->inflight_count > 128u ? p->inflight_count : 128u;
  gpr_arena_pool_restore_headers(&p->pool);
  return reaped;
}

/* Reaps from the oldest frame on, up to the first still in flight: every frame
 * that can give the ring space (slots come free in order), in time
 * proportional to the frames reaped, not to the frames in flight. */
GPR_INLINE uint32_t gpr_producer_reap_oldest(gpr_producer *p) {
  uint32_t reaped = 0;
  while (p->inflight_count > 0 && gpr_ring_reap(&p->seg, p->index, gpr_producer_inflight_at(p, 0)->pos)) {
    gpr_inflight_frame f = gpr_producer_remove(p, 0);
    gpr_producer_retire(p, &f);
    reaped++;
  }
  return reaped;
}

/* What publish and alloc reap: the oldest frames in order, and all of them
 * once per max(128, frames in flight after the last full pass) publishes, so
 * that a frame released behind one still held is freed and reported within
 * that many publishes, at about one slot load per publish. A full pass on
 * every call cost O(queue depth): 1,024 slot loads per publish into a full
 * 1,024-slot ring, most of them cache misses on slots a consumer had just
 * written. */
GPR_INLINE void gpr_producer_reap_due(gpr_producer *p) {
  if (p->full_reap_in == 0)
    gpr_producer_reap(p);
  else
    gpr_producer_reap_oldest(p);
}

/* Host column memory in this producer's arenas, 64-byte aligned. When shared
 * memory is short, frames released behind one still held may be what fills
 * it: every released frame is reclaimed and the allocation tried once more. */
GPR_INLINE int gpr_producer_alloc(gpr_producer *p, uint64_t bytes, gpr_allocation *out,
                                  gpr_error *err) {
  gpr_producer_reap_due(p);
  int rc = gpr_arena_alloc(&p->pool, bytes, out, err);
  if ((rc == -(int)GPR_E_NO_SPACE || rc == -(int)GPR_E_OUT_OF_MEMORY) && gpr_producer_reap(p) > 0)
    rc = gpr_arena_alloc(&p->pool, bytes, out, err);
  return rc;
}

/* Gives back an allocation no published frame owns. */
GPR_INLINE void gpr_producer_free(gpr_producer *p, const gpr_allocation *alloc) {
  gpr_arena_free(&p->pool, alloc);
}

/* The name gpr_arena_shm_name gives arena `arena` of this producer, built from
 * the prefix made once at open: its snprintf cost more than the rest of
 * describing a buffer on every publish. */
GPR_INLINE void gpr_producer_arena_name(const gpr_producer *p, uint32_t arena,
                                        uint8_t out[GPR_HANDLE_BYTES]) {
  char digits[10];
  uint32_t n = 0, number = arena;
  do digits[n++] = (char)('0' + arena % 10u);
  while ((arena /= 10u) != 0);
  if (p->arena_prefix_len + n >= GPR_HANDLE_BYTES) { /* only the longest names: truncate as it does */
    gpr_arena_shm_name(p->seg.name, p->index, p->gen, number, (char *)out);
    return;
  }
  memcpy(out, p->arena_prefix, p->arena_prefix_len);
  for (uint32_t i = 0; i < n; i++) out[p->arena_prefix_len + i] = (uint8_t)digits[n - 1 - i];
  out[p->arena_prefix_len + n] = 0;
}

/* Describes bytes [offset, offset + length) of `alloc` as a host buffer. */
GPR_INLINE int gpr_producer_host_buffer(const gpr_producer *p, const gpr_allocation *alloc,
                                        uint64_t offset, uint64_t length, gpr_body_buffer *out,
                                        gpr_error *err) {
  if (offset > alloc->length || length > alloc->length - offset)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0,
                    "buffer [%llu, +%llu) does not fit its %llu-byte allocation",
                    (unsigned long long)offset, (unsigned long long)length,
                    (unsigned long long)alloc->length);
  memset(out, 0, sizeof *out);
  out->kind = GPR_MEM_HOST;
  out->device_ordinal = -1;
  out->offset = alloc->offset + offset;
  out->length = length;
  gpr_producer_arena_name(p, alloc->arena, out->handle);
  return 0;
}

/* The arena a host buffer's handle names if it is one of this producer's:
 * exactly `prefix` ("/gpuring.SEG.pIgG.a", gpr_arena_shm_name without the
 * number), then the number without leading zeros, then a NUL within the
 * handle. Compared rather than parsed with gpr_arena_name_parse, whose
 * snprintf and sscanf took 686 ns a buffer on every publish (dev box); it
 * accepts exactly the names that function accepts with this index and gen. */
GPR_INLINE int gpr_producer_arena_of(const char *prefix, size_t prefix_len, const uint8_t *handle,
                                     uint32_t *arena) {
  if (prefix_len >= GPR_HANDLE_BYTES || memcmp(handle, prefix, prefix_len) != 0) return -1;
  size_t at = prefix_len;
  if (handle[at] == '0' && at + 1 < GPR_HANDLE_BYTES && handle[at + 1] != 0) return -1;
  uint64_t n = 0;
  size_t first = at;
  for (; at < GPR_HANDLE_BYTES && handle[at] >= '0' && handle[at] <= '9'; at++)
    if ((n = n * 10u + (uint64_t)(handle[at] - '0')) > UINT32_MAX) return -1;
  if (at == first || at >= GPR_HANDLE_BYTES || handle[at] != 0) return -1;
  *arena = (uint32_t)n;
  return 0;
}

/* Every host buffer must lie inside one of this producer's arenas: a consumer
 * would refuse anything else, so the mistake is reported here, to its author. */
GPR_INLINE int gpr_producer_check_buffers(const gpr_producer *p, const gpr_frame_desc *d,
                                          gpr_error *err) {
  for (uint32_t b = 0; b < d->buffer_count; b++) {
    const gpr_body_buffer *buf = &d->buffers[b];
    if (buf->kind != GPR_MEM_HOST) continue;
    uint32_t arena;
    if (gpr_producer_arena_of(p->arena_prefix, p->arena_prefix_len, buf->handle, &arena) != 0 ||
        arena >= p->pool.count || !gpr_range_ok(buf->offset, buf->length, p->pool.arenas[arena].size))
      return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0,
                      "buffer %u is not inside an arena of this producer (use gpr_producer_host_buffer)",
                      b);
  }
  return 0;
}

/* Encodes `d` into a fresh body allocation of `size` bytes (its encoded size)
 * and checks it as a consumer will. */
GPR_INLINE int gpr_producer_write_body(gpr_producer *p, const gpr_frame_desc *d, uint64_t size,
                                       gpr_allocation *body, gpr_error *err) {
  if (size > GPR_MAX_BODY_BYTES)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "frame body would be %llu bytes; the limit is %u",
                    (unsigned long long)size, GPR_MAX_BODY_BYTES);
  int rc = gpr_producer_alloc(p, size, body, err);
  if (rc != 0) return rc;
  rc = gpr_body_encode(d, body->ptr, (size_t)body->length, NULL, err);
  if (rc == 0) rc = gpr_body_validate(body->ptr, (size_t)size, NULL, err);
  if (rc != 0) gpr_arena_free(&p->pool, body);
  return rc;
}

/* How long a heads-up stays pending: a publish later than this rings afresh.
 * Passed on, a heads-up rings nobody but the consumer it reached, which may by
 * then be busy with another producer's frame while others sleep. */
#define GPR_HEADS_UP_WINDOW_NS 1000000ull

/* Heads-up (SPEC.md §6.1): wakes a consumer asleep on a doorbell now, for the
 * frame this producer publishes next, so that its wake-up (tens of
 * microseconds on an idle machine) overlaps the work before that publish.
 * gpr_producer_publish gives one itself when none is pending; call this when
 * you start making a frame that takes about a wake-up's time to make. A
 * consumer that wakes and finds nothing sleeps again, and the publish rings it
 * again. One pending (it reached a sleeper less than GPR_HEADS_UP_WINDOW_NS
 * ago) stands. No system call while nobody sleeps. */
GPR_INLINE void gpr_producer_heads_up(gpr_producer *p) {
  if (p->heads_up != GPR_RUNG_NOBODY && gpr_monotonic_ns() - p->heads_up_ns < GPR_HEADS_UP_WINDOW_NS) return;
  p->heads_up = gpr_doorbell_heads_up(&p->seg);
  if (p->heads_up != GPR_RUNG_NOBODY) p->heads_up_ns = gpr_monotonic_ns();
}

/* A publish after an idle spell this long yields to the consumer its heads-up woke. */
#define GPR_YIELD_AFTER_IDLE_NS 50000ull

/* The consumer a heads-up woke is often queued on this very CPU (Linux wakes
 * a sleeper beside its waker), where it runs only once this thread blocks:
 * after the rest of the publish and whatever the application does next, 10 µs
 * and more on a virtual machine. Once the frame is READY, give the CPU up
 * once (C producer to a Node consumer asleep in nextSync(), frames 2 ms apart,
 * 2-core VM: 12.8 µs from publish to the consumer's wake-up became 3.9).
 * Only after an idle spell: in a busy stream consumers take frames in batches
 * whenever they run, and a switch per frame would cost throughput. Where the
 * consumer woke on another CPU, the call returns at once. */
GPR_INLINE void gpr_producer_yield_to_woken(gpr_producer *p, uint32_t rung) {
  uint64_t now = gpr_monotonic_ns();  /* one clock read a publish: the idle spell is end to end */
  if (rung != GPR_RUNG_NOBODY && now - p->published_ns >= GPR_YIELD_AFTER_IDLE_NS) sched_yield();
  p->published_ns = now;
}

typedef struct gpr_publish_attempt {
  gpr_producer *p;
  gpr_frame_ref *ref;
  uint64_t pos;
} gpr_publish_attempt;

GPR_INLINE int gpr_producer_try_publish(void *ctx) {
  gpr_publish_attempt *a = (gpr_publish_attempt *)ctx;
  gpr_producer_reap_due(a->p);
  /* Numbered after reaping: an on_release there may have published. */
  a->ref->frame_id = a->p->next_frame_id;
  /* The heads-up counts for the first try only: a frame that waits for space
   * is notified as any other. */
  uint32_t rung = a->p->heads_up;
  a->p->heads_up = GPR_RUNG_NOBODY;
  int rc = gpr_ring_try_publish_rung(&a->p->seg, a->p->index, a->ref, &a->pos, rung);
  /* A broadcast ring may just have dropped its oldest frame for slow subscribers
   * (gpr_bc_relieve): if that frame was ours, reaping it frees the slot now. */
  if (rc == -(int)GPR_E_RING_FULL && a->p->seg.broadcast && gpr_producer_reap_oldest(a->p) > 0) {
    a->ref->frame_id = a->p->next_frame_id;
    rc = gpr_ring_try_publish(&a->p->seg, a->p->index, a->ref, &a->pos);
  }
  return rc;
}

/* Records a published frame; the allocation list was made before publishing,
 * so this cannot fail. */
GPR_INLINE void gpr_producer_track(gpr_producer *p, uint64_t pos, uint64_t frame_id,
                                   gpr_allocation *allocs, uint32_t count,
                                   const gpr_publish_options *o) {
  gpr_inflight_frame *f = gpr_producer_inflight_at(p, p->inflight_count++);
  if (p->full_reap_in > 0) p->full_reap_in--;
  f->pos = pos;
  f->frame_id = frame_id;
  f->allocs = allocs;
  f->alloc_count = count;
  f->on_release = o ? o->on_release : NULL;
  f->context = o ? o->context : NULL;
}

GPR_INLINE int gpr_producer_reserve(gpr_producer *p, gpr_error *err) {
  if (p->inflight_count < p->inflight_capacity) return 0;
  uint32_t old = p->inflight_capacity, cap = old ? old * 2u : 16u;
  gpr_inflight_frame *grown = (gpr_inflight_frame *)realloc(p->inflight, cap * sizeof *p->inflight);
  if (!grown) return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "producer: out of memory");
  /* Full, the queue runs from inflight_head to the old end and on from 0:
   * the part from 0 moves past the old end, where the doubled array goes on. */
  memcpy(grown + old, grown, p->inflight_head * sizeof *grown);
  p->inflight = grown;
  p->inflight_capacity = cap;
  return 0;
}

/* Publishes one frame described by `d` (which the caller keeps) and returns its
 * id. Waits up to o->timeout_ms for a free slot, then fails with RING_FULL
 * (timeout 0) or TIMEOUT. On any failure nothing was published and the owned
 * allocations are still the caller's. */
GPR_INLINE int gpr_producer_publish(gpr_producer *p, const gpr_frame_desc *d,
                                    const gpr_publish_options *o, uint64_t *frame_id,
                                    gpr_error *err) {
  uint32_t owned = o ? o->owned_count : 0u;
  if (owned && !o->owned)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "owned_count without owned allocations");
  gpr_producer_heads_up(p); /* the wake-up overlaps encoding the body */
  uint32_t rung = p->heads_up;
  int rc = gpr_producer_check_buffers(p, d, err);
  if (rc == 0) rc = gpr_producer_reserve(p, err);
  gpr_allocation *allocs = NULL;
  if (rc == 0 && !(allocs = (gpr_allocation *)malloc((owned + 1u) * sizeof *allocs)))
    rc = gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "producer: out of memory");
  uint64_t body_length = rc == 0 ? gpr_body_encoded_size(d) : 0u;
  if (rc == 0) rc = gpr_producer_write_body(p, d, body_length, &allocs[0], err);
  if (rc != 0) {
    free(allocs);
    p->heads_up = GPR_RUNG_NOBODY; /* no frame follows it: the next publish gives its own */
    return rc;
  }
  if (owned) memcpy(allocs + 1, o->owned, owned * sizeof *allocs);
  gpr_frame_ref ref;
  memset(&ref, 0, sizeof ref);
  ref.producer = p->index;
  ref.producer_gen = p->gen;
  ref.body_arena = allocs[0].arena;
  ref.body_length = (uint32_t)body_length;
  ref.body_offset = allocs[0].offset;
  ref.user_tag = o ? o->user_tag : 0u;
  gpr_publish_attempt a = {p, &ref, 0};
  int64_t timeout = o ? o->timeout_ms : -1;
  rc = timeout == 0 ? gpr_try_sweeping(&p->seg, gpr_producer_try_publish, &a, -(int)GPR_E_RING_FULL)
                    : gpr_wait_sweeping(&p->seg, &p->seg.control->space_seq,
                                        &p->seg.control->space_waiters, gpr_producer_try_publish,
                                        &a, -(int)GPR_E_RING_FULL, timeout);
  if (rc != 0) {
    gpr_arena_free(&p->pool, &allocs[0]);
    free(allocs);
    if (rc == -(int)GPR_E_DETACHED) return gpr_fail_detached(&p->seg, err);
    if (rc != -(int)GPR_E_TIMEOUT && rc != -(int)GPR_E_RING_FULL)
      return gpr_fail(err, (gpr_code)-rc, 0, "ring '%s' took this producer's slot back", p->seg.name);
    char why[GPR_SHM_NAME_MAX * 5];
    gpr_ring_describe_full(&p->seg, why, sizeof why);
    return gpr_fail(err, rc == -(int)GPR_E_TIMEOUT ? GPR_E_TIMEOUT : GPR_E_RING_FULL, 0, "%s", why);
  }
  gpr_producer_track(p, a.pos, ref.frame_id, allocs, owned + 1u, o);
  if (frame_id) *frame_id = ref.frame_id;
  p->next_frame_id++;
  gpr_producer_yield_to_woken(p, rung);
  return 0;
}

GPR_INLINE int gpr_producer_none_inflight(void *ctx) {
  gpr_producer *p = (gpr_producer *)ctx;
  gpr_producer_reap(p);
  return p->inflight_count == 0 ? 0 : -(int)GPR_E_RING_FULL;
}

/* Waits until every published frame was released and reaped (TIMEOUT otherwise). */
GPR_INLINE int gpr_producer_drain(gpr_producer *p, int64_t timeout_ms, gpr_error *err) {
  int rc = gpr_wait_sweeping(&p->seg, &p->seg.control->space_seq, &p->seg.control->space_waiters,
                             gpr_producer_none_inflight, p, -(int)GPR_E_RING_FULL, timeout_ms);
  if (rc != 0)
    return gpr_fail(err, GPR_E_TIMEOUT, 0, "%u frames still unreleased after %lld ms",
                    p->inflight_count, (long long)timeout_ms);
  return 0;
}

/* Waits until a broadcast ring has at least `count` subscribers (polled each
 * millisecond): frames published before then go only to
 * the subscribers attached, or straight back to the producer when there are
 * none. TIMEOUT after `timeout_ms` (< 0: forever); INVALID_ARGUMENT on a
 * work-queue ring, where every frame waits for a consumer anyway. */
GPR_INLINE int gpr_producer_wait_subscribers(gpr_producer *p, uint32_t count, int64_t timeout_ms, gpr_error *err) {
  if (!p->seg.broadcast)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "ring '%s' is a work queue: it has consumers, not subscribers", p->seg.name);
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : gpr_monotonic_ns() + (uint64_t)timeout_ms * 1000000u;
  while (gpr_ring_subscriber_count(&p->seg) < count) {
    if (gpr_monotonic_ns() >= deadline)
      return gpr_fail(err, GPR_E_TIMEOUT, 0, "%u of %u subscribers after %lld ms", gpr_ring_subscriber_count(&p->seg),
                      count, (long long)timeout_ms);
    usleep(1000);
  }
  return 0;
}

/* Leaves the ring. Frames still queued stay readable: host arenas outlive the
 * producer until every frame naming them is released (SPEC.md §7). Their
 * on_release callbacks are not called; device memory behind them must stay
 * valid for as long as this process runs. */
GPR_INLINE void *gpr_producer_channel_thread(void *arg) {
  gpr_producer *p = (gpr_producer *)arg;
  gpr_channel_serve(&p->seg, p->channel_fd, p->channel_lookup, p->channel_context);
  return NULL;
}

/* Serves the producer's descriptor channel (SPEC.md §9c) on a thread of its
 * own until gpr_producer_close(), answering from `lookup`: what a producer of
 * pool or VMM memory must do before publishing it (gpr_cuda_describe_for()
 * calls it). Calling it again does nothing. */
GPR_INLINE int gpr_producer_serve_descriptors(gpr_producer *p, gpr_channel_lookup lookup, void *context, gpr_error *err) {
  if (p->channel_fd >= 0) return 0;
  int fd = gpr_channel_listen(&p->seg, p->index, p->gen, err);
  if (fd < 0) return -1;
  p->channel_fd = fd;
  p->channel_lookup = lookup;
  p->channel_context = context;
  int rc = pthread_create(&p->channel_thread, NULL, gpr_producer_channel_thread, p);
  if (rc == 0) return 0;
  close(fd);
  p->channel_fd = -1;
  return gpr_fail(err, GPR_E_SYSTEM, rc, "pthread_create for the descriptor channel");
}

GPR_INLINE void gpr_producer_close(gpr_producer *p) {
  if (!p) return;
  if (p->channel_fd >= 0) {
    shutdown(p->channel_fd, SHUT_RDWR); /* ends the thread's accept() */
    pthread_join(p->channel_thread, NULL);
    close(p->channel_fd);
  }
  if (gpr_participant_detach(&p->seg, p->index, p->gen, NULL) == -(int)GPR_E_DETACHED)
    gpr_arena_pool_unlink(&p->pool);
  gpr_arena_pool_destroy(&p->pool);
  for (uint32_t i = 0; i < p->inflight_count; i++) free(gpr_producer_inflight_at(p, i)->allocs);
  free(p->inflight);
  gpr_segment_close(&p->seg);
  free(p);
}
