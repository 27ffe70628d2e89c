/* Broadcast rings (SPEC.md §5.4): every subscriber sees every frame in order,
 * a frame's memory comes back once every subscriber released it, late joiners
 * start at the newest frame, the three on_slow policies, and, across
 * processes, 1 producer x 4 subscribers x 100,000 frames and a subscriber
 * killed with SIGKILL while it holds the ring up. */
#include "gpuring.h"
#include "check.h"
#include "int32_frame.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#define SLOTS 8u

static int released;

static void on_release(void *context, uint64_t frame_id) {
  (void)context;
  (void)frame_id;
  released++;
}

static int publish(gpr_producer *p, int32_t value, int64_t timeout_ms) {
  gpr_error err;
  gpr_publish_options o = {(uint64_t)value, timeout_ms, NULL, 0, on_release, NULL};
  return publish_int32_column(p, "v", value, 1, o, &err);
}

/* The next frame's value (its tag), released at once; -1 if none came. */
static int64_t take(gpr_consumer *c, int64_t timeout_ms, int *code) {
  gpr_error err;
  gpr_frame *f = NULL;
  int rc = gpr_consumer_next(c, timeout_ms, &f, &err);
  if (code) *code = rc == 0 ? 0 : (int)err.code;
  if (rc != 0) return -1;
  const uint8_t *v = NULL;
  int32_t value = -2;
  if (gpr_frame_host_buffer(f, 1, &v, &err) == 0) memcpy(&value, v, 4);
  CHECK((uint64_t)value == f->user_tag);
  gpr_frame_release(f);
  return value;
}

static void make_ring(const char *name) {
  gpr_error err;
  gpr_segment seg;
  gpr_segment_options o = {SLOTS, 8u, 0, 0, 0, GPR_DELIVERY_ALL};
  gpr_segment_unlink(name, NULL);
  CHECK(gpr_segment_create(&seg, name, &o, &err) == 0);
  CHECK(seg.broadcast && seg.header->flags == GPR_RING_BROADCAST);
  gpr_segment_close(&seg);
}

static gpr_consumer *subscribe(const char *name, uint32_t on_slow) {
  gpr_error err;
  gpr_consumer *c = NULL;
  gpr_consumer_options o = {0, on_slow, 0};
  CHECK(gpr_consumer_open_with(name, &o, &c, &err) == 0);
  return c;
}

static void test_every_subscriber_every_frame(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  CHECK(publish(p, 100, 0) == 0); /* nobody subscribed: released at once */
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  CHECK(gpr_ring_subscriber_count(&p->seg) == 0);
  CHECK(gpr_producer_wait_subscribers(p, 1, 20, &err) == -(int)GPR_E_TIMEOUT && err.code == GPR_E_TIMEOUT);
  gpr_consumer *a = subscribe(name, GPR_ON_SLOW_BLOCK), *b = subscribe(name, GPR_ON_SLOW_BLOCK);
  CHECK(gpr_ring_subscriber_count(&p->seg) == 2 && gpr_producer_wait_subscribers(p, 2, 0, &err) == 0);
  CHECK(take(a, 0, NULL) == -1); /* frame 100 came before it joined */
  released = 0;
  for (int32_t i = 0; i < 20; i++) {
    CHECK(publish(p, i, 1000) == 0);
    CHECK(take(a, 0, NULL) == i);
    CHECK(gpr_producer_reap(p) == 0); /* b still holds it */
    CHECK(take(b, 0, NULL) == i);
  }
  CHECK(gpr_producer_drain(p, 1000, &err) == 0 && released == 20);
  /* A subscriber that joins late starts at the newest frame. */
  CHECK(publish(p, 50, 0) == 0);
  gpr_consumer *late = subscribe(name, GPR_ON_SLOW_BLOCK);
  CHECK(publish(p, 51, 0) == 0);
  CHECK(take(late, 0, NULL) == 51 && take(late, 0, NULL) == -1);
  CHECK(take(a, 0, NULL) == 50 && take(a, 0, NULL) == 51 && take(b, 0, NULL) == 50 && take(b, 0, NULL) == 51);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  /* One that asks for the oldest retained frames also gets those still held. */
  CHECK(publish(p, 55, 0) == 0 && take(a, 0, NULL) == 55);
  gpr_consumer_options oldest_first = {0, GPR_ON_SLOW_BLOCK, 1};
  gpr_consumer *old = NULL;
  CHECK(gpr_consumer_open_with(name, &oldest_first, &old, &err) == 0);
  CHECK(take(old, 0, NULL) == 55 && take(old, 0, NULL) == -1);
  CHECK(take(b, 0, NULL) == 55 && take(late, 0, NULL) == 55);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  gpr_consumer_close(old);
  /* A subscriber that leaves gives back what it held. */
  CHECK(publish(p, 60, 0) == 0);
  gpr_consumer_close(late);
  CHECK(take(a, 0, NULL) == 60 && take(b, 0, NULL) == 60);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  gpr_consumer_close(a);
  gpr_consumer_close(b);
  gpr_producer_close(p);
}

static void test_block(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *slow = subscribe(name, GPR_ON_SLOW_BLOCK), *fast = subscribe(name, GPR_ON_SLOW_DROP_OLDEST);
  for (int32_t i = 0; i < (int32_t)SLOTS; i++) {
    CHECK(publish(p, i, 0) == 0);
    CHECK(take(fast, 0, NULL) == i);
  }
  CHECK(publish(p, 99, 0) == -(int)GPR_E_RING_FULL);
  CHECK(publish(p, 99, 30) == -(int)GPR_E_TIMEOUT);
  for (int32_t i = 0; i < (int32_t)SLOTS; i++) CHECK(take(slow, 0, NULL) == i);
  CHECK(publish(p, 8, 0) == 0 && take(slow, 0, NULL) == 8 && take(fast, 0, NULL) == 8);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  gpr_consumer_close(slow);
  gpr_consumer_close(fast);
  gpr_producer_close(p);
}

static void test_drop_oldest(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *slow = subscribe(name, GPR_ON_SLOW_DROP_OLDEST), *fast = subscribe(name, GPR_ON_SLOW_BLOCK);
  for (int32_t i = 0; i < 3 * (int32_t)SLOTS; i++) {
    CHECK(publish(p, i, 0) == 0); /* never full: the slow one's oldest frame goes */
    CHECK(take(fast, 0, NULL) == i);
  }
  int code = 0;
  CHECK(take(slow, 0, &code) == -1 && code == GPR_E_FRAMES_MISSED);
  CHECK(gpr_consumer_missed(slow) == 2 * SLOTS);
  for (int32_t i = 2 * (int32_t)SLOTS; i < 3 * (int32_t)SLOTS; i++) CHECK(take(slow, 0, NULL) == i);
  CHECK(take(slow, 0, &code) == -1 && code == GPR_E_RING_EMPTY);
  /* A frame it has taken is never dropped: the ring waits for its release. */
  gpr_frame *held = NULL;
  CHECK(publish(p, 30, 0) == 0 && take(fast, 0, NULL) == 30);
  CHECK(gpr_consumer_next(slow, 0, &held, &err) == 0 && held->user_tag == 30);
  for (int32_t i = 31; i < 31 + (int32_t)SLOTS - 1; i++) CHECK(publish(p, i, 0) == 0 && take(fast, 0, NULL) == i);
  CHECK(publish(p, 99, 0) == -(int)GPR_E_RING_FULL);
  gpr_frame_release(held);
  CHECK(publish(p, 38, 0) == 0); /* frame 30's slot, now free */
  for (int32_t i = 31; i <= 38; i++) CHECK(take(slow, 0, NULL) == i);
  CHECK(take(fast, 0, NULL) == 38);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  gpr_consumer_close(slow);
  gpr_consumer_close(fast);
  gpr_producer_close(p);
}

static void test_evict(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *slow = subscribe(name, GPR_ON_SLOW_EVICT), *fast = subscribe(name, GPR_ON_SLOW_BLOCK);
  /* Frame 8 evicts it (0-7 dropped); 8-15 fill the ring again and 16-23 each
   * drop the oldest of those for it while it has not come back. */
  for (int32_t i = 0; i < 3 * (int32_t)SLOTS; i++) {
    CHECK(publish(p, i, 0) == 0);
    CHECK(take(fast, 0, NULL) == i);
  }
  int code = 0;
  CHECK(take(slow, 0, &code) == -1 && code == GPR_E_EVICTED);
  CHECK(gpr_consumer_missed(slow) == 2 * SLOTS);
  for (int32_t i = 2 * (int32_t)SLOTS; i < 3 * (int32_t)SLOTS; i++) CHECK(take(slow, 0, NULL) == i); /* published since */
  CHECK(take(slow, 0, &code) == -1 && code == GPR_E_RING_EMPTY);
  CHECK(publish(p, 40, 0) == 0 && take(slow, 0, NULL) == 40 && take(fast, 0, NULL) == 40);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  /* The interleaving a producer dropping a frame for an evicted subscriber must
   * survive: it read the EVICTED cursor, then the subscriber went on and took
   * that very frame; the drop's CAS from the cursor it read must fail. */
  uint64_t *cursor = &p->seg.participants[slow->index].cursor;
  for (int32_t i = 41; i < 41 + (int32_t)SLOTS; i++) CHECK(publish(p, i, 0) == 0 && take(fast, 0, NULL) == i);
  CHECK(publish(p, 49, 0) == 0 && take(fast, 0, NULL) == 49); /* evicts it again: 41..48 dropped */
  uint64_t stale = __atomic_load_n(cursor, __ATOMIC_ACQUIRE);
  CHECK(stale & GPR_CURSOR_EVICTED);
  CHECK(take(slow, 0, &code) == -1 && code == GPR_E_EVICTED);
  gpr_frame *held = NULL;
  CHECK(gpr_consumer_next(slow, 0, &held, &err) == 0 && held && held->user_tag == 49); /* published since */
  if (held) {
    CHECK(gpr_bc_drop(&p->seg, slow->index, &stale, held->pos) == 0); /* it went on: no drop */
    CHECK(gpr_ring_holds(&p->seg, slow->index, held->pos));
    /* An evicting producer whose finish lost its CAS to the subscriber (which then
     * went on and took this frame) once carried on from the cursor as it is now:
     * past the frame, where a CAS succeeds. A drop never acts behind the cursor. */
    uint64_t now = __atomic_load_n(cursor, __ATOMIC_ACQUIRE);
    CHECK(gpr_bc_drop(&p->seg, slow->index, &now, held->pos) == 0);
    CHECK(gpr_ring_holds(&p->seg, slow->index, held->pos) && __atomic_load_n(cursor, __ATOMIC_ACQUIRE) == now);
    gpr_frame_release(held);
  }
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  gpr_consumer_close(slow);
  gpr_consumer_close(fast);
  gpr_producer_close(p);
}

/* A frame may carry the bit of a consumer that attached but has not subscribed
 * yet (a publish that loaded `subscribers` while its entry's previous occupant
 * was still in it). That consumer may take the frame once subscribed, so a
 * sweep leaves its share alone: one judged by a subscription still 0 and
 * released after the subscribe released it under its new reader (the torture
 * found Python subscribers whose first frame changed as they read it). A
 * producer's entry never takes a frame: its bit is released. */
static void test_joining_consumer_keeps_its_share(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *a = subscribe(name, GPR_ON_SLOW_BLOCK);
  gpr_segment joining, producing;
  uint32_t j = 0, jgen = 0, q = 0, qgen = 0;
  CHECK(gpr_segment_join(&joining, name, 0, GPR_ROLE_CONSUMER, &j, &jgen, &err) == 0);
  CHECK(gpr_segment_join(&producing, name, 0, GPR_ROLE_PRODUCER, &q, &qgen, &err) == 0);
  gpr_frame *f = NULL;
  CHECK(publish(p, 73, 0) == 0 && gpr_consumer_next(a, 0, &f, &err) == 0 && f);
  if (!f) return;
  uint64_t pos = f->pos;
  gpr_slot *s = gpr_slot_at(&p->seg, pos);
  __atomic_fetch_or(&s->pending, gpr_bc_bit(j) | gpr_bc_bit(q), __ATOMIC_SEQ_CST);
  gpr_frame_release(f);
  CHECK(gpr_bc_sweep_slot(&p->seg, pos) == 1); /* the producer's bit only */
  CHECK(__atomic_load_n(&s->pending, __ATOMIC_ACQUIRE) == gpr_bc_bit(j) && gpr_producer_reap(p) == 0);
  CHECK(gpr_bc_release_as(&joining, j, pos) == 0 && gpr_producer_reap(p) == 1); /* its own release */
  CHECK(gpr_participant_detach(&joining, j, jgen, &err) == 0 && gpr_participant_detach(&producing, q, qgen, &err) == 0);
  gpr_segment_close(&joining);
  gpr_segment_close(&producing);
  gpr_consumer_close(a);
  gpr_producer_close(p);
}

/* An eviction drops what the subscriber has not taken in position order, and
 * stops at a position still being published: that frame may yet carry its bit.
 * It once passed such a position and dropped the frames after it, moving the
 * cursor past a frame that then went READY for the subscriber: never taken,
 * never counted, released in the end as a stray share (the evict torture
 * found subscribers told of one frame fewer than they lost). */
static void test_evict_stops_at_a_publish_in_flight(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *slow = subscribe(name, GPR_ON_SLOW_EVICT), *fast = subscribe(name, GPR_ON_SLOW_BLOCK);
  uint64_t pos[3] = {0, 0, 0};
  for (int32_t i = 0; i < 3; i++) {
    CHECK(publish(p, 70 + i, 0) == 0);
    gpr_frame *f = NULL;
    CHECK(gpr_consumer_next(fast, 0, &f, &err) == 0 && f);
    if (f) pos[i] = f->pos, gpr_frame_release(f);
  }
  gpr_slot *middle = gpr_slot_at(&p->seg, pos[1]);
  uint64_t ready = gpr_slot_load(middle), writing = gpr_slot_word(pos[1], GPR_SLOT_WRITING, gpr_word_owner(ready));
  __atomic_store_n(&middle->word, writing, __ATOMIC_SEQ_CST); /* frame 71's publish, not done yet */
  uint64_t c = __atomic_load_n(&p->seg.participants[slow->index].cursor, __ATOMIC_ACQUIRE);
  gpr_bc_evict(&p->seg, slow->index, c, pos[0]);
  uint64_t after = __atomic_load_n(&p->seg.participants[slow->index].cursor, __ATOMIC_ACQUIRE);
  CHECK(after == (GPR_CURSOR_EVICTED | pos[1])); /* 70 dropped; stopped at 71 */
  CHECK(__atomic_load_n(&gpr_slot_at(&p->seg, pos[2])->pending, __ATOMIC_ACQUIRE) & gpr_bc_bit(slow->index));
  __atomic_store_n(&middle->word, ready, __ATOMIC_SEQ_CST); /* the publish completes */
  int code = 0;
  CHECK(take(slow, 0, &code) == -1 && code == GPR_E_EVICTED && gpr_consumer_missed(slow) == 1);
  CHECK(take(slow, 0, NULL) == 71 && take(slow, 0, NULL) == 72);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  gpr_consumer_close(slow);
  gpr_consumer_close(fast);
  gpr_producer_close(p);
}

/* A subscriber that joins at the oldest frames while a publish is in flight
 * (WRITING, its `subscribers` loaded before the join) adopts that frame too,
 * once it goes READY: it once adopted before joining, passed the slot still
 * WRITING, and the frame came neither way (the 16-core torture found the gap).
 * A publish held up past GPR_ADOPT_WAIT_NS delays the join no longer. The
 * publish completes in another process, while the join waits. */
static void test_oldest_adopts_a_publish_in_flight(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *holder = subscribe(name, GPR_ON_SLOW_BLOCK);
  gpr_frame *held[3] = {NULL, NULL, NULL};
  for (int32_t i = 0; i < 3; i++) {
    CHECK(publish(p, 80 + i, 0) == 0);
    CHECK(gpr_consumer_next(holder, 0, &held[i], &err) == 0 && held[i]);
  }
  if (!held[0] || !held[1] || !held[2]) return;
  gpr_slot *middle = gpr_slot_at(&p->seg, held[1]->pos), *last = gpr_slot_at(&p->seg, held[2]->pos);
  uint64_t ready = gpr_slot_load(middle), last_ready = gpr_slot_load(last);
  __atomic_store_n(&middle->word, gpr_slot_word(held[1]->pos, GPR_SLOT_WRITING, gpr_word_owner(ready)), __ATOMIC_SEQ_CST);
  /* Forked ahead and started by a byte on a pipe as the join begins: a fork
   * (slow under ThreadSanitizer on a loaded 2-core box) inside the join's
   * 10 ms wait once made the publish complete after it. */
  int go[2];
  CHECK(pipe(go) == 0);
  pid_t finisher = fork();
  if (finisher == 0) {
    char byte;
    close(go[1]);
    if (read(go[0], &byte, 1) != 1) _exit(1);
    usleep(2000);
    __atomic_store_n(&middle->word, ready, __ATOMIC_SEQ_CST); /* frame 81's publish completes */
    _exit(0);
  }
  close(go[0]);
  gpr_consumer_options oldest_first = {0, GPR_ON_SLOW_BLOCK, 1};
  gpr_consumer *old = NULL;
  CHECK(write(go[1], "g", 1) == 1);
  close(go[1]);
  CHECK(gpr_consumer_open_with(name, &oldest_first, &old, &err) == 0);
  int status = 0;
  CHECK(waitpid(finisher, &status, 0) == finisher && WIFEXITED(status));
  CHECK(take(old, 0, NULL) == 80 && take(old, 0, NULL) == 81 && take(old, 0, NULL) == 82 && take(old, 0, NULL) == -1);
  gpr_consumer_close(old);
  /* Frame 82's publish never completes while a second one joins: it waits GPR_ADOPT_WAIT_NS, no longer. */
  __atomic_store_n(&last->word, gpr_slot_word(held[2]->pos, GPR_SLOT_WRITING, gpr_word_owner(last_ready)), __ATOMIC_SEQ_CST);
  uint64_t before = gpr_monotonic_ns();
  CHECK(gpr_consumer_open_with(name, &oldest_first, &old, &err) == 0);
  uint64_t joined_ns = gpr_monotonic_ns() - before;
  CHECK(joined_ns >= GPR_ADOPT_WAIT_NS && joined_ns < 50 * GPR_ADOPT_WAIT_NS);
  __atomic_store_n(&last->word, last_ready, __ATOMIC_SEQ_CST);
  CHECK(take(old, 0, NULL) == 80 && take(old, 0, NULL) == 81 && take(old, 0, NULL) == -1);
  gpr_consumer_close(old);
  for (int i = 0; i < 3; i++) gpr_frame_release(held[i]);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  gpr_consumer_close(holder);
  gpr_producer_close(p);
}

/* A producer killed half-way through dropping a frame (its cursor CAS made,
 * marked DROPPING, the share not yet released): while the mark is fresh its
 * dropper may be alive, about to count the loss and clear it, and nobody else
 * touches it; once seen unchanged for GPR_DROP_STALE_NS, the subscriber's next
 * claim, or a producer the frame holds up, finishes the drop, counted once (a
 * dropper that was only slow and comes back takes its count back). */
static void test_half_done_drop(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *slow = subscribe(name, GPR_ON_SLOW_DROP_OLDEST);
  uint64_t *cursor = &p->seg.participants[slow->index].cursor;
  for (int pass = 0; pass < 2; pass++) {
    CHECK(publish(p, 80, 0) == 0 && publish(p, 81, 0) == 0);
    uint64_t c = __atomic_load_n(cursor, __ATOMIC_ACQUIRE) & GPR_SEQ_MASK, q = c;
    while (gpr_word_state(gpr_slot_load(gpr_slot_at(&p->seg, q))) != GPR_SLOT_READY ||
           gpr_word_seq(gpr_slot_load(gpr_slot_at(&p->seg, q))) != q)
      q = (q + 1) & GPR_SEQ_MASK; /* frame 80 */
    uint64_t marked = GPR_CURSOR_DROPPING | ((q + 1) & GPR_SEQ_MASK);
    __atomic_store_n(cursor, marked, __ATOMIC_SEQ_CST); /* the drop's first half */
    const struct timespec stale = {0, (long)GPR_DROP_STALE_NS + 5000000L};
    if (pass == 0) {
      int code = 0;
      CHECK(take(slow, 0, &code) == -1 && code == GPR_E_RING_EMPTY); /* fresh: its dropper's to finish */
      nanosleep(&stale, NULL);
      CHECK(take(slow, 0, &code) == -1 && code == GPR_E_FRAMES_MISSED && gpr_consumer_missed(slow) == 1);
      gpr_bc_finish_drop(&p->seg, slow->index, marked); /* the dropper, back from a long stall */
      CHECK(__atomic_load_n(&p->seg.participants[slow->index].missed, __ATOMIC_ACQUIRE) ==
            p->seg.participants[slow->index].missed_seen); /* counted once */
    } else {
      for (int32_t i = 0; i < (int32_t)SLOTS - 2; i++) CHECK(publish(p, 90 + i, 0) == 0); /* fills it */
      CHECK(publish(p, 99, 0) != 0); /* frame 80 holds it up, its drop marked just now */
      nanosleep(&stale, NULL);
      CHECK(publish(p, 99, 0) == 0); /* the mark went stale: the drop was finished */
      int code = 0;
      CHECK(take(slow, 0, &code) == -1 && code == GPR_E_FRAMES_MISSED && gpr_consumer_missed(slow) == 1);
      CHECK(take(slow, 0, NULL) == 81);
      for (int32_t i = 0; i < (int32_t)SLOTS - 2; i++) CHECK(take(slow, 0, NULL) == 90 + i);
      CHECK(take(slow, 0, NULL) == 99);
      continue;
    }
    CHECK(take(slow, 0, NULL) == 81 && take(slow, 0, NULL) == -1);
  }
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  gpr_consumer_close(slow);
  gpr_producer_close(p);
}

/* What a kill -9 can leave in a broadcast ring, and the next sweep that looks at
 * the slots (someone died) repairs: a frame carrying the bit of an entry freed
 * meanwhile (a publish that loaded control.subscribers before a sweep cleared a
 * dead subscriber's bit went READY after that sweep looked at its slot), and a
 * READY frame whose last releaser died between clearing its bit and moving the
 * slot on. */
static void test_leftover_bit(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *a = subscribe(name, GPR_ON_SLOW_BLOCK);
  CHECK(publish(p, 70, 0) == 0);
  const uint32_t freed_entry = 7; /* nobody attached there */
  CHECK(gpr_pstate(gpr_participant_word(&p->seg, freed_entry)) == GPR_PARTICIPANT_FREE);
  gpr_slot *s = NULL;
  for (uint32_t i = 0; i < SLOTS; i++)
    if (gpr_word_state(gpr_slot_load(&p->seg.slots[i])) == GPR_SLOT_READY) s = &p->seg.slots[i];
  CHECK(s != NULL);
  if (!s) return;
  /* The bit is set after the attach below: an attach repairs what its entry's
   * last occupant left (gpr_sweep_leftovers), which would release it first. */
  pid_t dies = fork();
  if (dies == 0) {
    gpr_consumer *c = NULL;
    gpr_consumer_open(name, 0, &c, NULL);
    _exit(0); /* without detaching: found dead by the next sweep */
  }
  waitpid(dies, NULL, 0);
  __atomic_fetch_or(&s->pending, gpr_bc_bit(freed_entry), __ATOMIC_SEQ_CST);
  CHECK(take(a, 0, NULL) == 70);
  CHECK(gpr_producer_reap(p) == 0); /* the leftover bit holds it */
  gpr_sweep_report r;
  CHECK(gpr_sweep(&p->seg, &r, NULL) == 0 && r.found_dead == 1 && r.released == 1);
  CHECK(gpr_producer_reap(p) == 1);
  /* A releaser killed between clearing the last bit and moving the slot on
   * leaves a READY frame nobody holds: the next sweep that looks moves it on. */
  CHECK(publish(p, 71, 0) == 0);
  for (uint32_t i = 0; i < SLOTS; i++)
    if (gpr_word_state(gpr_slot_load(&p->seg.slots[i])) == GPR_SLOT_READY) s = &p->seg.slots[i];
  __atomic_fetch_and(&s->pending, ~gpr_bc_bit(a->index), __ATOMIC_SEQ_CST); /* the release's first half only */
  CHECK(gpr_producer_reap(p) == 0 && take(a, 0, NULL) == -1);
  dies = fork();
  if (dies == 0) {
    gpr_consumer *c = NULL;
    gpr_consumer_open(name, 0, &c, NULL);
    _exit(0);
  }
  waitpid(dies, NULL, 0);
  CHECK(gpr_sweep(&p->seg, &r, NULL) == 0 && r.found_dead == 1);
  CHECK(gpr_producer_reap(p) == 1);
  gpr_consumer_close(a);
  gpr_producer_close(p);
}

/* A subscriber decides a frame is its own by the bit in the slot's pending
 * word, loaded after the slot word; the frame may go meanwhile and a publish a
 * lap later store a pending word carrying every subscriber's bit. Taking the
 * old position on it held no share of the frame read, whose memory its
 * producer then reused under the reader: a Python subscriber's first frame in
 * the 16-core torture. gpr_bc_carries only says yes while the slot word is
 * still the one the bit was judged by. */
static void test_carries_judges_by_an_unchanged_word(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *a = subscribe(name, GPR_ON_SLOW_BLOCK);
  CHECK(publish(p, 87, 0) == 0);
  gpr_slot *s = NULL;
  for (uint32_t i = 0; i < SLOTS; i++)
    if (gpr_word_state(gpr_slot_load(&p->seg.slots[i])) == GPR_SLOT_READY) s = &p->seg.slots[i];
  CHECK(s != NULL);
  if (!s) return;
  uint64_t w = gpr_slot_load(s), bit = gpr_bc_bit(a->index);
  CHECK(gpr_bc_carries(s, w, bit) && !gpr_bc_carries(s, w, gpr_bc_bit(a->index + 1u)));
  uint64_t later = gpr_slot_word(gpr_word_seq(w) + SLOTS, GPR_SLOT_WRITING, gpr_word_owner(w)); /* a lap on */
  __atomic_store_n(&s->word, later, __ATOMIC_SEQ_CST);
  CHECK(!gpr_bc_carries(s, w, bit));
  __atomic_store_n(&s->word, w, __ATOMIC_SEQ_CST);
  CHECK(take(a, 0, NULL) == 87);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  gpr_consumer_close(a);
  gpr_producer_close(p);
}

/* A live process's value in entry j's proxy word: pid << 32 | start time mod 2^32. */
static uint64_t proxy_of(pid_t pid) {
  char state;
  uint64_t started = 0;
  CHECK(gpr_proc_stat((uint32_t)pid, &state, &started) == 0);
  return (uint64_t)pid << 32 | (uint32_t)started;
}

/* Waits up to ms for a line from fd; its first int, or -1 if none came. */
static int line_within(int fd, int ms) {
  struct pollfd pfd = {fd, POLLIN, 0};
  char buf[32] = {0};
  if (poll(&pfd, 1, ms) != 1 || read(fd, buf, sizeof buf - 1) <= 0) return -1;
  return atoi(buf);
}

/* SPEC.md §5.4, Proxies. Another process holds entry j's proxy word (a sweep
 * or producer acting for j, held up): a consumer that attaches at j waits for
 * it before subscribing, so that nothing that proxy judged on j's previous
 * occupant lands on a frame the new subscriber takes (a release judged on a
 * FREE entry, landing after the new subscriber took the frame). Meanwhile sweeps and
 * relieving producers leave j's shares alone; once the holder is dead, they
 * take the word over and release them. */
static void test_proxy_word(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *a = subscribe(name, GPR_ON_SLOW_BLOCK);
  const uint32_t j = a->index + 1u;
  uint64_t *proxy = &p->seg.participants[j].proxy;
  CHECK(gpr_pstate(gpr_participant_word(&p->seg, j)) == GPR_PARTICIPANT_FREE);
  pid_t holder = fork();
  if (holder == 0) {
    pause();
    _exit(0);
  }
  __atomic_store_n(proxy, proxy_of(holder), __ATOMIC_SEQ_CST);
  int lines[2];
  CHECK(pipe(lines) == 0);
  pid_t joiner = fork();
  if (joiner == 0) {
    gpr_consumer *c = subscribe(name, GPR_ON_SLOW_BLOCK);
    dprintf(lines[1], "%u\n", c->index);
    _exit(0);
  }
  CHECK(line_within(lines[0], 300) == -1); /* it waits for the proxy */
  __atomic_store_n(proxy, 0, __ATOMIC_SEQ_CST); /* the proxy is done */
  CHECK(line_within(lines[0], 5000) == (int)j);
  waitpid(joiner, NULL, 0);
  close(lines[0]);
  close(lines[1]);
  CHECK(gpr_sweep(&p->seg, NULL, NULL) == 0); /* frees j: the joiner exited without detaching */
  CHECK(gpr_pstate(gpr_participant_word(&p->seg, j)) == GPR_PARTICIPANT_FREE);

  /* A leftover bit of j on a READY frame, while the live holder has j's word. */
  __atomic_store_n(proxy, proxy_of(holder), __ATOMIC_SEQ_CST);
  gpr_frame *f = NULL;
  CHECK(publish(p, 86, 0) == 0 && gpr_consumer_next(a, 0, &f, &err) == 0 && f);
  if (!f) return;
  uint64_t pos = f->pos;
  gpr_slot *s = gpr_slot_at(&p->seg, pos);
  __atomic_fetch_or(&s->pending, gpr_bc_bit(j), __ATOMIC_SEQ_CST);
  gpr_frame_release(f);
  gpr_bc_relieve(&p->seg, pos);
  CHECK(gpr_bc_sweep_slot(&p->seg, pos) == 0 && gpr_producer_reap(p) == 0); /* left to the holder */
  kill(holder, SIGKILL);
  waitpid(holder, NULL, 0);
  CHECK(gpr_bc_sweep_slot(&p->seg, pos) == 1 && gpr_producer_reap(p) == 1); /* taken over */
  CHECK(__atomic_load_n(proxy, __ATOMIC_SEQ_CST) == 0);
  gpr_consumer_close(a);
  gpr_producer_close(p);
}

/* SPEC.md §7 step 3: a share of an entry that is FREE, with nobody dead (its
 * freer's own sweep left it: the entry's proxy word was held elsewhere, or a
 * publish was in flight), is released by the next sweep all the same. A
 * producer that never fills the ring waited for that frame for good (drain()
 * in test/broadcast.test.ts hung once in CI). */
static void test_leftover_share_with_nobody_dead(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *a = subscribe(name, GPR_ON_SLOW_BLOCK);
  const uint32_t freed_entry = 7; /* nobody attached there */
  CHECK(gpr_pstate(gpr_participant_word(&p->seg, freed_entry)) == GPR_PARTICIPANT_FREE);
  gpr_frame *f = NULL;
  CHECK(publish(p, 88, 0) == 0 && gpr_consumer_next(a, 0, &f, &err) == 0 && f);
  if (!f) return;
  __atomic_fetch_or(&gpr_slot_at(&p->seg, f->pos)->pending, gpr_bc_bit(freed_entry), __ATOMIC_SEQ_CST);
  gpr_frame_release(f);
  CHECK(gpr_producer_reap(p) == 0); /* the leftover share holds it */
  gpr_sweep_report r;
  CHECK(gpr_sweep(&p->seg, &r, NULL) == 0 && r.found_dead == 0 && r.released == 1);
  CHECK(gpr_producer_reap(p) == 1);
  gpr_consumer_close(a);
  gpr_producer_close(p);
}

/* SPEC.md §4, Attach: a consumer attaching at entry j releases j's bit from
 * every READY frame, the shares j's previous occupant left, itself: not
 * through j's proxy word, which a live process holds here (a relieving
 * producer, held up). Left there, the frame, published before the consumer
 * joined, would come to it (a 16-core torture found subscribers taking two
 * such frames and then missing one published between them and their join). */
static void test_attach_releases_leftovers_under_a_proxy(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *a = subscribe(name, GPR_ON_SLOW_BLOCK);
  const uint32_t j = a->index + 1u;
  CHECK(gpr_pstate(gpr_participant_word(&p->seg, j)) == GPR_PARTICIPANT_FREE);
  gpr_frame *f = NULL;
  CHECK(publish(p, 87, 0) == 0 && gpr_consumer_next(a, 0, &f, &err) == 0 && f);
  if (!f) return;
  gpr_slot *s = gpr_slot_at(&p->seg, f->pos);
  __atomic_fetch_or(&s->pending, gpr_bc_bit(j), __ATOMIC_SEQ_CST); /* j's previous occupant's share */
  pid_t holder = fork();
  if (holder == 0) {
    pause();
    _exit(0);
  }
  __atomic_store_n(&p->seg.participants[j].proxy, proxy_of(holder), __ATOMIC_SEQ_CST);
  int lines[2];
  CHECK(pipe(lines) == 0);
  pid_t joiner = fork();
  if (joiner == 0) {
    int code = 0;
    gpr_consumer *c = subscribe(name, GPR_ON_SLOW_BLOCK);
    dprintf(lines[1], "%d\n", c->index == j ? 100 + (int)take(c, 0, &code) : 0); /* 99: no frame */
    _exit(0);
  }
  /* Until it attached (repairing j's leftovers then); it waits for the proxy. */
  for (int ms = 0; ms < 10000 && gpr_pstate(gpr_participant_word(&p->seg, j)) != GPR_PARTICIPANT_ACTIVE; ms++)
    usleep(1000);
  __atomic_store_n(&p->seg.participants[j].proxy, 0, __ATOMIC_SEQ_CST);
  CHECK(line_within(lines[0], 5000) == 99); /* not frame 87 (187): published before it joined */
  CHECK((__atomic_load_n(&s->pending, __ATOMIC_SEQ_CST) & gpr_bc_bit(j)) == 0);
  waitpid(joiner, NULL, 0);
  kill(holder, SIGKILL);
  waitpid(holder, NULL, 0);
  close(lines[0]);
  close(lines[1]);
  gpr_frame_release(f);
  CHECK(gpr_sweep(&p->seg, NULL, NULL) == 0 && gpr_producer_reap(p) == 1); /* nothing else held it */
  gpr_consumer_close(a);
  gpr_producer_close(p);
}

/* 4 subscriber processes each read `frames` frames and check every one is
 * there exactly once, in order; a fifth subscribes and is killed holding the
 * ring up; the producer goes on once a sweep released its shares. */
static void test_processes(const char *name, int32_t frames) {
  gpr_error err;
  pid_t kids[4], stuck;
  for (int k = 0; k < 4; k++) {
    kids[k] = fork();
    if (kids[k] == 0) {
      gpr_consumer *c = subscribe(name, GPR_ON_SLOW_BLOCK);
      int code = 0;
      for (int32_t i = 0; i < frames; i++) {
        int64_t got = take(c, 10000, &code);
        if (got != i) {
          fprintf(stderr, "subscriber %d: frame %d is %lld (code %d)\n", k, i, (long long)got, code);
          _exit(1);
        }
      }
      gpr_consumer_close(c);
      _exit(0); /* not gpr_checks_failed: that counts the parent's checks before the fork too */
    }
  }
  stuck = fork();
  if (stuck == 0) {
    subscribe(name, GPR_ON_SLOW_BLOCK);
    pause();
    _exit(0);
  }
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  CHECK(gpr_producer_wait_subscribers(p, 5, 10000, &err) == 0);
  for (int32_t i = 0; i < frames; i++) {
    if (i == (int32_t)SLOTS) {
      CHECK(publish(p, i, 0) == -(int)GPR_E_RING_FULL); /* the stuck one holds frame 0 */
      kill(stuck, SIGKILL);
      waitpid(stuck, NULL, 0);
    }
    CHECK(publish(p, i, 10000) == 0);
  }
  for (int k = 0; k < 4; k++) {
    int status = 0;
    waitpid(kids[k], &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  CHECK(gpr_producer_drain(p, 5000, &err) == 0);
  CHECK(__atomic_load_n(&p->seg.control->subscribers, __ATOMIC_ACQUIRE) == 0);
  gpr_producer_close(p);
}

/* SPEC.md §5.4, "Stray shares": damage sets a subscriber's bit again in the
 * pending word of a frame it took and released. Nothing else releases it, so
 * the ring fills behind it; the subscriber's sweep while it waits (in
 * gpr_consumer_next) does, and leaves the share of a frame it holds. */
static void test_stray_share(const char *name) {
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  gpr_consumer *victim = subscribe(name, GPR_ON_SLOW_BLOCK), *other = subscribe(name, GPR_ON_SLOW_BLOCK);
  CHECK(publish(p, 0, 0) == 0);
  gpr_slot *s = NULL;
  for (uint32_t i = 0; i < SLOTS; i++)
    if (gpr_word_state(gpr_slot_load(&p->seg.slots[i])) == GPR_SLOT_READY) s = &p->seg.slots[i];
  CHECK(s != NULL);
  if (!s) return;
  CHECK(take(victim, 0, NULL) == 0);
  __atomic_fetch_or(&s->pending, gpr_bc_bit(victim->index), __ATOMIC_SEQ_CST); /* the stray share */
  CHECK(take(other, 0, NULL) == 0);
  for (int32_t i = 1; i < (int32_t)SLOTS; i++) {
    CHECK(publish(p, i, 0) == 0);
    CHECK(take(victim, 0, NULL) == i && take(other, 0, NULL) == i);
  }
  CHECK(publish(p, 99, 0) == -(int)GPR_E_RING_FULL);
  gpr_frame *held = NULL;
  int code = 0;
  CHECK(take(victim, 250, &code) == -1 && code == GPR_E_TIMEOUT); /* waits, sweeps, finds it */
  CHECK(publish(p, 8, 0) == 0);
  CHECK(gpr_consumer_next(victim, 0, &held, &err) == 0 && held->user_tag == 8);
  CHECK(take(victim, 250, &code) == -1 && code == GPR_E_TIMEOUT); /* sweeps again, holding frame 8 */
  uint32_t carrying = 0;
  for (uint32_t i = 0; i < SLOTS; i++)
    carrying += gpr_word_state(gpr_slot_load(&p->seg.slots[i])) == GPR_SLOT_READY &&
                (__atomic_load_n(&p->seg.slots[i].pending, __ATOMIC_ACQUIRE) & gpr_bc_bit(victim->index));
  CHECK(carrying == 1); /* the frame it holds keeps its share */
  if (held) gpr_frame_release(held);
  CHECK(take(other, 0, NULL) == 8);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  gpr_consumer_close(victim);
  gpr_consumer_close(other);
  gpr_producer_close(p);
}

/* A sweep that marked a subscriber dead stalls; meanwhile another sweep frees
 * the entry and a new subscriber joins there. The stalled sweep must neither
 * clear the newcomer's bit in subscribers nor release its share (SPEC.md §7,
 * Acting on a marked entry). Before, the newcomer missed frames (a gap in what
 * 'block' promises) and lost shares of frames it had taken. */
static void test_stale_sweep(const char *name) {
  make_ring(name);
  gpr_error err;
  gpr_producer *p = NULL;
  CHECK(gpr_producer_open(name, NULL, &p, &err) == 0);
  pid_t dies = fork();
  if (dies == 0) {
    gpr_consumer *c = NULL;
    _exit(gpr_consumer_open(name, 0, &c, NULL) == 0 && c->index == 1 ? 0 : 1); /* without detaching */
  }
  int status = 0;
  CHECK(waitpid(dies, &status, 0) == dies && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  uint64_t dead[8] = {0};
  uint32_t refs[8] = {0};
  gpr_sweep_report r;
  memset(&r, 0, sizeof r);
  gpr_sweep_mark(&p->seg, dead, &r); /* the stalled sweep */
  CHECK(r.found_dead == 1 && dead[1] != 0);
  CHECK(gpr_sweep(&p->seg, &r, NULL) == 0 && r.freed == 1);
  gpr_consumer *b = subscribe(name, GPR_ON_SLOW_BLOCK);
  CHECK(b->index == 1);
  CHECK(publish(p, 90, 0) == 0);
  gpr_sweep_owners(&p->seg, dead, refs, &r);
  CHECK(__atomic_load_n(&p->seg.control->subscribers, __ATOMIC_SEQ_CST) & gpr_bc_bit(1));
  CHECK(publish(p, 91, 0) == 0);
  CHECK(take(b, 0, NULL) == 90 && take(b, 0, NULL) == 91);
  gpr_consumer_close(b);
  gpr_producer_close(p);
  make_ring(name); /* afresh for the tests after it */
}

int main(int argc, char **argv) {
  char name[32];
  snprintf(name, sizeof name, "bcast-%d", (int)getpid());
  make_ring(name);
  test_every_subscriber_every_frame(name);
  test_block(name);
  test_drop_oldest(name);
  test_evict(name);
  test_evict_stops_at_a_publish_in_flight(name);
  test_oldest_adopts_a_publish_in_flight(name);
  test_leftover_bit(name);
  test_joining_consumer_keeps_its_share(name);
  test_half_done_drop(name);
  test_stray_share(name);
  test_stale_sweep(name);
  test_proxy_word(name);
  test_attach_releases_leftovers_under_a_proxy(name);
  test_leftover_share_with_nobody_dead(name);
  test_carries_judges_by_an_unchanged_word(name);
  test_processes(name, argc > 1 ? atoi(argv[1]) : 100000);
  gpr_segment_unlink(name, NULL);
  return CHECK_DONE();
}
