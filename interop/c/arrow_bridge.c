/* A shared library that hands received frames to any Arrow implementation
 * through the Arrow C data interface: the way to embed a gpuring consumer in
 * a host that already speaks Arrow (pyarrow through ctypes or cffi, DuckDB,
 * arrow-rs ...). Build it with CMake (target gpuring_arrow_bridge) or:
 *
 *   cc -shared -fPIC -O2 -I interop/include arrow_bridge.c -o libgpuring_arrow_bridge.so -lpthread
 *
 * From Python:
 *   lib = ctypes.CDLL("libgpuring_arrow_bridge.so")
 *   c = ctypes.c_void_p(); lib.gpr_bridge_open(b"frames", 1000, ctypes.byref(c), err)
 *   lib.gpr_bridge_next(c, 5000, schema_ptr, array_ptr, err)
 *   batch = pyarrow.RecordBatch._import_from_c(array_ptr, schema_ptr)
 *
 * The batch's buffers are the producer's shared memory; the frame stays
 * leased until pyarrow releases the batch (every array built from it gone).
 * Each call returns 0 or a gpr_code and fills `error` with "CODE: message". */
#include <gpuring.h>

#define GPR_BRIDGE_EXPORT __attribute__((visibility("default")))

static int gpr_bridge_error(const gpr_error *e, char *out, size_t cap) {
  if (out && cap) snprintf(out, cap, "%s: %s", gpr_code_name(e->code), e->message);
  return (int)e->code;
}

GPR_BRIDGE_EXPORT int gpr_bridge_open(const char *ring, uint32_t open_timeout_ms, gpr_consumer **out,
                                      char *error, size_t error_cap) {
  gpr_error e;
  return gpr_consumer_open(ring, open_timeout_ms, out, &e) == 0 ? 0 : gpr_bridge_error(&e, error, error_cap);
}

/* Takes the next frame (waiting up to timeout_ms, < 0 forever) and exports it. */
GPR_BRIDGE_EXPORT int gpr_bridge_next(gpr_consumer *c, int64_t timeout_ms, struct ArrowSchema *schema,
                                      struct ArrowArray *array, char *error, size_t error_cap) {
  gpr_error e;
  gpr_frame *f = NULL;
  if (gpr_consumer_next(c, timeout_ms, &f, &e) != 0) return gpr_bridge_error(&e, error, error_cap);
  int rc = gpr_frame_export_arrow(f, schema, array, &e);
  gpr_frame_release(f); /* the export holds its own reference */
  return rc == 0 ? 0 : gpr_bridge_error(&e, error, error_cap);
}

GPR_BRIDGE_EXPORT void gpr_bridge_close(gpr_consumer *c) { gpr_consumer_close(c); }
