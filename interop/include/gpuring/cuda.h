/* gpuring/cuda.h: the cuda-ipc memory kind for C and C++ programs (SPEC.md
 * §9a), opt-in (it includes gpuring.h). The CUDA driver is loaded with
 * dlopen("libcuda.so.1") on first use, never linked, so a program built with
 * it runs on machines without a GPU (every call then fails with
 * CUDA_UNAVAILABLE). Link with -ldl on glibc older than 2.34.
 *
 * Producer side: gpr_cuda_describe_for() turns a device pointer into a
 * buffer descriptor (cudaMalloc memory as cuda-ipc; memory of an exportable
 * stream-ordered pool as cuda-pool and memory of gpr_cuda_vmm_alloc() as
 * cuda-vmm, both serving the producer's descriptor channel);
 * gpr_cuda_record_event() records the interprocess event that orders the
 * consumer after the work that filled the buffers.
 * Consumer side: gpr_cuda_map_received() opens a received frame's device
 * buffers (cuda-ipc; cuda-pool and cuda-vmm through the producer's
 * descriptor channel, SPEC.md §9b-§9d) and orders a stream after the
 * producer's event;
 * gpr_cuda_unmap_frame() closes them, before the frame is released.
 *
 * The driver types are declared here with their ABI values unless the
 * program included CUDA's own cuda.h first. */
#ifndef GPURING_CUDA_H
#define GPURING_CUDA_H

#include "../gpuring.h"
#ifndef GPR_WITHOUT_POSIX /* (gpuring.h's #error says why) */
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
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUmemPoolPtrExportData_st { unsigned char reserved[64]; } CUmemPoolPtrExportData;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUmemLocation_st { int type; int id; } CUmemLocation;
typedef struct CUmemAccessDesc_st { CUmemLocation location; int flags; } CUmemAccessDesc;
typedef struct CUmemPoolProps_st {
  int allocType;
  int handleTypes;
  CUmemLocation location;
  void *win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;
typedef struct CUmemAllocationProp_st {
  int type;
  int requestedHandleTypes;
  CUmemLocation location;
  void *win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;
#endif

#define GPR_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1u
#define GPR_CU_EVENT_DISABLE_TIMING 0x2u
#define GPR_CU_EVENT_INTERPROCESS 0x4u
#define GPR_CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define GPR_CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define GPR_CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define GPR_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define GPR_CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE 10
#define GPR_CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE 17
#define GPR_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD 4
#define GPR_CU_MEMORYTYPE_DEVICE 2u
#define GPR_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1
#define GPR_CU_MEM_LOCATION_TYPE_DEVICE 1
#define GPR_CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define GPR_CU_MEM_ALLOCATION_TYPE_PINNED 1
#define GPR_CU_MEM_ALLOC_GRANULARITY_MINIMUM 0

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
  X(cuMemPoolImportFromShareableHandle, "cuMemPoolImportFromShareableHandle",         \
    (CUmemoryPool *, void *, int, unsigned long long))                                \
  X(cuMemPoolImportPointer, "cuMemPoolImportPointer", (CUdeviceptr *, CUmemoryPool, CUmemPoolPtrExportData *)) \
  X(cuMemAddressReserve, "cuMemAddressReserve", (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long)) \
  X(cuMemAddressFree, "cuMemAddressFree", (CUdeviceptr, size_t))                     \
  X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", (CUmemGenericAllocationHandle *, void *, int)) \
  X(cuMemMap, "cuMemMap", (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long)) \
  X(cuMemUnmap, "cuMemUnmap", (CUdeviceptr, size_t))                                 \
  X(cuMemRelease, "cuMemRelease", (CUmemGenericAllocationHandle))                    \
  X(cuMemSetAccess, "cuMemSetAccess", (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t)) \
  X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", (size_t *, const CUmemAllocationProp *, int)) \
  X(cuMemCreate, "cuMemCreate", (CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long)) \
  X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", (void *, CUmemGenericAllocationHandle, int, unsigned long long)) \
  X(cuMemPoolCreate, "cuMemPoolCreate", (CUmemoryPool *, const CUmemPoolProps *))   \
  X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", (CUmemoryPool, int, void *))   \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", (CUdeviceptr *, size_t, CUmemoryPool, CUstream)) \
  X(cuMemPoolExportToShareableHandle, "cuMemPoolExportToShareableHandle",           \
    (void *, CUmemoryPool, int, unsigned long long))                                  \
  X(cuMemPoolExportPointer, "cuMemPoolExportPointer", (CUmemPoolPtrExportData *, CUdeviceptr)) \
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
                    "stream-ordered pool or cuMemCreate memory is not legacy-IPC capable; allocate with "
                    "cuMemAlloc/cudaMalloc, or from an exportable pool described with gpr_cuda_describe_for()");
  return 0;
}

/* The base of the allocation holding [ptr, ptr + length); INVALID_ARGUMENT
 * when the range overruns it. */
GPR_INLINE int gpr_cuda_allocation_of(const gpr_cuda *d, CUdeviceptr ptr, uint64_t length, CUdeviceptr *base,
                                      gpr_error *err) {
  size_t size = 0;
  GPR_CUDA_TRY(d, cuMemGetAddressRange(base, &size, ptr), err);
  if (ptr - *base > size || length > size - (ptr - *base))
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "%llu bytes at %#llx overrun their allocation",
                    (unsigned long long)length, ptr);
  return 0;
}

/* Names device `ordinal` in `out`: its ordinal and UUID. */
GPR_INLINE int gpr_cuda_name_device(const gpr_cuda *d, int ordinal, gpr_body_buffer *out, gpr_error *err) {
  CUdevice dev;
  CUuuid uuid;
  GPR_CUDA_TRY(d, cuDeviceGet(&dev, ordinal), err);
  GPR_CUDA_TRY(d, cuDeviceGetUuid(&uuid, dev), err);
  out->device_ordinal = ordinal;
  memcpy(out->device_uuid, uuid.bytes, 16);
  return 0;
}

/* The device ordinal and UUID of the memory at `p`. */
GPR_INLINE int gpr_cuda_device_of_pointer(const gpr_cuda *d, CUdeviceptr p, gpr_body_buffer *out, gpr_error *err) {
  int ordinal = 0;
  GPR_CUDA_TRY(d, cuPointerGetAttribute(&ordinal, GPR_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p), err);
  return gpr_cuda_name_device(d, ordinal, out, err);
}

/* Describes device bytes [ptr, ptr + length) as a cuda-ipc buffer: the handle
 * of the allocation holding them, their offset in it, its buffer id, the
 * device's ordinal and UUID. The memory's context must be current. */
GPR_INLINE int gpr_cuda_describe(const gpr_cuda *d, CUdeviceptr ptr, uint64_t length,
                                 gpr_body_buffer *out, gpr_error *err) {
  int rc = gpr_cuda_check_exportable(d, ptr, err);
  if (rc != 0) return rc;
  CUdeviceptr base = 0;
  unsigned long long alloc_id = 0;
  CUipcMemHandle h;
  rc = gpr_cuda_allocation_of(d, ptr, length, &base, err);
  if (rc != 0) return rc;
  GPR_CUDA_TRY(d, cuIpcGetMemHandle(&h, base), err);
  GPR_CUDA_TRY(d, cuPointerGetAttribute(&alloc_id, GPR_CU_POINTER_ATTRIBUTE_BUFFER_ID, base), err);
  memset(out, 0, sizeof *out);
  rc = gpr_cuda_device_of_pointer(d, base, out, err);
  if (rc != 0) return rc;
  out->kind = GPR_MEM_CUDA_IPC;
  out->offset = ptr - base;
  out->length = length;
  out->alloc_id = alloc_id;
  memcpy(out->handle, h.reserved, GPR_HANDLE_BYTES);
  return 0;
}

/* The pools this process exported, numbered from 1 (SPEC.md §9b), with their
 * descriptors, which producers' descriptor channels hand out. */
typedef struct gpr_cuda_pool_export {
  struct gpr_cuda_pool_export *next;
  CUmemoryPool pool;
  uint64_t id;
  int fd;
} gpr_cuda_pool_export;

struct gpr_cuda_vmm_span;

/* What this process shares over descriptor channels: pools (§9b) and VMM
 * spans (§9d), each numbered from 1. */
typedef struct gpr_cuda_exports {
  pthread_mutex_t lock;
  gpr_cuda_pool_export *pools;
  uint64_t pool_count;
  struct gpr_cuda_vmm_span *spans;
  uint64_t span_count;
} gpr_cuda_exports;

GPR_INLINE gpr_cuda_exports *gpr_cuda_exports_instance(void) {
  static gpr_cuda_exports exports = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, NULL, 0};
  return &exports;
}

/* The channel's answer for kind 3: pool `id`'s descriptor (1), or none (0). */
GPR_INLINE uint32_t gpr_cuda_pool_lookup(void *context, uint16_t kind, uint64_t id, int *fds, uint64_t *sizes) {
  (void)context;
  (void)sizes;
  gpr_cuda_exports *x = gpr_cuda_exports_instance();
  uint32_t found = 0;
  pthread_mutex_lock(&x->lock);
  for (gpr_cuda_pool_export *e = x->pools; e && kind == GPR_MEM_CUDA_POOL && !found; e = e->next)
    if (e->id == id) fds[found++] = e->fd;
  pthread_mutex_unlock(&x->lock);
  return found;
}

/* This process's number for `pool`, exporting its descriptor the first time. */
GPR_INLINE int gpr_cuda_pool_id(const gpr_cuda *d, CUmemoryPool pool, uint64_t *id, gpr_error *err) {
  gpr_cuda_exports *x = gpr_cuda_exports_instance();
  int rc = 0;
  pthread_mutex_lock(&x->lock);
  gpr_cuda_pool_export *e = x->pools;
  while (e && e->pool != pool) e = e->next;
  if (!e) {
    int fd = -1;
    CUresult cu = d->cuMemPoolExportToShareableHandle(&fd, pool, GPR_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    e = cu == 0 ? (gpr_cuda_pool_export *)calloc(1, sizeof *e) : NULL;
    if (cu != 0)
      rc = gpr_fail(err, GPR_E_NOT_EXPORTABLE, 0, "memory of a stream-ordered pool made without the POSIX "
                    "file-descriptor handle type (cudaMallocAsync's default pool is one) cannot be shared (CUDA %d)", cu);
    else if (!e) {
      close(fd);
      rc = gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "out of memory");
    } else {
      e->next = x->pools; /* a compound literal here would not be C++ */
      e->pool = pool;
      e->id = ++x->pool_count;
      e->fd = fd;
      x->pools = e;
    }
  }
  if (rc == 0) *id = e->id;
  pthread_mutex_unlock(&x->lock);
  return rc;
}

/* VMM memory this process made to share (SPEC.md §9d), as Node's
 * DeviceBuffer.alloc(n, { vmm: true }) makes it: chunks of 20 MiB (PyTorch's
 * expandable-segment size) created with the POSIX file-descriptor handle
 * type and mapped side by side. Each allocation is one span whose chunk
 * descriptors are exported once and handed out by the producer's descriptor
 * channel until gpr_cuda_vmm_free(). */
enum { GPR_CUDA_VMM_CHUNK_BYTES = 20u << 20 };

typedef struct gpr_cuda_vmm_shape {
  CUdeviceptr base;
  uint64_t bytes;   /* reserved and mapped: the sum of the chunks' sizes */
  uint64_t span;    /* alloc_id on the wire: from 1, never reused in this process */
  int device;
  uint32_t chunks;
} gpr_cuda_vmm_shape;

typedef struct gpr_cuda_vmm_span {
  struct gpr_cuda_vmm_span *next;
  gpr_cuda_vmm_shape shape;
  CUmemGenericAllocationHandle handles[GPR_CHANNEL_MAX_FDS];
  int fds[GPR_CHANNEL_MAX_FDS];
  uint64_t sizes[GPR_CHANNEL_MAX_FDS];
} gpr_cuda_vmm_span;

/* Unmaps `mapped` bytes of `s` and lets its chunks, range and descriptors go. */
GPR_INLINE void gpr_cuda_vmm_destroy(const gpr_cuda *d, gpr_cuda_vmm_span *s, uint64_t mapped) {
  if (mapped) d->cuMemUnmap(s->shape.base, mapped);
  for (uint32_t i = 0; i < s->shape.chunks; i++) {
    d->cuMemRelease(s->handles[i]);
    if (s->fds[i] >= 0) close(s->fds[i]);
  }
  if (s->shape.base) d->cuMemAddressFree(s->shape.base, s->shape.bytes);
  free(s);
}

/* Creates, exports and maps the chunks of `s` (shape.bytes, granularity-aligned)
 * at shape.base; returns the bytes mapped and leaves the failing call's result
 * in *rc. */
GPR_INLINE uint64_t gpr_cuda_vmm_map(const gpr_cuda *d, gpr_cuda_vmm_span *s, const CUmemAllocationProp *prop,
                                     uint64_t chunk, CUresult *rc, const char **call) {
  uint64_t mapped = 0;
  while (*rc == 0 && mapped < s->shape.bytes) {
    uint64_t size = s->shape.bytes - mapped < chunk ? s->shape.bytes - mapped : chunk;
    uint32_t i = s->shape.chunks;
    s->fds[i] = -1;
    if ((*rc = d->cuMemCreate(&s->handles[i], size, prop, 0)) != 0) return *call = "cuMemCreate", mapped;
    s->shape.chunks++;
    *rc = d->cuMemExportToShareableHandle(&s->fds[i], s->handles[i], GPR_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (*rc != 0) return *call = "cuMemExportToShareableHandle", mapped;
    if ((*rc = d->cuMemMap(s->shape.base + mapped, size, 0, s->handles[i], 0)) != 0) return *call = "cuMemMap", mapped;
    s->sizes[i] = size;
    mapped += size;
  }
  return mapped;
}

/* Allocates `bytes` of VMM memory on device `ordinal` (made current on this
 * thread) that gpr_cuda_describe_for() describes as one cuda-vmm span; free it
 * with gpr_cuda_vmm_free() once no frame names it. */
GPR_INLINE int gpr_cuda_vmm_alloc(const gpr_cuda *d, int ordinal, uint64_t bytes, CUdeviceptr *out, gpr_error *err) {
  if (bytes == 0) return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "a VMM allocation of 0 bytes");
  int rc = gpr_cuda_use_device(d, ordinal, err);
  if (rc != 0) return rc;
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = GPR_CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = GPR_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = GPR_CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  size_t granularity = 0;
  GPR_CUDA_TRY(d, cuMemGetAllocationGranularity(&granularity, &prop, GPR_CU_MEM_ALLOC_GRANULARITY_MINIMUM), err);
  if (granularity == 0 || bytes > UINT64_MAX / 2) return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "%llu bytes of VMM memory", (unsigned long long)bytes);
  uint64_t total = (bytes + granularity - 1) / granularity * granularity;
  /* A span travels in one channel reply: past 253 chunks, chunks grow instead. */
  uint64_t chunk = (total + GPR_CHANNEL_MAX_FDS - 1) / GPR_CHANNEL_MAX_FDS;
  if (chunk < GPR_CUDA_VMM_CHUNK_BYTES) chunk = GPR_CUDA_VMM_CHUNK_BYTES;
  chunk = (chunk + granularity - 1) / granularity * granularity;
  gpr_cuda_vmm_span *s = (gpr_cuda_vmm_span *)calloc(1, sizeof *s);
  if (!s) return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "out of memory");
  s->shape.bytes = total;
  s->shape.device = ordinal;
  const char *call = "cuMemAddressReserve";
  CUresult cu = d->cuMemAddressReserve(&s->shape.base, total, 0, 0, 0);
  uint64_t mapped = gpr_cuda_vmm_map(d, s, &prop, chunk, &cu, &call);
  CUmemAccessDesc access = {{GPR_CU_MEM_LOCATION_TYPE_DEVICE, ordinal}, GPR_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (cu == 0) cu = d->cuMemSetAccess(s->shape.base, total, &access, 1), call = "cuMemSetAccess";
  if (cu != 0) {
    gpr_cuda_vmm_destroy(d, s, mapped);
    return gpr_cuda_check(d, cu, call, err);
  }
  gpr_cuda_exports *x = gpr_cuda_exports_instance();
  pthread_mutex_lock(&x->lock);
  s->shape.span = ++x->span_count;
  s->next = x->spans;
  x->spans = s;
  pthread_mutex_unlock(&x->lock);
  *out = s->shape.base;
  return 0;
}

/* Unmaps and frees VMM memory of gpr_cuda_vmm_alloc(); INVALID_ARGUMENT when
 * `base` is not one. Its span is no longer served: only free it once every
 * frame naming it was released. Waits for a descriptor channel that is
 * sending its descriptors. */
GPR_INLINE int gpr_cuda_vmm_free(const gpr_cuda *d, CUdeviceptr base, gpr_error *err) {
  gpr_cuda_exports *x = gpr_cuda_exports_instance();
  gpr_cuda_vmm_span *s = NULL;
  pthread_mutex_lock(gpr_channel_sending());
  pthread_mutex_lock(&x->lock);
  for (gpr_cuda_vmm_span **at = &x->spans; *at; at = &(*at)->next)
    if ((*at)->shape.base == base) {
      s = *at;
      *at = s->next;
      break;
    }
  pthread_mutex_unlock(&x->lock);
  pthread_mutex_unlock(gpr_channel_sending());
  if (!s) return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "%#llx is not VMM memory of gpr_cuda_vmm_alloc()", base);
  gpr_cuda_vmm_destroy(d, s, s->shape.bytes);
  return 0;
}

/* The span holding [ptr, ptr + length) into *out (a copy); 0 when none does,
 * -1 when the range starts in one and overruns it. */
GPR_INLINE int gpr_cuda_vmm_find(CUdeviceptr ptr, uint64_t length, gpr_cuda_vmm_shape *out) {
  gpr_cuda_exports *x = gpr_cuda_exports_instance();
  int found = 0;
  pthread_mutex_lock(&x->lock);
  for (gpr_cuda_vmm_span *s = x->spans; s && !found; s = s->next)
    if (ptr >= s->shape.base && ptr - s->shape.base < s->shape.bytes) {
      found = length <= s->shape.bytes - (ptr - s->shape.base) ? 1 : -1;
      *out = s->shape;
    }
  pthread_mutex_unlock(&x->lock);
  return found;
}

/* The channel's answer for kind 4: span `id`'s chunk descriptors and sizes. */
GPR_INLINE uint32_t gpr_cuda_vmm_lookup(uint64_t id, int *fds, uint64_t *sizes) {
  gpr_cuda_exports *x = gpr_cuda_exports_instance();
  uint32_t found = 0;
  pthread_mutex_lock(&x->lock);
  for (gpr_cuda_vmm_span *s = x->spans; s && !found; s = s->next)
    if (s->shape.span == id) {
      memcpy(fds, s->fds, s->shape.chunks * sizeof *fds);
      memcpy(sizes, s->sizes, s->shape.chunks * sizeof *sizes);
      found = s->shape.chunks;
    }
  pthread_mutex_unlock(&x->lock);
  return found;
}

/* The descriptor channel's lookup for the memory this process shares: pools
 * (kind 3) and VMM spans (kind 4). */
GPR_INLINE uint32_t gpr_cuda_lookup(void *context, uint16_t kind, uint64_t id, int *fds, uint64_t *sizes) {
  return kind == GPR_MEM_CUDA_VMM ? gpr_cuda_vmm_lookup(id, fds, sizes) : gpr_cuda_pool_lookup(context, kind, id, fds, sizes);
}

/* Describes [ptr, ptr + length) inside span `s` as a cuda-vmm buffer. */
GPR_INLINE int gpr_cuda_describe_vmm(const gpr_cuda *d, const gpr_cuda_vmm_shape *s, CUdeviceptr ptr, uint64_t length,
                                     gpr_body_buffer *out, gpr_error *err) {
  memset(out, 0, sizeof *out);
  int rc = gpr_cuda_name_device(d, s->device, out, err);
  if (rc != 0) return rc;
  out->kind = GPR_MEM_CUDA_VMM;
  out->offset = ptr - s->base;
  out->length = length;
  out->alloc_id = s->span;
  gpr_vmm_handle_write(out->handle, s->bytes, s->chunks);
  return 0;
}

/* gpr_cuda_describe() for producer `p`, which also takes memory of an
 * exportable stream-ordered pool: described as cuda-pool (SPEC.md §9b), and
 * the producer's descriptor channel served from then on. Keep freed memory in
 * such a pool (a high CU_MEMPOOL_ATTR_RELEASE_THRESHOLD): consumers then
 * import each allocation in microseconds. Each call exports pool memory
 * afresh (cuMemPoolExportPointer: about 12 us at 1 MiB, 70 us at 256 MiB on
 * an H200 host), so a producer publishing the same allocation again keeps
 * the descriptor it got (only offset and length change within it); a new
 * allocation needs a new call, even at a freed one's address. */
GPR_INLINE int gpr_cuda_describe_for(const gpr_cuda *d, gpr_producer *p, CUdeviceptr ptr, uint64_t length,
                                     gpr_body_buffer *out, gpr_error *err) {
  gpr_cuda_vmm_shape span = {0, 0, 0, 0, 0};
  int vmm = gpr_cuda_vmm_find(ptr, length, &span);
  if (vmm < 0)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "%llu bytes at %#llx overrun their VMM allocation",
                    (unsigned long long)length, ptr);
  if (vmm > 0) {
    int rc = gpr_cuda_describe_vmm(d, &span, ptr, length, out, err);
    return rc != 0 ? rc : gpr_producer_serve_descriptors(p, gpr_cuda_lookup, NULL, err);
  }
  CUmemoryPool pool = NULL;
  if (d->cuPointerGetAttribute(&pool, GPR_CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr) != 0 || !pool)
    return gpr_cuda_describe(d, ptr, length, out, err);
  CUdeviceptr base = 0;
  unsigned long long alloc_id = 0;
  uint64_t pool_id = 0;
  CUmemPoolPtrExportData data;
  int rc = gpr_cuda_allocation_of(d, ptr, length, &base, err);
  if (rc == 0) rc = gpr_cuda_pool_id(d, pool, &pool_id, err);
  if (rc != 0) return rc;
  GPR_CUDA_TRY(d, cuMemPoolExportPointer(&data, base), err);
  GPR_CUDA_TRY(d, cuPointerGetAttribute(&alloc_id, GPR_CU_POINTER_ATTRIBUTE_BUFFER_ID, base), err);
  memset(out, 0, sizeof *out);
  rc = gpr_cuda_device_of_pointer(d, base, out, err);
  if (rc != 0) return rc;
  out->kind = GPR_MEM_CUDA_POOL;
  out->offset = ptr - base;
  out->length = length;
  out->alloc_id = alloc_id;
  out->pool_id = pool_id;
  memcpy(out->handle, data.reserved, GPR_HANDLE_BYTES);
  return gpr_producer_serve_descriptors(p, gpr_cuda_lookup, NULL, err);
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
  CUdeviceptr *ptrs;             /* per buffer: base + offset, 0 unless a device kind */
  CUdeviceptr *opened;           /* distinct cuda-ipc allocations opened, closed by unmap */
  uint32_t opened_count;
  CUdeviceptr *imported;         /* distinct cuda-pool allocations imported, freed by unmap */
  uint32_t imported_count;
  CUdeviceptr *spans;            /* distinct cuda-vmm spans mapped, unmapped by unmap */
  uint64_t *span_bytes;
  uint32_t span_count;
} gpr_cuda_frame_map;

/* Closes and frees what the frame opened: call it before releasing the
 * frame (a pool import must be freed before the producer frees the memory). */
GPR_INLINE void gpr_cuda_unmap_frame(const gpr_cuda *d, gpr_cuda_frame_map *m) {
  for (uint32_t i = 0; i < m->opened_count; i++) d->cuIpcCloseMemHandle(m->opened[i]);
  for (uint32_t i = 0; i < m->imported_count; i++) d->cuMemFree(m->imported[i]);
  for (uint32_t i = 0; i < m->span_count; i++) {
    d->cuMemUnmap(m->spans[i], m->span_bytes[i]);
    d->cuMemAddressFree(m->spans[i], m->span_bytes[i]);
  }
  free(m->ptrs);
  free(m->opened);
  free(m->imported);
  free(m->spans);
  free(m->span_bytes);
  memset(m, 0, sizeof *m);
}

/* Who published a frame: where its pool descriptors come from (SPEC.md §9c). */
typedef struct gpr_cuda_origin {
  const char *segment;
  uint32_t producer, producer_gen;
} gpr_cuda_origin;

/* The pools this process imported, by (segment, producer, generation, pool
 * id): each is fetched over its producer's channel and imported once. */
typedef struct gpr_cuda_pool_import {
  struct gpr_cuda_pool_import *next;
  char segment[GPR_NAME_MAX + 1];
  uint32_t producer, producer_gen;
  uint64_t pool_id;
  CUmemoryPool pool;
} gpr_cuda_pool_import;

GPR_INLINE int gpr_cuda_pool(const gpr_cuda *d, const gpr_cuda_origin *o, uint64_t pool_id, CUmemoryPool *out,
                             gpr_error *err) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static gpr_cuda_pool_import *pools = NULL;
  pthread_mutex_lock(&lock);
  gpr_cuda_pool_import *p = pools;
  while (p && (p->producer != o->producer || p->producer_gen != o->producer_gen || p->pool_id != pool_id ||
               strcmp(p->segment, o->segment) != 0))
    p = p->next;
  int rc = 0, fd = -1;
  if (!p) {
    p = (gpr_cuda_pool_import *)calloc(1, sizeof *p);
    rc = p ? gpr_channel_fetch(o->segment, o->producer, o->producer_gen, GPR_MEM_CUDA_POOL, pool_id, &fd, err)
           : gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "out of memory");
    if (rc == 0)
      rc = gpr_cuda_check(d, d->cuMemPoolImportFromShareableHandle(&p->pool, (void *)(intptr_t)fd,
                                                                   GPR_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                          "cuMemPoolImportFromShareableHandle", err);
    if (fd >= 0) close(fd);
    if (rc == 0) {
      snprintf(p->segment, sizeof p->segment, "%s", o->segment);
      p->producer = o->producer;
      p->producer_gen = o->producer_gen;
      p->pool_id = pool_id;
      p->next = pools;
      pools = p;
    } else {
      free(p);
    }
  }
  if (rc == 0) *out = p->pool;
  pthread_mutex_unlock(&lock);
  return rc;
}

/* Imports the pool allocation of buffer b (cuda-pool) for this frame. */
GPR_INLINE int gpr_cuda_import_buffer(const gpr_cuda *d, const gpr_frame_desc *f, uint32_t b, const gpr_cuda_origin *o,
                                      gpr_cuda_frame_map *m, gpr_error *err) {
  const gpr_body_buffer *buf = &f->buffers[b];
  if (!o)
    return gpr_fail(err, GPR_E_UNSUPPORTED, 0, "buffer %u is cuda-pool memory: map the frame with "
                    "gpr_cuda_map_received(), which knows its producer (SPEC.md §9b)", b);
  CUmemoryPool pool;
  CUmemPoolPtrExportData data;
  CUdeviceptr base = 0;
  size_t size = 0;
  int rc = gpr_cuda_pool(d, o, buf->pool_id, &pool, err);
  if (rc != 0) return rc;
  memcpy(data.reserved, buf->handle, sizeof data.reserved);
  GPR_CUDA_TRY(d, cuMemPoolImportPointer(&base, pool, &data), err);
  m->imported[m->imported_count++] = base;
  if (d->cuMemGetAddressRange(&base, &size, base) != 0 || !gpr_range_ok(buf->offset, buf->length, size))
    return gpr_fail(err, GPR_E_FRAME_BOUNDS, 0, "buffer %u lies outside its %zu-byte allocation", b, size);
  m->ptrs[b] = base + buf->offset;
  return 0;
}

/* Maps `count` chunk descriptors (closed here) side by side at a new range of
 * `total` bytes, read-write for `device`; records the range in m. */
GPR_INLINE int gpr_cuda_map_chunks(const gpr_cuda *d, const int *fds, const uint64_t *sizes, uint32_t count,
                                   uint64_t total, int device, CUdeviceptr *base, gpr_cuda_frame_map *m, gpr_error *err) {
  int rc = gpr_cuda_check(d, d->cuMemAddressReserve(base, total, 0, 0, 0), "cuMemAddressReserve", err);
  uint64_t mapped = 0;
  for (uint32_t i = 0; i < count; i++) {
    CUmemGenericAllocationHandle h = 0;
    if (rc == 0)
      rc = gpr_cuda_check(d, d->cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fds[i],
                                                               GPR_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                          "cuMemImportFromShareableHandle", err);
    close(fds[i]);
    if (rc != 0) continue;
    rc = gpr_cuda_check(d, d->cuMemMap(*base + mapped, sizes[i], 0, h, 0), "cuMemMap", err);
    d->cuMemRelease(h); /* the mapping holds the allocation */
    if (rc == 0) mapped += sizes[i];
  }
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = GPR_CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = GPR_CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (rc == 0) rc = gpr_cuda_check(d, d->cuMemSetAccess(*base, total, &access, 1), "cuMemSetAccess", err);
  if (rc != 0) {
    if (mapped) d->cuMemUnmap(*base, mapped);
    if (*base) d->cuMemAddressFree(*base, total);
    return rc;
  }
  m->spans[m->span_count] = *base;
  m->span_bytes[m->span_count++] = total;
  return 0;
}

/* Maps the span of buffer b (cuda-vmm) for this frame (SPEC.md §9d). */
GPR_INLINE int gpr_cuda_map_span(const gpr_cuda *d, const gpr_frame_desc *f, uint32_t b, const gpr_cuda_origin *o,
                                 int device, gpr_cuda_frame_map *m, gpr_error *err) {
  const gpr_body_buffer *buf = &f->buffers[b];
  if (!o)
    return gpr_fail(err, GPR_E_UNSUPPORTED, 0, "buffer %u is cuda-vmm memory: map the frame with "
                    "gpr_cuda_map_received(), which knows its producer (SPEC.md §9d)", b);
  int fds[GPR_CHANNEL_MAX_FDS];
  uint64_t sizes[GPR_CHANNEL_MAX_FDS], declared, total = 0;
  uint32_t count = 0, chunks;
  int rc = gpr_channel_fetch_many(o->segment, o->producer, o->producer_gen, GPR_MEM_CUDA_VMM, buf->alloc_id, fds, sizes,
                                  GPR_CHANNEL_MAX_FDS, &count, err);
  if (rc != 0) return rc;
  gpr_vmm_handle_read(buf->handle, &declared, &chunks);
  for (uint32_t i = 0; i < count; i++) total += sizes[i];
  if (count != chunks || total != declared) {
    for (uint32_t i = 0; i < count; i++) close(fds[i]);
    return gpr_fail(err, GPR_E_DESCRIPTOR_UNAVAILABLE, 0, "span %llu: %u chunks of %llu bytes, not the frame's %u of %llu",
                    (unsigned long long)buf->alloc_id, count, (unsigned long long)total, chunks,
                    (unsigned long long)declared);
  }
  CUdeviceptr base = 0;
  rc = gpr_cuda_map_chunks(d, fds, sizes, count, total, device, &base, m, err);
  if (rc != 0) return rc;
  if (!gpr_range_ok(buf->offset, buf->length, total))
    return gpr_fail(err, GPR_E_FRAME_BOUNDS, 0, "buffer %u lies outside its %llu-byte span", b, (unsigned long long)total);
  m->ptrs[b] = base + buf->offset;
  return 0;
}

/* Opens allocation of buffer b unless an earlier buffer of the frame did. */
GPR_INLINE int gpr_cuda_open_buffer(const gpr_cuda *d, const gpr_frame_desc *f, uint32_t b, const gpr_cuda_origin *origin,
                                    int device, gpr_cuda_frame_map *m, gpr_error *err) {
  const gpr_body_buffer *buf = &f->buffers[b];
  for (uint32_t e = 0; e < b; e++) {
    const gpr_body_buffer *o = &f->buffers[e];
    if (o->kind == buf->kind && o->alloc_id == buf->alloc_id && o->pool_id == buf->pool_id &&
        memcmp(o->handle, buf->handle, GPR_HANDLE_BYTES) == 0) {
      m->ptrs[b] = m->ptrs[e] - o->offset + buf->offset;
      return 0;
    }
  }
  if (buf->kind == GPR_MEM_CUDA_POOL) return gpr_cuda_import_buffer(d, f, b, origin, m, err);
  if (buf->kind == GPR_MEM_CUDA_VMM) return gpr_cuda_map_span(d, f, b, origin, device, m, err);
  CUipcMemHandle h;
  CUdeviceptr base = 0;
  memcpy(h.reserved, buf->handle, GPR_HANDLE_BYTES);
  GPR_CUDA_TRY(d, cuIpcOpenMemHandle(&base, h, GPR_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), err);
  m->opened[m->opened_count++] = base;
  m->ptrs[b] = base + buf->offset;
  return 0;
}

/* Opens every device buffer of `f` on its device (made current on this
 * thread) and orders `stream` after the producer's event; reads issued on
 * `stream` then see the producer's writes. Each allocation is opened once;
 * a long-running consumer should cache cuda-ipc openings keyed on (handle,
 * alloc_id) instead (SPEC.md §9a). cuda-pool buffers need the frame's
 * producer (`origin`; NULL refuses them with UNSUPPORTED). Frames this
 * process published itself cannot be opened (CUDA refuses). */
GPR_INLINE int gpr_cuda_map_frame_from(const gpr_cuda *d, const gpr_frame_desc *f, const gpr_cuda_origin *origin,
                                       CUstream stream, gpr_cuda_frame_map *m, gpr_error *err) {
  memset(m, 0, sizeof *m);
  uint32_t n = f->buffer_count ? f->buffer_count : 1u;
  m->ptrs = (CUdeviceptr *)calloc(n, sizeof *m->ptrs);
  m->opened = (CUdeviceptr *)calloc(n, sizeof *m->opened);
  m->imported = (CUdeviceptr *)calloc(n, sizeof *m->imported);
  m->spans = (CUdeviceptr *)calloc(n, sizeof *m->spans);
  m->span_bytes = (uint64_t *)calloc(n, sizeof *m->span_bytes);
  int rc = m->ptrs && m->opened && m->imported && m->spans && m->span_bytes
               ? 0 : gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "out of memory");
  int device = -1;
  for (uint32_t b = 0; rc == 0 && b < f->buffer_count; b++) {
    uint16_t kind = f->buffers[b].kind;
    if (kind != GPR_MEM_CUDA_IPC && kind != GPR_MEM_CUDA_POOL && kind != GPR_MEM_CUDA_VMM) continue;
    int ordinal = -1;
    rc = gpr_cuda_device_of(d, f->buffers[b].device_uuid, &ordinal, err);
    if (rc == 0 && device < 0) rc = gpr_cuda_use_device(d, device = ordinal, err);
    if (rc == 0 && ordinal != device)
      rc = gpr_fail(err, GPR_E_UNSUPPORTED, 0, "a frame spanning devices needs one map per device");
    if (rc == 0) rc = gpr_cuda_open_buffer(d, f, b, origin, device, m, err);
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

/* gpr_cuda_map_frame_from() of a frame description alone: cuda-ipc only
 * (pool and VMM memory need the frame's producer). */
GPR_INLINE int gpr_cuda_map_frame(const gpr_cuda *d, const gpr_frame_desc *f, CUstream stream,
                                  gpr_cuda_frame_map *m, gpr_error *err) {
  return gpr_cuda_map_frame_from(d, f, NULL, stream, m, err);
}

/* Maps a frame gpr_consumer_next() returned: every device kind. */
GPR_INLINE int gpr_cuda_map_received(const gpr_cuda *d, const gpr_frame *f, CUstream stream, gpr_cuda_frame_map *m,
                                     gpr_error *err) {
  gpr_cuda_origin origin = {f->consumer->seg.name, f->producer, f->producer_gen};
  return gpr_cuda_map_frame_from(d, &f->desc, &origin, stream, m, err);
}
#endif
#endif /* GPURING_CUDA_H */
