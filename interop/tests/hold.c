/* Test helper: attaches to a ring and stops mid-operation, so a test can kill
 * it there.  hold NAME claim  - takes one READY frame and never confirms it
 *            hold NAME write  - claims the next slot for writing, never publishes
 * Prints "ready POS" once in place, then sleeps until killed. */
#include "gpuring.h"

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  gpr_segment seg;
  gpr_error err;
  uint32_t me = 0, gen = 0;
  if (gpr_segment_join(&seg, argv[1], 0, GPR_ROLE_PRODUCER | GPR_ROLE_CONSUMER, &me, &gen, &err) != 0) {
    fprintf(stderr, "%s: %s\n", gpr_code_name(err.code), err.message);
    return 1;
  }
  uint64_t pos = 0;
  if (strcmp(argv[2], "claim") == 0) {
    gpr_frame_ref ref;
    while (gpr_ring_try_claim(&seg, me, &ref, &pos) != 0) usleep(1000);
  } else {
    for (pos = __atomic_load_n(&seg.control->tail, __ATOMIC_RELAXED);; pos++) {
      gpr_slot *s = gpr_slot_at(&seg, pos);
      if (gpr_slot_cas(s, gpr_slot_word(pos, GPR_SLOT_EMPTY, 0), gpr_slot_word(pos, GPR_SLOT_WRITING, me + 1u))) break;
    }
    gpr_hint_advance(&seg.control->tail, pos + 1);
  }
  printf("ready %llu\n", (unsigned long long)pos);
  fflush(stdout);
  for (;;) pause();
}
