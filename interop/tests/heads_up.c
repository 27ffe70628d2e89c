/* Test helper: a producer whose frames come long after its heads-up (SPEC.md
 * §6.1), so that the consumer it woke finds nothing, sleeps again and must be
 * rung again by the publish.
 *   heads_up NAME FRAMES DELAY_US
 * For each frame: waits until a consumer sleeps on its doorbell, gives a
 * heads-up, waits DELAY_US (under GPR_HEADS_UP_WINDOW_NS the publish passes
 * the heads-up on, beyond it rings afresh), then publishes an int32 frame
 * holding the frame's number. Drains and exits 0. */
#include "gpuring.h"
#include "int32_frame.h"

int main(int argc, char **argv) {
  if (argc != 4) return 2;
  gpr_producer *p = NULL;
  gpr_error err;
  if (gpr_producer_open(argv[1], NULL, &p, &err) != 0) {
    fprintf(stderr, "%s: %s\n", gpr_code_name(err.code), err.message);
    return 1;
  }
  int frames = atoi(argv[2]);
  long us = atol(argv[3]);
  struct timespec delay = {us / 1000000L, (us % 1000000L) * 1000L};
  for (int i = 0; i < frames; i++) {
    while (__atomic_load_n(&p->seg.control->data_doorbells, __ATOMIC_ACQUIRE) == 0) usleep(200);
    gpr_producer_heads_up(p);
    if (p->heads_up == GPR_RUNG_NOBODY) return 3; /* the sleeper was not reached */
    nanosleep(&delay, NULL);
    gpr_publish_options o;
    memset(&o, 0, sizeof o);
    o.timeout_ms = 10000;
    if (publish_int32_column(p, "i", i, 1, o, &err) != 0) {
      fprintf(stderr, "%s: %s\n", gpr_code_name(err.code), err.message);
      return 1;
    }
  }
  int rc = gpr_producer_drain(p, 30000, &err);
  gpr_producer_close(p);
  return rc == 0 ? 0 : 1;
}
