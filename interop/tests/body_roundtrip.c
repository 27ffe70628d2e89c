/* The C codec as a referee for the other languages' codecs.
 *
 *   body_roundtrip           one frame body on stdin; its canonical re-encoding
 *                            on stdout, or its error code name on stderr (exit 3)
 *   body_roundtrip --batch   many bodies on stdin, each as u32 length + bytes;
 *                            for each, on stdout: u32 length + verdict ("OK" or
 *                            the code name), then u32 length + canonical bytes
 *                            (empty unless OK)
 *
 * The canonical re-encoding equals the input whenever the input was canonical.
 * The TypeScript suite uses it to prove the C, TypeScript and Python codecs give
 * the same verdict and the same bytes (test/codec.test.ts, test/body-fuzz.test.ts). */
#include "gpuring.h"

/* Validates, describes and re-encodes `body`; returns the verdict's name. On OK,
 * *out (malloc'd, caller frees) holds *out_len canonical bytes. */
static const char *roundtrip(const uint8_t *body, size_t len, uint8_t **out, size_t *out_len) {
  gpr_body_view view;
  memset(&view, 0, sizeof view);
  gpr_error err;
  *out = NULL;
  *out_len = 0;
  if (gpr_body_validate(body, len, &view, &err) != 0) return gpr_code_name(err.code);
  gpr_node_desc *nodes = (gpr_node_desc *)calloc(view.header->node_count + 1u, sizeof *nodes);
  gpr_frame_desc desc;
  gpr_body_describe(&view, nodes, &desc);
  /* A body may be valid yet not canonical (strings shared or out of order), so
   * its canonical re-encoding can be longer than the input. */
  size_t cap = (size_t)gpr_body_encoded_size(&desc);
  *out = (uint8_t *)malloc(cap ? cap : 1);
  const char *verdict = "OK";
  if (gpr_body_encode(&desc, *out, cap, out_len, &err) != 0) verdict = gpr_code_name(err.code);
  free(nodes);
  return verdict;
}

static uint8_t *read_all(FILE *in, size_t *len) {
  size_t cap = 1u << 20;
  uint8_t *buf = (uint8_t *)malloc(cap);
  *len = 0;
  for (size_t n; (n = fread(buf + *len, 1, cap - *len, in)) > 0;) {
    *len += n;
    if (*len == cap) buf = (uint8_t *)realloc(buf, cap *= 2);
  }
  return buf;
}

static void put_record(const void *bytes, uint32_t n) {
  fwrite(&n, 4, 1, stdout);
  fwrite(bytes, 1, n, stdout);
}

static int batch(void) {
  size_t len;
  uint8_t *all = read_all(stdin, &len);
  for (size_t at = 0; at + 4 <= len;) {
    uint32_t n;
    memcpy(&n, all + at, 4);
    if (n > len - at - 4) return 2;
    /* A private copy of exactly n bytes, so ASan sees any read past the body. */
    uint8_t *body = (uint8_t *)malloc(n ? n : 1);
    memcpy(body, all + at + 4, n);
    uint8_t *out;
    size_t out_len;
    const char *verdict = roundtrip(body, n, &out, &out_len);
    put_record(verdict, (uint32_t)strlen(verdict));
    put_record(out, strcmp(verdict, "OK") == 0 ? (uint32_t)out_len : 0u);
    free(out);
    free(body);
    at += 4u + n;
  }
  free(all);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--batch") == 0) return batch();
  size_t len;
  uint8_t *body = read_all(stdin, &len);
  uint8_t *out;
  size_t out_len;
  const char *verdict = roundtrip(body, len, &out, &out_len);
  if (strcmp(verdict, "OK") != 0) {
    fprintf(stderr, "%s\n", verdict);
    free(out);
    return out ? 4 : 3;
  }
  fwrite(out, 1, out_len, stdout);
  free(out);
  free(body);
  return 0;
}
