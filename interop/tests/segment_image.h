/* Loading a golden segment image (fixtures/segments) into /dev/shm, as the
 * fixture test and the segment fuzz target both do. Images were made under
 * GPR_IMAGE_RING (frame bodies name their arenas, and arena names embed the
 * ring name), with the PID namespace 0 and live participants' pids
 * GPR_IMAGE_ALIVE: a loader writes its own namespace, pid and start time. */
#ifndef GPR_TEST_SEGMENT_IMAGE_H
#define GPR_TEST_SEGMENT_IMAGE_H
#include "gpuring.h"
#include "files.h"

#define GPR_IMAGE_RING "gpr-fixture-image"
#define GPR_IMAGE_ALIVE 0xFFFFFFFEu

/* Makes image bytes `b` ours: our PID namespace, our pid for ALIVE entries.
 * Every offset is bounds-checked: the fuzz target passes damaged images. */
static inline __attribute__((unused)) void gpr_image_adopt(uint8_t *b, size_t n) {
  if (n < sizeof(gpr_segment_header)) return;
  gpr_segment_header *h = (gpr_segment_header *)b;
  if (h->pid_namespace == 0) h->pid_namespace = gpr_pid_namespace();
  for (uint32_t i = 0; i < h->participant_capacity; i++) {
    uint64_t at = h->participants_offset + (uint64_t)i * sizeof(gpr_participant);
    if (at > n || n - at < sizeof(gpr_participant)) break;
    /* Field by field with memcpy: a damaged offset need not be aligned. */
    uint32_t pid;
    memcpy(&pid, b + at + offsetof(gpr_participant, pid), sizeof pid);
    if (pid == GPR_IMAGE_ALIVE) {
      uint64_t start = gpr_self_start_time();
      pid = (uint32_t)getpid();
      memcpy(b + at + offsetof(gpr_participant, pid), &pid, sizeof pid);
      memcpy(b + at + offsetof(gpr_participant, start_time), &start, sizeof start);
    }
  }
}

/* Writes shared-memory object `shm` (a name like "/gpuring.x") with n bytes. */
static inline __attribute__((unused)) int gpr_image_spill(const char *shm, const uint8_t *b, size_t n) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm%s", shm);
  return write_whole_file(path, b, n);
}

/* Loads a segment image and producer 0's arena (either may be NULL). */
static inline __attribute__((unused)) int gpr_image_load(uint8_t *segment, size_t segment_n,
                                                        const uint8_t *arena, size_t arena_n) {
  char shm[GPR_SHM_NAME_MAX];
  gpr_image_adopt(segment, segment_n);
  gpr_segment_shm_name(GPR_IMAGE_RING, shm);
  int rc = gpr_image_spill(shm, segment, segment_n);
  gpr_arena_shm_name(GPR_IMAGE_RING, 0, 1, 0, shm);
  if (rc == 0 && arena) rc = gpr_image_spill(shm, arena, arena_n);
  return rc;
}

/* Removes the loaded segment and every arena of its ring. */
static inline __attribute__((unused)) void gpr_image_unload(void) { gpr_segment_unlink(GPR_IMAGE_RING, NULL); }
#endif
