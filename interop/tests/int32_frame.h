/* A one-column frame for the C tests: int32 column NAME holding first,
 * first + 1, ... (rows values) in one allocation the frame owns. The
 * allocation is given back if the publish fails. */
#ifndef GPR_INT32_FRAME_H
#define GPR_INT32_FRAME_H
#include "gpuring.h"

/* A frame of one column: node `n` with `buffers` buffers `b`, `rows` rows. */
static gpr_frame_desc one_column_frame(gpr_node_desc *n, gpr_body_buffer *b, uint32_t buffers, uint64_t rows) {
  gpr_frame_desc d;
  memset(&d, 0, sizeof d);
  d.row_count = rows;
  d.root_count = d.node_count = 1;
  d.buffer_count = buffers;
  d.nodes = n;
  d.buffers = b;
  return d;
}

static int publish_int32_column(gpr_producer *p, const char *name, int32_t first, uint32_t rows,
                                gpr_publish_options o, gpr_error *err) {
  gpr_allocation a;
  memset(&a, 0, sizeof a);
  int rc = gpr_producer_alloc(p, 4ull * rows, &a, err);
  if (rc != 0) return rc;
  for (uint32_t i = 0; i < rows; i++) {
    int32_t v = first + (int32_t)i;
    memcpy(a.ptr + 4u * i, &v, 4);
  }
  gpr_node_desc n = {name, (uint32_t)strlen(name), "i", 1, NULL, 0, 0, 0, -1, 2, rows, 0, 0};
  gpr_body_buffer b[2];
  memset(b, 0, sizeof b);
  gpr_producer_host_buffer(p, &a, 0, 4ull * rows, &b[1], err);
  gpr_frame_desc d = one_column_frame(&n, b, 2, rows);
  o.owned = &a;
  o.owned_count = 1;
  rc = gpr_producer_publish(p, &d, &o, NULL, err);
  if (rc != 0) gpr_producer_free(p, &a);
  return rc;
}

#endif
