/* A sweeper stalled between its check and its CAS (SPEC.md §5.2, Confirm;
 * §7): it judged a dead consumer's claim on a slot, and meanwhile a newer
 * occupant of the same entry claimed the same position, so its late CAS takes
 * that live claim back. The consumer must neither fail nor hand the frame
 * over: it claims again. Used by take_back.c and test_endpoints.c. */
#ifndef GPR_STALLED_SWEEPER_H
#define GPR_STALLED_SWEEPER_H
#include "gpuring.h"

typedef enum { GPR_TOOK_BACK, GPR_TOOK_LATE, GPR_TOOK_NONE } gpr_take_back_result;

/* Spins until the slot holds a claim at `pos` and takes it back with the
 * sweep's own code: LATE when the claim was confirmed first (or the slot went
 * past `pos`), NONE after 10 s without a claim. */
static gpr_take_back_result stalled_sweeper_take_back(gpr_segment *seg, uint64_t pos) {
  const gpr_slot *s = gpr_slot_at(seg, pos);
  uint64_t until = gpr_monotonic_ns() + 10000000000ull;
  while (gpr_monotonic_ns() < until)
    for (int i = 0; i < 4096; i++) {
      uint64_t w = __atomic_load_n(&s->word, __ATOMIC_ACQUIRE);
      int64_t d = gpr_seq_diff(gpr_word_seq(w), pos);
      uint32_t st = gpr_word_state(w);
      if (d == 0 && st == GPR_SLOT_CLAIMED)
        return gpr_ring_unclaim_as(seg, gpr_word_owner(w) - 1u, pos, GPR_SLOT_CLAIMED) == 0 ? GPR_TOOK_BACK
                                                                                                  : GPR_TOOK_LATE;
      if (d > 0 || (d == 0 && (st == GPR_SLOT_LEASED || st == GPR_SLOT_RELEASED))) return GPR_TOOK_LATE;
    }
  return GPR_TOOK_NONE;
}
#endif
