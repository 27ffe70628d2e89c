/* A C consumer of frames from any producer (C, C++, Node, Python): takes
 * FRAMES frames and prints one JSON line per frame, with per column its
 * format, null count, memory kind and a checksum of its values:
 *
 *   {"frame":1,"tag":0,"rows":1000,"columns":[{"name":"id","format":"l",
 *    "memory":"host","nulls":0,"sum":499500}, ...]}
 *
 * "sum" adds the non-null values of integer and float columns, and of the
 * float items of fixed_size_list columns (rows x cols tensors); "chars"
 * counts the bytes of non-null utf8/binary values. Host buffers are read in
 * place. Device buffers (cuda-ipc, cuda-pool, cuda-vmm) are opened with gpuring/cuda.h,
 * ordered after the producer's event and copied to the host.
 *
 * Usage: consumer RING [FRAMES] [TIMEOUT_MS]   (waits up to TIMEOUT_MS for
 * RING to appear and for each frame; default 30000). */
#include <gpuring.h>
#include <gpuring/cuda.h>
#include <inttypes.h>

static void fail(const char *what, const gpr_error *e) {
  printf("{\"error\":\"%s\",\"what\":\"%s\"}\n", gpr_code_name(e->code), what);
  fprintf(stderr, "consumer: %s: %s: %s\n", what, gpr_code_name(e->code), e->message);
  exit(1);
}

/* One frame's buffers as host bytes: mapped in place, or copied off the device. */
typedef struct host_view {
  const uint8_t **bytes;
  void **copies;
  gpr_cuda_frame_map device;
  const gpr_cuda *cuda;
} host_view;

static void view_frame(const gpr_frame *f, host_view *v) {
  gpr_error err;
  uint32_t n = f->desc.buffer_count;
  memset(v, 0, sizeof *v);
  v->bytes = (const uint8_t **)calloc(n + 1u, sizeof *v->bytes);
  v->copies = (void **)calloc(n + 1u, sizeof *v->copies);
  for (uint32_t b = 0; b < n; b++) {
    const gpr_body_buffer *buf = &f->desc.buffers[b];
    if (buf->kind == GPR_MEM_ABSENT || buf->kind == GPR_MEM_HOST) {
      if (gpr_frame_host_buffer(f, b, &v->bytes[b], &err) != 0) fail("map", &err);
      continue;
    }
    if (!v->cuda && (gpr_cuda_get(&v->cuda, &err) != 0 ||
                     gpr_cuda_map_received(v->cuda, f, NULL, &v->device, &err) != 0))
      fail("map device buffers", &err);
    v->copies[b] = malloc(buf->length ? buf->length : 1u);
    /* the legacy default stream waits for the producer's event (map_frame) */
    if (gpr_cuda_check(v->cuda, v->cuda->cuMemcpyDtoH(v->copies[b], v->device.ptrs[b], buf->length),
                       "cuMemcpyDtoH", &err) != 0)
      fail("copy", &err);
    v->bytes[b] = (const uint8_t *)v->copies[b];
  }
}

static void unview_frame(const gpr_frame *f, host_view *v) {
  for (uint32_t b = 0; b < f->desc.buffer_count; b++) free(v->copies[b]);
  if (v->cuda) gpr_cuda_unmap_frame(v->cuda, &v->device);
  free(v->copies);
  free((void *)v->bytes);
}

static int valid(const uint8_t *validity, uint64_t bit) {
  return !validity || (validity[bit / 8u] >> (bit % 8u)) & 1u;
}

static double number(const uint8_t *data, char format, uint64_t i) {
  switch (format) {
#define GPR_READ(code, type)     \
  case code: {                   \
    type x;                      \
    memcpy(&x, data + i * sizeof x, sizeof x); \
    return (double)x;            \
  }
    GPR_READ('c', int8_t) GPR_READ('C', uint8_t) GPR_READ('s', int16_t) GPR_READ('S', uint16_t)
    GPR_READ('i', int32_t) GPR_READ('I', uint32_t) GPR_READ('l', int64_t) GPR_READ('L', uint64_t)
    GPR_READ('f', float) GPR_READ('g', double)
#undef GPR_READ
  }
  return 0;
}

typedef struct checksum {
  double sum;
  uint64_t chars;
  int has_sum, has_chars;
} checksum;

/* Adds rows [from, from + count) of node i, whose first buffer is `first`. */
static void add_values(const gpr_frame *f, const host_view *v, uint32_t i, uint32_t first,
                       uint64_t from, uint64_t count, checksum *c) {
  const gpr_node_desc *n = &f->desc.nodes[i];
  const uint8_t *validity = v->bytes[first];
  uint64_t at = n->offset + from;
  if (n->format_length == 1 && strchr("cCsSiIlLfg", n->format[0])) {
    c->has_sum = 1;
    for (uint64_t r = at; r < at + count; r++)
      if (valid(validity, r)) c->sum += number(v->bytes[first + 1u], n->format[0], r);
  } else if (n->format_length == 1 && strchr("uz", n->format[0])) {
    c->has_chars = 1;
    for (uint64_t r = at; r < at + count; r++) {
      int32_t lo, hi;
      memcpy(&lo, v->bytes[first + 1u] + 4u * r, 4);
      memcpy(&hi, v->bytes[first + 1u] + 4u * (r + 1u), 4);
      if (valid(validity, r)) c->chars += (uint64_t)(hi - lo);
    }
  } else if (n->format_length > 3 && memcmp(n->format, "+w:", 3) == 0) {
    uint64_t width = strtoull(n->format + 3, NULL, 10);
    for (uint64_t r = at; r < at + count; r++)
      if (valid(validity, r)) add_values(f, v, i + 1u, first + n->buffer_count, r * width, width, c);
  }
}

static void print_string(const char *s, uint32_t n) {
  putchar('"');
  for (uint32_t k = 0; k < n; k++) {
    unsigned char ch = (unsigned char)s[k];
    if (ch == '"' || ch == '\\') printf("\\%c", ch);
    else if (ch < 0x20) printf("\\u%04x", ch);
    else putchar(ch);
  }
  putchar('"');
}

static const char *memory_of(const gpr_frame *f, uint32_t first, uint32_t end) {
  for (uint32_t b = first; b < end; b++) {
    if (f->desc.buffers[b].kind == GPR_MEM_CUDA_IPC) return "cuda-ipc";
    if (f->desc.buffers[b].kind == GPR_MEM_CUDA_POOL) return "cuda-pool";
    if (f->desc.buffers[b].kind == GPR_MEM_CUDA_VMM) return "cuda-vmm";
  }
  return "host";
}

static void print_frame(const gpr_frame *f, const host_view *v) {
  printf("{\"frame\":%" PRIu64 ",\"tag\":%" PRIu64 ",\"rows\":%" PRIu64 ",\"columns\":[", f->frame_id,
         f->user_tag, f->desc.row_count);
  uint32_t node = 0, buffer = 0;
  for (uint32_t k = 0; k < f->desc.root_count; k++) {
    const gpr_node_desc *n = &f->desc.nodes[node];
    uint32_t end = gpr_subtree_end(&f->desc, node), buffers_end = buffer;
    for (uint32_t j = node; j < end; j++) buffers_end += f->desc.nodes[j].buffer_count;
    checksum c = {0, 0, 0, 0};
    add_values(f, v, node, buffer, 0, n->length, &c);
    printf("%s{\"name\":", k ? "," : "");
    print_string(n->name, n->name_length);
    printf(",\"format\":");
    print_string(n->format, n->format_length);
    printf(",\"memory\":\"%s\",\"nulls\":%" PRId64, memory_of(f, buffer, buffers_end), n->null_count);
    if (c.has_sum) printf(",\"sum\":%.17g", c.sum);
    if (c.has_chars) printf(",\"chars\":%" PRIu64, c.chars);
    putchar('}');
    node = end;
    buffer = buffers_end;
  }
  printf("]}\n");
  fflush(stdout);
}

static gpr_consumer *open_when_created(const char *ring, int64_t timeout_ms) {
  gpr_error err;
  gpr_consumer *c = NULL;
  uint64_t start = gpr_monotonic_ns();
  while (gpr_consumer_open(ring, 1000, &c, &err) != 0) {
    if (err.code != GPR_E_SEGMENT_NOT_FOUND ||
        gpr_monotonic_ns() - start > (uint64_t)timeout_ms * 1000000ull)
      fail("open", &err);
    usleep(10000);
  }
  return c;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: consumer RING [FRAMES] [TIMEOUT_MS]\n");
    return 2;
  }
  uint64_t frames = argc > 2 ? strtoull(argv[2], NULL, 10) : 1u;
  int64_t timeout_ms = argc > 3 ? strtoll(argv[3], NULL, 10) : 30000;
  gpr_consumer *c = open_when_created(argv[1], timeout_ms);
  for (uint64_t i = 0; i < frames; i++) {
    gpr_error err;
    gpr_frame *f = NULL;
    host_view v;
    if (gpr_consumer_next(c, timeout_ms, &f, &err) != 0) fail("next", &err);
    view_frame(f, &v);
    print_frame(f, &v);
    unview_frame(f, &v);
    gpr_frame_release(f);
  }
  gpr_consumer_close(c);
  return 0;
}
