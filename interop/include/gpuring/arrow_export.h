/* gpuring/arrow_export.h: a received frame as an Arrow record batch through
 * the Arrow C data interface, zero-copy, for any Arrow library (pyarrow's
 * RecordBatch._import_from_c, arrow-rs, nanoarrow, DuckDB ...).
 *
 * The batch is a struct array ("+s") with one child per column. Its buffers
 * point into the producer's arenas: the export holds a reference to the frame
 * (gpuring/consumer.h), so the lease lasts until the importer calls the array's
 * release callback. The schema copies its strings and holds nothing. Device
 * (cuda-ipc) columns are refused with UNSUPPORTED: map them with
 * gpuring/cuda.h instead. Included by gpuring.h. */

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  const char *format;
  const char *name;
  const char *metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema **children;
  struct ArrowSchema *dictionary;
  void (*release)(struct ArrowSchema *);
  void *private_data;
};

struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void **buffers;
  struct ArrowArray **children;
  struct ArrowArray *dictionary;
  void (*release)(struct ArrowArray *);
  void *private_data;
};
#endif /* ARROW_C_DATA_INTERFACE */

/* Everything one exported tree allocated, freed together by its root's release. */
typedef struct gpr_export_store {
  void **blocks;
  size_t count;
  size_t capacity;
  gpr_frame *frame;              /* the array tree's reference; NULL for a schema */
  const uint32_t *first_buffer;  /* node index -> index of its first buffer */
} gpr_export_store;

GPR_INLINE void *gpr_export_alloc(gpr_export_store *st, size_t bytes) {
  if (st->count == st->capacity) {
    size_t cap = st->capacity ? st->capacity * 2u : 32u;
    void *grown = realloc(st->blocks, cap * sizeof *st->blocks);
    if (!grown) return NULL;
    st->blocks = (void **)grown;
    st->capacity = cap;
  }
  void *p = calloc(1, bytes ? bytes : 1u);
  if (p) st->blocks[st->count++] = p;
  return p;
}

GPR_INLINE void gpr_export_store_free(gpr_export_store *st) {
  for (size_t i = 0; i < st->count; i++) free(st->blocks[i]);
  free(st->blocks);
  if (st->frame) gpr_frame_release(st->frame);
  free(st);
}

GPR_INLINE void gpr_export_child_schema_release(struct ArrowSchema *s) { s->release = NULL; }
GPR_INLINE void gpr_export_child_array_release(struct ArrowArray *a) { a->release = NULL; }

/* Importers move the root struct before releasing it: the store travels in private_data. */
GPR_INLINE void gpr_export_root_schema_release(struct ArrowSchema *s) {
  gpr_export_store_free((gpr_export_store *)s->private_data);
  s->release = NULL;
}

GPR_INLINE void gpr_export_root_array_release(struct ArrowArray *a) {
  gpr_export_store_free((gpr_export_store *)a->private_data);
  a->release = NULL;
}

GPR_INLINE const char *gpr_export_string(gpr_export_store *st, const char *s, uint32_t n) {
  char *copy = (char *)gpr_export_alloc(st, (size_t)n + 1u);
  if (copy && n) memcpy(copy, s, n);
  return copy;
}

GPR_INLINE int gpr_export_oom(gpr_error *err) {
  return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "Arrow export: out of memory");
}

/* The index just past the subtree rooted at node i (the trees were validated). */
GPR_INLINE uint32_t gpr_subtree_end(const gpr_frame_desc *d, uint32_t i) {
  uint32_t end = i + 1u;
  for (uint32_t k = 0; k < d->nodes[i].child_count; k++) end = gpr_subtree_end(d, end);
  return end;
}

GPR_INLINE int64_t gpr_export_flags(uint32_t flags) {
  return ((flags & GPR_NODE_NULLABLE) ? ARROW_FLAG_NULLABLE : 0) |
         ((flags & GPR_NODE_DICT_ORDERED) ? ARROW_FLAG_DICTIONARY_ORDERED : 0) |
         ((flags & GPR_NODE_MAP_KEYS_SORTED) ? ARROW_FLAG_MAP_KEYS_SORTED : 0);
}

GPR_INLINE int gpr_export_schema_node(gpr_export_store *st, const gpr_frame_desc *d, uint32_t i,
                                      struct ArrowSchema *out, gpr_error *err);

/* out's children: the `count` subtrees that follow one another from node `first`. */
GPR_INLINE int gpr_export_schema_children(gpr_export_store *st, const gpr_frame_desc *d,
                                          uint32_t first, uint32_t count, struct ArrowSchema *out,
                                          gpr_error *err) {
  out->n_children = count;
  out->children = (struct ArrowSchema **)gpr_export_alloc(st, count * sizeof(void *));
  int rc = out->children ? 0 : gpr_export_oom(err);
  for (uint32_t k = 0, j = first; rc == 0 && k < count; k++, j = gpr_subtree_end(d, j)) {
    out->children[k] = (struct ArrowSchema *)gpr_export_alloc(st, sizeof(struct ArrowSchema));
    rc = out->children[k] ? gpr_export_schema_node(st, d, j, out->children[k], err) : gpr_export_oom(err);
  }
  return rc;
}

GPR_INLINE int gpr_export_schema_node(gpr_export_store *st, const gpr_frame_desc *d, uint32_t i,
                                      struct ArrowSchema *out, gpr_error *err) {
  const gpr_node_desc *n = &d->nodes[i];
  out->format = gpr_export_string(st, n->format, n->format_length);
  out->name = gpr_export_string(st, n->name, n->name_length);
  out->metadata = n->metadata_length
                      ? gpr_export_string(st, (const char *)n->metadata, n->metadata_length)
                      : NULL;
  out->flags = gpr_export_flags(n->flags);
  out->release = gpr_export_child_schema_release;
  if (!out->format || !out->name || (n->metadata_length && !out->metadata))
    return gpr_export_oom(err);
  int rc = gpr_export_schema_children(st, d, i + 1u, n->child_count, out, err);
  if (rc != 0 || n->dictionary < 0) return rc;
  out->dictionary = (struct ArrowSchema *)gpr_export_alloc(st, sizeof(struct ArrowSchema));
  if (!out->dictionary) return gpr_export_oom(err);
  return gpr_export_schema_node(st, d, (uint32_t)n->dictionary, out->dictionary, err);
}

/* Reads offsets[at] of a var-size node's offsets buffer. */
GPR_INLINE int64_t gpr_offset_at(const uint8_t *offsets, uint32_t width, uint64_t at) {
  if (width == 4) {
    int32_t v;
    memcpy(&v, offsets + at * 4u, 4);
    return v;
  }
  int64_t v;
  memcpy(&v, offsets + at * 8u, 8);
  return v;
}

/* A private copy of the first `bytes` of buffer `b`, which the export then
 * points at (NULL stays NULL). */
GPR_INLINE int gpr_export_private_buffer(gpr_export_store *st, const void **b, size_t bytes, gpr_error *err) {
  if (!*b) return 0;
  void *copy = gpr_export_alloc(st, bytes);
  if (!copy) return gpr_export_oom(err);
  memcpy(copy, *b, bytes);
  *b = copy;
  return 0;
}

/* Var-size values must stay inside their data (or child): SPEC.md §8.2. Every
 * offset of the slice is checked, not only its ends: importers index values
 * with the offsets in between too. They are checked in a private copy,
 * offsets[0 .. offset + length], which the export then points at: the
 * producer's memory may change between a check and an importer's read, and
 * an importer trusts the offsets it gets. The values stay in place. */
GPR_INLINE int gpr_export_private_offsets(gpr_export_store *st, uint32_t i, const void **buffers,
                                          uint32_t first, gpr_error *err) {
  const gpr_frame_desc *d = &st->frame->desc;
  const gpr_node_desc *n = &d->nodes[i];
  gpr_format_info f;
  if (n->length == 0 || gpr_format_parse(n->format, n->format_length, &f) != 0 ||
      (f.layout != GPR_LAYOUT_VARBIN && f.layout != GPR_LAYOUT_LIST) || n->dictionary >= 0)
    return 0;
  int rc = gpr_export_private_buffer(st, &buffers[1], (size_t)(n->offset + n->length + 1u) * f.offset_bytes, err);
  if (rc != 0) return rc;
  const uint8_t *offsets = (const uint8_t *)buffers[1];
  int64_t lo = gpr_offset_at(offsets, f.offset_bytes, n->offset);
  int64_t hi = gpr_offset_at(offsets, f.offset_bytes, n->offset + n->length);
  uint64_t limit = f.layout == GPR_LAYOUT_VARBIN ? d->buffers[first + 2u].length
                                                 : d->nodes[i + 1u].length;
  if (lo < 0 || hi < lo || (uint64_t)hi > limit)
    return gpr_fail(err, GPR_E_FRAME_BOUNDS, 0,
                    "column '%.*s': value offsets [%lld, %lld] exceed its %llu values",
                    (int)n->name_length, n->name, (long long)lo, (long long)hi,
                    (unsigned long long)limit);
  int64_t prev = lo;
  for (uint64_t k = 1; k < n->length; k++) {
    int64_t v = gpr_offset_at(offsets, f.offset_bytes, n->offset + k);
    if (v < prev || v > hi)
      return gpr_fail(err, GPR_E_FRAME_BOUNDS, 0,
                      "column '%.*s': value offset %llu is %lld, outside [%lld, %lld]",
                      (int)n->name_length, n->name, (unsigned long long)k, (long long)v,
                      (long long)prev, (long long)hi);
    prev = v;
  }
  return 0;
}

/* Dictionary indices must name entries of the dictionary (SPEC.md §8.2):
 * every index of the slice not marked null, in [0, dictionary length), else
 * FRAME_BOUNDS. Checked in private copies of the validity and the indices,
 * which the export then points at: an importer trusts indices, and the shared
 * ones (or the null bits) may change after the check. */
GPR_INLINE int gpr_export_private_indices(gpr_export_store *st, uint32_t i, const void **buffers, gpr_error *err) {
  const gpr_frame_desc *d = &st->frame->desc;
  const gpr_node_desc *n = &d->nodes[i];
  gpr_format_info f;
  if (n->dictionary < 0 || n->length == 0 || gpr_format_parse(n->format, n->format_length, &f) != 0) return 0;
  uint64_t end = n->offset + n->length, width = f.bit_width / 8u, entries = d->nodes[n->dictionary].length;
  int rc = gpr_export_private_buffer(st, &buffers[0], (size_t)((end + 7u) / 8u), err);
  if (rc == 0) rc = gpr_export_private_buffer(st, &buffers[1], (size_t)(end * width), err);
  const uint8_t *validity = (const uint8_t *)buffers[0], *indices = (const uint8_t *)buffers[1];
  int is_signed = n->format[0] >= 'a' && n->format[0] <= 'z';
  for (uint64_t r = n->offset; rc == 0 && r < end; r++) {
    if (validity && !(validity[r / 8u] >> (r % 8u) & 1u)) continue;
    uint64_t u = 0;
    memcpy(&u, indices + r * width, width); /* little-endian (SPEC.md §1) */
    int negative = is_signed && (u >> (width * 8u - 1u)) & 1u; /* the sign bit of a signed index */
    if (negative || u >= entries)
      rc = gpr_fail(err, GPR_E_FRAME_BOUNDS, 0, "column '%.*s': dictionary index %llu of row %llu is outside its %llu entries",
                    (int)n->name_length, n->name, (unsigned long long)u, (unsigned long long)(r - n->offset),
                    (unsigned long long)entries);
  }
  return rc;
}

GPR_INLINE int gpr_export_array_node(gpr_export_store *st, uint32_t i, struct ArrowArray *out,
                                     gpr_error *err);

/* out's children: the `count` subtrees that follow one another from node `first`. */
GPR_INLINE int gpr_export_array_children(gpr_export_store *st, uint32_t first, uint32_t count,
                                         struct ArrowArray *out, gpr_error *err) {
  const gpr_frame_desc *d = &st->frame->desc;
  out->n_children = count;
  out->children = (struct ArrowArray **)gpr_export_alloc(st, count * sizeof(void *));
  int rc = out->children ? 0 : gpr_export_oom(err);
  for (uint32_t k = 0, j = first; rc == 0 && k < count; k++, j = gpr_subtree_end(d, j)) {
    out->children[k] = (struct ArrowArray *)gpr_export_alloc(st, sizeof(struct ArrowArray));
    rc = out->children[k] ? gpr_export_array_node(st, j, out->children[k], err) : gpr_export_oom(err);
  }
  return rc;
}

GPR_INLINE int gpr_export_array_node(gpr_export_store *st, uint32_t i, struct ArrowArray *out,
                                     gpr_error *err) {
  const gpr_frame_desc *d = &st->frame->desc;
  const gpr_node_desc *n = &d->nodes[i];
  uint32_t first = st->first_buffer[i];
  out->length = (int64_t)n->length;
  out->null_count = n->null_count;
  out->offset = (int64_t)n->offset;
  out->n_buffers = n->buffer_count;
  out->buffers = (const void **)gpr_export_alloc(st, n->buffer_count * sizeof(void *));
  out->release = gpr_export_child_array_release;
  if (!out->buffers) return gpr_export_oom(err);
  for (uint32_t b = 0; b < n->buffer_count; b++) {
    const uint8_t *p = NULL;
    int rc = gpr_frame_host_buffer(st->frame, first + b, &p, err);
    if (rc != 0) return rc;
    out->buffers[b] = p;
  }
  int rc = gpr_export_private_offsets(st, i, out->buffers, first, err);
  if (rc == 0) rc = gpr_export_private_indices(st, i, out->buffers, err);
  if (rc == 0) rc = gpr_export_array_children(st, i + 1u, n->child_count, out, err);
  if (rc != 0 || n->dictionary < 0) return rc;
  out->dictionary = (struct ArrowArray *)gpr_export_alloc(st, sizeof(struct ArrowArray));
  if (!out->dictionary) return gpr_export_oom(err);
  return gpr_export_array_node(st, (uint32_t)n->dictionary, out->dictionary, err);
}

/* The root: a struct of the frame's columns, `row_count` long. */
GPR_INLINE int gpr_export_root_schema(const gpr_frame_desc *d, struct ArrowSchema *out,
                                      gpr_error *err) {
  gpr_export_store *st = (gpr_export_store *)calloc(1, sizeof *st);
  if (!st) return gpr_export_oom(err);
  memset(out, 0, sizeof *out);
  out->format = "+s";
  out->name = "";
  out->metadata = d->metadata_length
                      ? gpr_export_string(st, (const char *)d->metadata, d->metadata_length)
                      : NULL;
  int rc = !d->metadata_length || out->metadata ? 0 : gpr_export_oom(err);
  if (rc == 0) rc = gpr_export_schema_children(st, d, 0, d->root_count, out, err);
  if (rc != 0) {
    gpr_export_store_free(st);
    memset(out, 0, sizeof *out);
    return rc;
  }
  out->private_data = st;
  out->release = gpr_export_root_schema_release;
  return 0;
}

GPR_INLINE int gpr_export_root_array(gpr_frame *f, struct ArrowArray *out, gpr_error *err) {
  const gpr_frame_desc *d = &f->desc;
  gpr_export_store *st = (gpr_export_store *)calloc(1, sizeof *st);
  if (!st) return gpr_export_oom(err);
  st->frame = gpr_frame_retain(f);
  uint32_t *first = (uint32_t *)gpr_export_alloc(st, (d->node_count + 1u) * sizeof(uint32_t));
  for (uint32_t i = 0; first && i < d->node_count; i++)
    first[i + 1u] = first[i] + d->nodes[i].buffer_count;
  st->first_buffer = first;
  memset(out, 0, sizeof *out);
  out->length = (int64_t)d->row_count;
  out->n_buffers = 1;
  out->buffers = (const void **)gpr_export_alloc(st, sizeof(void *));
  int rc = first && out->buffers ? 0 : gpr_export_oom(err);
  if (rc == 0) rc = gpr_export_array_children(st, 0, d->root_count, out, err);
  if (rc != 0) {
    gpr_export_store_free(st);
    memset(out, 0, sizeof *out);
    return rc;
  }
  out->private_data = st;
  out->release = gpr_export_root_array_release;
  return 0;
}

/* Exports frame `f` as a record batch: `schema` (may be NULL) and `array`.
 * Both or neither are filled; the caller (or its importer) releases each. */
GPR_INLINE int gpr_frame_export_arrow(gpr_frame *f, struct ArrowSchema *schema,
                                      struct ArrowArray *array, gpr_error *err) {
  int rc = gpr_export_root_array(f, array, err);
  if (rc != 0 || !schema) return rc;
  rc = gpr_export_root_schema(&f->desc, schema, err);
  if (rc != 0) array->release(array);
  return rc;
}
