/* Reads a frame body on stdin, validates and describes it with the C codec,
 * re-encodes the description and writes the bytes to stdout. On a bad body it
 * prints the error code name to stderr and exits 3. The output is canonical:
 * equal to the input whenever the input was canonical. The TypeScript suite uses
 * it to prove both codecs produce the same bytes. */
#include "gpuring.h"

int main(void) {
  size_t cap = 1u << 20, len = 0;
  uint8_t *body = (uint8_t *)malloc(cap);
  for (size_t n; (n = fread(body + len, 1, cap - len, stdin)) > 0;) {
    len += n;
    if (len == cap) body = (uint8_t *)realloc(body, cap *= 2);
  }
  gpr_body_view view;
  memset(&view, 0, sizeof view);
  gpr_error err;
  if (gpr_body_validate(body, len, &view, &err) != 0) {
    fprintf(stderr, "%s\n", gpr_code_name(err.code));
    return 3;
  }
  gpr_node_desc *nodes = (gpr_node_desc *)calloc(view.header->node_count + 1u, sizeof *nodes);
  gpr_frame_desc desc;
  gpr_body_describe(&view, nodes, &desc);
  /* A body may be valid yet not canonical (strings shared or out of order), so
   * its canonical re-encoding can be longer than the input. */
  size_t out_cap = (size_t)gpr_body_encoded_size(&desc);
  uint8_t *out = (uint8_t *)malloc(out_cap);
  size_t written = 0;
  if (gpr_body_encode(&desc, out, out_cap, &written, &err) != 0) {
    fprintf(stderr, "%s\n", gpr_code_name(err.code));
    return 4;
  }
  fwrite(out, 1, written, stdout);
  free(out);
  free(nodes);
  free(body);
  return 0;
}
