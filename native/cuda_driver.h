// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"). Nothing
// links against CUDA: the addon loads and every host feature works where there
// is no driver, and CUDA calls there fail with CUDA_UNAVAILABLE. Types and
// constants are declared here (the build machine has no cuda.h); their values
// are the driver ABI's. `_v2` entry points are resolved by name.
#pragma once
#include <cstdint>
#include <string>

namespace gpuring::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
using CUcontext = CUctx_st *;
struct CUstream_st;
using CUstream = CUstream_st *;
struct CUevent_st;
using CUevent = CUevent_st *;
struct CUipcMemHandle { char reserved[64]; };
struct CUipcEventHandle { char reserved[64]; };
struct CUuuid { unsigned char bytes[16]; };
using CUhostFn = void (*)(void *);
using CUmemGenericAllocationHandle = unsigned long long;
// Virtual memory management (cuMemCreate): allocations of other processes are
// mapped from their descriptors (cuda-vmm), and tests make such memory.
struct CUmemLocation { int type; int id; };
struct CUmemAllocationProp {
  int type;                  // CU_MEM_ALLOCATION_TYPE_PINNED
  int requestedHandleTypes;  // 0: none
  CUmemLocation location;
  void *win32HandleMetaData;
  unsigned char allocFlags[8];
};
struct CUmemAccessDesc { CUmemLocation location; int flags; };
struct CUmemPoolHandle_st;
using CUmemoryPool = CUmemPoolHandle_st *;
struct CUmemPoolProps {
  int allocType;             // CU_MEM_ALLOCATION_TYPE_PINNED
  int handleTypes;           // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: exportable
  CUmemLocation location;
  void *win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};
struct CUmemPoolPtrExportData { unsigned char reserved[64]; };
static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps is 88 bytes in the driver ABI");
static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp is 32 bytes in the driver ABI");
static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc is 12 bytes in the driver ABI");

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_ALREADY_MAPPED = 208;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr unsigned CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned CU_EVENT_INTERPROCESS = 0x4;
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 0x1;
constexpr unsigned CU_MEMHOSTREGISTER_PORTABLE = 0x1;
constexpr unsigned CU_MEM_ATTACH_GLOBAL = 0x1;
constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
constexpr int CU_POINTER_ATTRIBUTE_BUFFER_ID = 7;
constexpr int CU_POINTER_ATTRIBUTE_IS_MANAGED = 8;
constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
constexpr int CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10;
constexpr int CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17;
constexpr unsigned CU_MEMORYTYPE_HOST = 1;
constexpr unsigned CU_MEMORYTYPE_DEVICE = 2;
constexpr int CU_MEM_ALLOCATION_TYPE_PINNED = 1;
constexpr int CU_MEM_LOCATION_TYPE_DEVICE = 1;
constexpr int CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3;
constexpr int CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1;
constexpr int CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4;

struct Driver {
  bool loaded = false;
  std::string error;  // why the driver is unusable, when !loaded
  int version = 0;

  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int *) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char **) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char **) = nullptr;
  CUresult (*cuDeviceGetCount)(int *) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice *, int) = nullptr;
  CUresult (*cuDeviceGetName)(char *, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t *, CUdevice) = nullptr;
  CUresult (*cuDeviceCanAccessPeer)(int *, CUdevice, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice) = nullptr;
  CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxPopCurrent)(CUcontext *) = nullptr;
  CUresult (*cuMemGetInfo)(size_t *, size_t *) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemHostAlloc)(void **, size_t, unsigned) = nullptr;
  CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned) = nullptr;
  CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream) = nullptr;
  CUresult (*cuMemFreeHost)(void *) = nullptr;
  CUresult (*cuMemHostRegister)(void *, size_t, unsigned) = nullptr;
  CUresult (*cuMemHostUnregister)(void *) = nullptr;
  CUresult (*cuMemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr) = nullptr;
  CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr) = nullptr;
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr) = nullptr;
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned) = nullptr;
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr) = nullptr;
  CUresult (*cuIpcGetEventHandle)(CUipcEventHandle *, CUevent) = nullptr;
  CUresult (*cuIpcOpenEventHandle)(CUevent *, CUipcEventHandle) = nullptr;
  CUresult (*cuEventCreate)(CUevent *, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuStreamCreate)(CUstream *, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuStreamQuery)(CUstream) = nullptr;
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t) = nullptr;
  CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream) = nullptr;
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream) = nullptr;
  CUresult (*cuLaunchHostFunc)(CUstream, CUhostFn, void *) = nullptr;
  CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int) = nullptr;
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) = nullptr;
  CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t) = nullptr;
  CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int) = nullptr;
  CUresult (*cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int, unsigned long long) = nullptr;
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*cuMemUnmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemAddressFree)(CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *) = nullptr;
  CUresult (*cuMemPoolSetAttribute)(CUmemoryPool, int, void *) = nullptr;
  CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) = nullptr;
  CUresult (*cuMemPoolExportToShareableHandle)(void *, CUmemoryPool, int, unsigned long long) = nullptr;
  CUresult (*cuMemPoolExportPointer)(CUmemPoolPtrExportData *, CUdeviceptr) = nullptr;
  CUresult (*cuMemPoolImportFromShareableHandle)(CUmemoryPool *, void *, int, unsigned long long) = nullptr;
  CUresult (*cuMemPoolImportPointer)(CUdeviceptr *, CUmemoryPool, CUmemPoolPtrExportData *) = nullptr;
  CUresult (*cuMemPoolDestroy)(CUmemoryPool) = nullptr;

  // The process-wide driver, loaded and initialized on first use.
  static const Driver &Get();
  // "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"
  std::string Describe(CUresult rc) const;
};

}  // namespace gpuring::cuda
