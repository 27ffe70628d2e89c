/* gpuring/cuda.h: the cuda-ipc memory kind for C and C++ programs (SPEC.md
 * §9a), opt-in: include it after gpuring.h. The CUDA driver is loaded with
 * dlopen("libcuda.so.1") on first use, never linked, so a program built with
 * it runs on machines without a GPU (every call then fails with
 * CUDA_UNAVAILABLE). Link with -ldl on glibc older than 2.34.
 *
 * Producer side: gpr_cuda_describe() turns a device pointer into a buffer
 * descriptor; gpr_cuda_record_event() records the interprocess event that
 * orders the consumer after the work that filled the buffers.
 * Consumer side: gpr_cuda_map_frame() opens a received frame's device
 * buffers and orders a stream after the producer's event;
 * gpr_cuda_unmap_frame() closes them, before the frame is released.
 *
 * The driver types are declared here with their ABI values unless the
 * program included CUDA's own cuda.h first. */

#include <dlfcn.h>
#include <pthread.h>

#ifndef __cuda_cuda_h__
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUipcMemHandle_st { char reserved[64]; } CUipcMemHandle;
typedef struct CUipcEventHandle_st { char reserved[64]; } CUipcEventHandle;
typedef struct CUuuid_st { char bytes[16]; } CUuuid;
#endif

#define GPR_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1u
#define GPR_CU_EVENT_DISABLE_TIMING 0x2u
#define GPR_CU_EVENT_INTERPROCESS 0x4u
#define GPR_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define GPR_CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define GPR_CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define GPR_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define GPR_CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE 10
#define GPR_CU_MEMORYTYPE_DEVICE 2u

/* X(field, symbol, parameters): every entry point gpuring's C side uses. */
#define GPR_CUDA_API(X)                                                               \
  X(cuInit, "cuInit", (unsigned))                                                     \
  X(cuGetErrorName, "cuGetErrorName", (CUresult, const char **))                      \
  X(cuDeviceGetCount, "cuDeviceGetCount", (int *))                                    \
  X(cuDeviceGet, "cuDeviceGet", (CUdevice *, int))                                    \
  X(cuDeviceGetUuid, "cuDeviceGetUuid", (CUuuid *, CUdevice))                         \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))    \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                                  \
  X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                             \
  X(cuMemFree, "cuMemFree_v2", (CUdeviceptr))                                         \
  X(cuMemGetAddressRange, "cuMemGetAddressRange_v2", (CUdeviceptr *, size_t *, CUdeviceptr)) \
  X(cuPointerGetAttribute, "cuPointerGetAttribute", (void *, int, CUdeviceptr))       \
  X(cuIpcGetMemHandle, "cuIpcGetMemHandle", (CUipcMemHandle *, CUdeviceptr))          \
  X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", (CUdeviceptr *, CUipcMemHandle, unsigned)) \
  X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", (CUdeviceptr))                        \
  X(cuIpcGetEventHandle, "cuIpcGetEventHandle", (CUipcEventHandle *, CUevent))        \
  X(cuIpcOpenEventHandle, "cuIpcOpenEventHandle", (CUevent *, CUipcEventHandle))      \
  X(cuEventCreate, "cuEventCreate", (CUevent *, unsigned))                            \
  X(cuEventRecord, "cuEventRecord", (CUevent, CUstream))                              \
  X(cuEventDestroy, "cuEventDestroy_v2", (CUevent))                                   \
  X(cuStreamCreate, "cuStreamCreate", (CUstream *, unsigned))                         \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", (CUstream, CUevent, unsigned))            \
  X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream))                           \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *, CUdeviceptr, size_t))                   \
  X(cuModuleLoadData, "cuModuleLoadData", (CUmodule *, const void *))                 \
  X(cuModuleGetFunction, "cuModuleGetFunction", (CUfunction *, CUmodule, const char *)) \
  X(cuLaunchKernel, "cuLaunchKernel",                                                 \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
     CUstream, void **, void **))

typedef struct gpr_cuda {
  int loaded;
  char error[200];               /* why not, when !loaded */
#define GPR_CUDA_FIELD(field, symbol, params) CUresult(*field) params;
  GPR_CUDA_API(GPR_CUDA_FIELD)
#undef GPR_CUDA_FIELD
} gpr_cuda;

GPR_INLINE gpr_cuda *gpr_cuda_instance(void) {
  static gpr_cuda driver;
  return &driver;
}

GPR_INLINE void gpr_cuda_load_once(void) {
  gpr_cuda *d = gpr_cuda_instance();
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(d->error, sizeof d->error, "no CUDA driver: %s", dlerror());
    return;
  }
  void *sym;
#define GPR_CUDA_RESOLVE(field, symbol, params)                                        \
  sym = dlsym(lib, symbol);                                                            \
  memcpy(&d->field, &sym, sizeof sym);                                                 \
  if (!sym) {                                                                          \
    snprintf(d->error, sizeof d->error, "libcuda.so.1 lacks %s (driver too old)", symbol); \
    return;                                                                            \
  }
  GPR_CUDA_API(GPR_CUDA_RESOLVE)
#undef GPR_CUDA_RESOLVE
  CUresult rc = d->cuInit(0);
  if (rc != 0) {
    snprintf(d->error, sizeof d->error, "cuInit failed with CUDA error %d", rc);
    return;
  }
  d->loaded = 1; /* the library stays loaded: unloading a driver is not safe */
}

/* The process's driver, loaded on first use; CUDA_UNAVAILABLE without one. */
GPR_INLINE int gpr_cuda_get(const gpr_cuda **out, gpr_error *err) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, gpr_cuda_load_once);
  const gpr_cuda *d = gpr_cuda_instance();
  if (!d->loaded) return gpr_fail(err, GPR_E_CUDA_UNAVAILABLE, 0, "%s", d->error);
  *out = d;
  return 0;
}

/* Turns a failed driver call into GPR_E_CUDA naming the call. */
GPR_INLINE int gpr_cuda_check(const gpr_cuda *d, CUresult rc, const char *call, gpr_error *err) {
  if (rc == 0) return 0;
  const char *name = NULL;
  d->cuGetErrorName(rc, &name);
  return gpr_fail(err, GPR_E_CUDA, 0, "%s failed: %s (%d)", call, name ? name : "CUDA_ERROR", rc);
}

#define GPR_CUDA_TRY(d, call, err)                                  \
  do {                                                              \
    int gpr_cuda_rc_ = gpr_cuda_check((d), (d)->call, #call, (err)); \
    if (gpr_cuda_rc_ != 0) return gpr_cuda_rc_;                     \
  } while (0)

/* Makes device `ordinal`'s primary context current on this thread. */
GPR_INLINE int gpr_cuda_use_device(const gpr_cuda *d, int ordinal, gpr_error *err) {
  CUdevice dev;
  CUcontext ctx;
  int count = 0;
  GPR_CUDA_TRY(d, cuDeviceGetCount(&count), err);
  if (ordinal < 0 || ordinal >= count)
    return gpr_fail(err, GPR_E_DEVICE_NOT_FOUND, 0, "no CUDA device %d (%d visible)", ordinal, count);
  GPR_CUDA_TRY(d, cuDeviceGet(&dev, ordinal), err);
  GPR_CUDA_TRY(d, cuDevicePrimaryCtxRetain(&ctx, dev), err); /* kept for the process */
  GPR_CUDA_TRY(d, cuCtxSetCurrent(ctx), err);
  return 0;
}

/* Legacy CUDA IPC exports cudaMalloc/cuMemAlloc memory only (SPEC.md §9a). */
GPR_INLINE int gpr_cuda_check_exportable(const gpr_cuda *d, CUdeviceptr p, gpr_error *err) {
  unsigned type = 0, managed = 0, capable = 0;
  if (d->cuPointerGetAttribute(&type, GPR_CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != 0)
    return gpr_fail(err, GPR_E_NOT_EXPORTABLE, 0, "%#llx is not memory CUDA knows", p);
  d->cuPointerGetAttribute(&managed, GPR_CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
  if (managed)
    return gpr_fail(err, GPR_E_NOT_EXPORTABLE, 0, "managed memory cannot be shared with CUDA IPC");
  if (type != GPR_CU_MEMORYTYPE_DEVICE)
    return gpr_fail(err, GPR_E_NOT_EXPORTABLE, 0, "pinned host memory cannot be shared with CUDA IPC");
  if (d->cuPointerGetAttribute(&capable, GPR_CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p) == 0 &&
      !capable)
    return gpr_fail(err, GPR_E_NOT_EXPORTABLE, 0,
                    "stream-ordered pool or cuMemCreate memory is not legacy-IPC capable; "
                    "allocate with cuMemAlloc/cudaMalloc");
  return 0;
}

/* Describes device bytes [ptr, ptr + length) as a cuda-ipc buffer: the handle
 * of the allocation holding them, their offset in it, its buffer id, the
 * device's ordinal and UUID. The memory's context must be current. */
GPR_INLINE int gpr_cuda_describe(const gpr_cuda *d, CUdeviceptr ptr, uint64_t length,
                                 gpr_body_buffer *out, gpr_error *err) {
  int rc = gpr_cuda_check_exportable(d, ptr, err);
  if (rc != 0) return rc;
  CUdeviceptr base = 0;
  size_t size = 0;
  unsigned long long alloc_id = 0;
  int ordinal = 0;
  CUdevice dev;
  CUuuid uuid;
  CUipcMemHandle h;
  GPR_CUDA_TRY(d, cuMemGetAddressRange(&base, &size, ptr), err);
  if (ptr - base > size || length > size - (ptr - base))
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "%llu bytes at %#llx overrun their allocation",
                    (unsigned long long)length, ptr);
  GPR_CUDA_TRY(d, cuIpcGetMemHandle(&h, base), err);
  GPR_CUDA_TRY(d, cuPointerGetAttribute(&alloc_id, GPR_CU_POINTER_ATTRIBUTE_BUFFER_ID, base), err);
  GPR_CUDA_TRY(d, cuPointerGetAttribute(&ordinal, GPR_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base), err);
  GPR_CUDA_TRY(d, cuDeviceGet(&dev, ordinal), err);
  GPR_CUDA_TRY(d, cuDeviceGetUuid(&uuid, dev), err);
  memset(out, 0, sizeof *out);
  out->kind = GPR_MEM_CUDA_IPC;
  out->device_ordinal = ordinal;
  memcpy(out->device_uuid, uuid.bytes, 16);
  out->offset = ptr - base;
  out->length = length;
  out->alloc_id = alloc_id;
  memcpy(out->handle, h.reserved, GPR_HANDLE_BYTES);
  return 0;
}

/* Records `*event` (created interprocess on first use) on `stream` and writes
 * its IPC handle, for gpr_frame_desc.sync_handle with sync_kind
 * GPR_SYNC_CUDA_EVENT. Reuse an event only after the frame carrying it was
 * released. */
GPR_INLINE int gpr_cuda_record_event(const gpr_cuda *d, CUstream stream, CUevent *event,
                                     uint8_t handle[GPR_HANDLE_BYTES], gpr_error *err) {
  CUipcEventHandle h;
  if (!*event)
    GPR_CUDA_TRY(d, cuEventCreate(event, GPR_CU_EVENT_INTERPROCESS | GPR_CU_EVENT_DISABLE_TIMING), err);
  GPR_CUDA_TRY(d, cuEventRecord(*event, stream), err);
  GPR_CUDA_TRY(d, cuIpcGetEventHandle(&h, *event), err);
  memcpy(handle, h.reserved, GPR_HANDLE_BYTES);
  return 0;
}

/* The visible device with this UUID: ordinals differ between processes. */
GPR_INLINE int gpr_cuda_device_of(const gpr_cuda *d, const uint8_t uuid[16], int *ordinal,
                                  gpr_error *err) {
  int count = 0;
  GPR_CUDA_TRY(d, cuDeviceGetCount(&count), err);
  for (int i = 0; i < count; i++) {
    CUdevice dev;
    CUuuid u;
    if (d->cuDeviceGet(&dev, i) == 0 && d->cuDeviceGetUuid(&u, dev) == 0 &&
        memcmp(u.bytes, uuid, 16) == 0) {
      *ordinal = i;
      return 0;
    }
  }
  return gpr_fail(err, GPR_E_DEVICE_NOT_FOUND, 0,
                  "the frame's device is not visible to this process (CUDA_VISIBLE_DEVICES?)");
}

/* A received frame's device buffers, opened in this process. */
typedef struct gpr_cuda_frame_map {
  CUdeviceptr *ptrs;             /* per buffer: base + offset, 0 unless cuda-ipc */
  CUdeviceptr *opened;           /* distinct allocations opened, closed by unmap */
  uint32_t opened_count;
} gpr_cuda_frame_map;

GPR_INLINE void gpr_cuda_unmap_frame(const gpr_cuda *d, gpr_cuda_frame_map *m) {
  for (uint32_t i = 0; i < m->opened_count; i++) d->cuIpcCloseMemHandle(m->opened[i]);
  free(m->ptrs);
  free(m->opened);
  memset(m, 0, sizeof *m);
}

/* Opens allocation of buffer b unless an earlier buffer of the frame did. */
GPR_INLINE int gpr_cuda_open_buffer(const gpr_cuda *d, const gpr_frame_desc *f, uint32_t b,
                                    gpr_cuda_frame_map *m, gpr_error *err) {
  const gpr_body_buffer *buf = &f->buffers[b];
  for (uint32_t e = 0; e < b; e++) {
    const gpr_body_buffer *o = &f->buffers[e];
    if (o->kind == GPR_MEM_CUDA_IPC && o->alloc_id == buf->alloc_id &&
        memcmp(o->handle, buf->handle, GPR_HANDLE_BYTES) == 0) {
      m->ptrs[b] = m->ptrs[e] - o->offset + buf->offset;
      return 0;
    }
  }
  CUipcMemHandle h;
  CUdeviceptr base = 0;
  memcpy(h.reserved, buf->handle, GPR_HANDLE_BYTES);
  GPR_CUDA_TRY(d, cuIpcOpenMemHandle(&base, h, GPR_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), err);
  m->opened[m->opened_count++] = base;
  m->ptrs[b] = base + buf->offset;
  return 0;
}

/* Opens every cuda-ipc buffer of `f` on its device (made current on this
 * thread) and orders `stream` after the producer's event; reads issued on
 * `stream` then see the producer's writes. Each allocation is opened once;
 * a long-running consumer should cache openings keyed on (handle, alloc_id)
 * instead (SPEC.md §9a). Frames this process published itself cannot be
 * opened (CUDA refuses). */
GPR_INLINE int gpr_cuda_map_frame(const gpr_cuda *d, const gpr_frame_desc *f, CUstream stream,
                                  gpr_cuda_frame_map *m, gpr_error *err) {
  memset(m, 0, sizeof *m);
  uint32_t n = f->buffer_count ? f->buffer_count : 1u;
  m->ptrs = (CUdeviceptr *)calloc(n, sizeof *m->ptrs);
  m->opened = (CUdeviceptr *)calloc(n, sizeof *m->opened);
  int rc = m->ptrs && m->opened ? 0 : gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "out of memory");
  int device = -1;
  for (uint32_t b = 0; rc == 0 && b < f->buffer_count; b++) {
    if (f->buffers[b].kind == GPR_MEM_CUDA_POOL)
      rc = gpr_fail(err, GPR_E_UNSUPPORTED, 0, "buffer %u is cuda-pool memory, which this header does not import yet "
                    "(SPEC.md §9b); read such frames from Node", b);
    if (rc != 0 || f->buffers[b].kind != GPR_MEM_CUDA_IPC) continue;
    int ordinal = -1;
    rc = gpr_cuda_device_of(d, f->buffers[b].device_uuid, &ordinal, err);
    if (rc == 0 && device < 0) rc = gpr_cuda_use_device(d, device = ordinal, err);
    if (rc == 0 && ordinal != device)
      rc = gpr_fail(err, GPR_E_UNSUPPORTED, 0, "a frame spanning devices needs one map per device");
    if (rc == 0) rc = gpr_cuda_open_buffer(d, f, b, m, err);
  }
  if (rc == 0 && device >= 0 && f->sync_kind == GPR_SYNC_CUDA_EVENT) {
    CUipcEventHandle h;
    CUevent ev;
    memcpy(h.reserved, f->sync_handle, GPR_HANDLE_BYTES);
    rc = gpr_cuda_check(d, d->cuIpcOpenEventHandle(&ev, h), "cuIpcOpenEventHandle", err);
    if (rc == 0) {
      rc = gpr_cuda_check(d, d->cuStreamWaitEvent(stream, ev, 0), "cuStreamWaitEvent", err);
      d->cuEventDestroy(ev); /* the wait is enqueued; the event may go */
    }
  }
  if (rc != 0) gpr_cuda_unmap_frame(d, m);
  return rc;
}
