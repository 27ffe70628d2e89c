/* The golden fixtures (fixtures/), checked by the C codec exactly as the
 * TypeScript and Python suites check them:
 *   frames/NAME.flat -> gpr_frame_desc -> gpr_body_encode  == frames/NAME.bin
 *   frames/NAME.bin  -> gpr_body_validate -> describe -> flat == frames/NAME.flat
 *   corrupt/NAME.bin is rejected with the code corrupt/codes.txt names.
 * The flat form is defined in fixtures/README.md.
 * Usage: test_fixtures FIXTURES_DIR */
#include "gpuring.h"
#include "check.h"
#include "files.h"

#include <dirent.h>

typedef struct text { char *p; size_t n, cap; } text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    if ((size_t)n < t->cap - t->n) { t->n += (size_t)n; return; }
    t->cap = t->cap * 2 + (size_t)n + 64;
    t->p = (char *)realloc(t->p, t->cap);
  }
}

static void put_hex(text *t, const uint8_t *b, size_t n, int dash_if_empty) {
  if (!n && dash_if_empty) { put(t, "-"); return; }
  for (size_t i = 0; i < n; i++) put(t, "%02x", b[i]);
}

/* Decodes hex ("-" is empty) into a new buffer; returns its length. */
static uint32_t unhex(const char *s, uint8_t **out) {
  size_t n = strcmp(s, "-") == 0 ? 0 : strlen(s) / 2;
  *out = (uint8_t *)calloc(n + 1, 1);
  for (size_t i = 0; i < n; i++) sscanf(s + 2 * i, "%2hhx", &(*out)[i]);
  return (uint32_t)n;
}

static void flat_of(const gpr_frame_desc *d, text *t) {
  put(t, "frame %llu %u %u %u ", (unsigned long long)d->row_count, d->root_count, d->dictionary_count, d->sync_kind);
  put_hex(t, d->sync_handle, GPR_HANDLE_BYTES, 0);
  put(t, " ");
  put_hex(t, d->metadata, d->metadata_length, 1);
  put(t, "\n");
  const gpr_body_buffer *b = d->buffers;
  for (uint32_t i = 0; i < d->node_count; i++) {
    const gpr_node_desc *n = &d->nodes[i];
    put(t, "node ");
    put_hex(t, (const uint8_t *)n->name, n->name_length, 1);
    put(t, " ");
    put_hex(t, (const uint8_t *)n->format, n->format_length, 1);
    put(t, " ");
    put_hex(t, n->metadata, n->metadata_length, 1);
    put(t, " %u %u %d %u %llu %lld %llu\n", n->child_count, n->flags, n->dictionary, n->buffer_count,
        (unsigned long long)n->length, (long long)n->null_count, (unsigned long long)n->offset);
    for (uint32_t k = 0; k < n->buffer_count; k++, b++) {
      put(t, "buffer %u %d ", b->kind, b->device_ordinal);
      put_hex(t, b->device_uuid, 16, 0);
      put(t, " %llu %llu %llu ", (unsigned long long)b->offset, (unsigned long long)b->length,
          (unsigned long long)b->alloc_id);
      put_hex(t, b->handle, GPR_HANDLE_BYTES, 0);
      if (b->kind == GPR_MEM_CUDA_POOL) put(t, " %llu", (unsigned long long)b->pool_id);
      put(t, "\n");
    }
  }
}

/* Parses the flat form into a description; strings point into `keep`. */
static int parse_flat(char *s, gpr_frame_desc *d, gpr_node_desc *nodes, gpr_body_buffer *buffers,
                      uint8_t **keep, size_t *kept) {
  memset(d, 0, sizeof *d);
  d->nodes = nodes;
  d->buffers = buffers;
  char a[256], b[256], c[4096], h[256];
  for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, "frame ", 6) == 0) {
      unsigned long long rows;
      unsigned roots, dicts, sync;
      if (sscanf(line, "frame %llu %u %u %u %255s %4095s", &rows, &roots, &dicts, &sync, h, c) != 6) return -1;
      d->row_count = rows;
      d->root_count = roots;
      d->dictionary_count = dicts;
      d->sync_kind = (uint16_t)sync;
      uint8_t *sh;
      unhex(h, &sh);
      memcpy(d->sync_handle, sh, GPR_HANDLE_BYTES);
      free(sh);
      uint8_t *m;
      d->metadata_length = unhex(c, &m);
      d->metadata = keep[(*kept)++] = m;
    } else if (strncmp(line, "node ", 5) == 0) {
      gpr_node_desc *n = &nodes[d->node_count++];
      unsigned long long len, off;
      long long nulls;
      if (sscanf(line, "node %255s %255s %4095s %u %u %d %u %llu %lld %llu", a, b, c, &n->child_count, &n->flags,
                 &n->dictionary, &n->buffer_count, &len, &nulls, &off) != 10) return -1;
      uint8_t *p;
      n->name_length = unhex(a, &p);
      n->name = (const char *)(keep[(*kept)++] = p);
      n->format_length = unhex(b, &p);
      n->format = (const char *)(keep[(*kept)++] = p);
      n->metadata_length = unhex(c, &p);
      n->metadata = keep[(*kept)++] = p;
      n->length = len;
      n->null_count = nulls;
      n->offset = off;
    } else if (strncmp(line, "buffer ", 7) == 0) {
      gpr_body_buffer *x = &buffers[d->buffer_count++];
      unsigned kind;
      unsigned long long off, len, id, pool = 0;
      memset(x, 0, sizeof *x);
      int words = sscanf(line, "buffer %u %d %255s %llu %llu %llu %255s %llu", &kind, &x->device_ordinal, a, &off, &len, &id, h, &pool);
      if (words != 7 + (kind == GPR_MEM_CUDA_POOL)) return -1;
      x->kind = (uint16_t)kind;
      x->pool_id = pool;
      x->offset = off;
      x->length = len;
      x->alloc_id = id;
      uint8_t *p;
      unhex(a, &p);
      memcpy(x->device_uuid, p, 16);
      free(p);
      unhex(h, &p);
      memcpy(x->handle, p, GPR_HANDLE_BYTES);
      free(p);
    }
  }
  return 0;
}

static void check_frame(const char *dir, const char *name) {
  char path[1024];
  size_t bin_len, flat_len;
  snprintf(path, sizeof path, "%s/frames/%s.bin", dir, name);
  uint8_t *bin = read_file(path, &bin_len);
  snprintf(path, sizeof path, "%s/frames/%s.flat", dir, name);
  char *flat = (char *)read_file(path, &flat_len);
  CHECK(bin && flat);
  if (!bin || !flat) return;
  size_t lines = 1;
  for (size_t i = 0; i < flat_len; i++) lines += flat[i] == '\n';
  gpr_node_desc *nodes = (gpr_node_desc *)calloc(lines, sizeof *nodes);
  gpr_body_buffer *buffers = (gpr_body_buffer *)calloc(lines, sizeof *buffers);
  uint8_t **keep = (uint8_t **)calloc(lines * 3 + 1, sizeof *keep);
  size_t kept = 0;
  char *scratch = strdup(flat);
  gpr_frame_desc d;
  gpr_error err;
  CHECK(parse_flat(scratch, &d, nodes, buffers, keep, &kept) == 0);
  /* encode(description) == golden bytes */
  size_t cap = (size_t)gpr_body_encoded_size(&d), written = 0;
  uint8_t *out = (uint8_t *)malloc(cap);
  CHECK(gpr_body_encode(&d, out, cap, &written, &err) == 0);
  CHECK(written == bin_len && memcmp(out, bin, bin_len) == 0);
  if (written != bin_len || memcmp(out, bin, bin_len) != 0) fprintf(stderr, "  encode mismatch: %s\n", name);
  /* decode(golden bytes) == description */
  gpr_body_view view;
  CHECK(gpr_body_validate(bin, bin_len, &view, &err) == 0);
  gpr_node_desc *decoded = (gpr_node_desc *)calloc(view.header->node_count + 1u, sizeof *decoded);
  gpr_frame_desc back;
  gpr_body_describe(&view, decoded, &back);
  text t = {0};
  flat_of(&back, &t);
  CHECK(t.n == flat_len && memcmp(t.p, flat, flat_len) == 0);
  if (t.n != flat_len || memcmp(t.p, flat, flat_len) != 0) fprintf(stderr, "  decode mismatch: %s\n", name);
  for (size_t i = 0; i < kept; i++) free(keep[i]);
  free(keep); free(t.p); free(decoded); free(out); free(scratch); free(nodes); free(buffers); free(bin); free(flat);
}

static int check_corrupt(const char *dir) {
  char path[1024], name[256], code[64];
  snprintf(path, sizeof path, "%s/corrupt/codes.txt", dir);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  if (!f) return 0;
  int count = 0;
  while (fscanf(f, "%255s %63s", name, code) == 2) {
    size_t len;
    snprintf(path, sizeof path, "%s/corrupt/%s.bin", dir, name);
    uint8_t *bin = read_file(path, &len);
    gpr_body_view view;
    gpr_error err;
    CHECK(bin && gpr_body_validate(bin, len, &view, &err) != 0);
    CHECK(strcmp(gpr_code_name(err.code), code) == 0);
    if (strcmp(gpr_code_name(err.code), code) != 0) fprintf(stderr, "  %s: got %s, want %s\n", name, gpr_code_name(err.code), code);
    free(bin);
    count++;
  }
  fclose(f);
  return count;
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "fixtures";
  char path[1024];
  snprintf(path, sizeof path, "%s/frames", dir);
  DIR *d = opendir(path);
  CHECK(d != NULL);
  int frames = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".bin") != 0) continue;
    e->d_name[n - 4] = 0;
    check_frame(dir, e->d_name);
    frames++;
  }
  if (d) closedir(d);
  int corrupt = check_corrupt(dir);
  CHECK(frames >= 10 && corrupt >= 30);
  printf("fixtures: %d frames, %d corrupted variants checked\n", frames, corrupt);
  return CHECK_DONE();
}
