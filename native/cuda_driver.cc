#include "cuda_driver.h"
#include <dlfcn.h>

namespace gpuring::cuda {

namespace {

// Resolves each entry point by its current ABI name (the `_v2` variants where
// the driver has them) and fails the load if any is missing.
template <typename Fn>
bool Resolve(void *lib, Fn *slot, const char *name, std::string *missing) {
  *slot = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!*slot && missing->empty()) *missing = name;
  return *slot != nullptr;
}

Driver Load() {
  Driver d;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    d.error = std::string("no CUDA driver: ") + (why ? why : "libcuda.so.1 not found");
    return d;
  }
  std::string missing;
#define GPR_RESOLVE(field, name) Resolve(lib, &d.field, name, &missing)
  GPR_RESOLVE(cuInit, "cuInit");
  GPR_RESOLVE(cuDriverGetVersion, "cuDriverGetVersion");
  GPR_RESOLVE(cuGetErrorName, "cuGetErrorName");
  GPR_RESOLVE(cuGetErrorString, "cuGetErrorString");
  GPR_RESOLVE(cuDeviceGetCount, "cuDeviceGetCount");
  GPR_RESOLVE(cuDeviceGet, "cuDeviceGet");
  GPR_RESOLVE(cuDeviceGetName, "cuDeviceGetName");
  GPR_RESOLVE(cuDeviceGetUuid, "cuDeviceGetUuid_v2") || (missing.clear(), GPR_RESOLVE(cuDeviceGetUuid, "cuDeviceGetUuid"));
  GPR_RESOLVE(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  GPR_RESOLVE(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer");
  GPR_RESOLVE(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  GPR_RESOLVE(cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  GPR_RESOLVE(cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  GPR_RESOLVE(cuMemGetInfo, "cuMemGetInfo_v2");
  GPR_RESOLVE(cuMemAlloc, "cuMemAlloc_v2");
  GPR_RESOLVE(cuMemFree, "cuMemFree_v2");
  GPR_RESOLVE(cuMemHostAlloc, "cuMemHostAlloc");
  GPR_RESOLVE(cuMemFreeHost, "cuMemFreeHost");
  GPR_RESOLVE(cuMemHostRegister, "cuMemHostRegister_v2");
  GPR_RESOLVE(cuMemHostUnregister, "cuMemHostUnregister");
  GPR_RESOLVE(cuMemAllocManaged, "cuMemAllocManaged");
  GPR_RESOLVE(cuMemAllocAsync, "cuMemAllocAsync");
  GPR_RESOLVE(cuMemGetAddressRange, "cuMemGetAddressRange_v2");
  GPR_RESOLVE(cuPointerGetAttribute, "cuPointerGetAttribute");
  GPR_RESOLVE(cuIpcGetMemHandle, "cuIpcGetMemHandle");
  GPR_RESOLVE(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2");
  GPR_RESOLVE(cuIpcCloseMemHandle, "cuIpcCloseMemHandle");
  GPR_RESOLVE(cuIpcGetEventHandle, "cuIpcGetEventHandle");
  GPR_RESOLVE(cuIpcOpenEventHandle, "cuIpcOpenEventHandle");
  GPR_RESOLVE(cuEventCreate, "cuEventCreate");
  GPR_RESOLVE(cuEventRecord, "cuEventRecord");
  GPR_RESOLVE(cuEventQuery, "cuEventQuery");
  GPR_RESOLVE(cuEventSynchronize, "cuEventSynchronize");
  GPR_RESOLVE(cuEventDestroy, "cuEventDestroy_v2");
  GPR_RESOLVE(cuStreamCreate, "cuStreamCreate");
  GPR_RESOLVE(cuStreamDestroy, "cuStreamDestroy_v2");
  GPR_RESOLVE(cuStreamWaitEvent, "cuStreamWaitEvent");
  GPR_RESOLVE(cuStreamSynchronize, "cuStreamSynchronize");
  GPR_RESOLVE(cuStreamQuery, "cuStreamQuery");
  GPR_RESOLVE(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  GPR_RESOLVE(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  GPR_RESOLVE(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  GPR_RESOLVE(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  GPR_RESOLVE(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  GPR_RESOLVE(cuMemsetD8Async, "cuMemsetD8Async");
  GPR_RESOLVE(cuLaunchHostFunc, "cuLaunchHostFunc");
  GPR_RESOLVE(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity");
  GPR_RESOLVE(cuMemCreate, "cuMemCreate");
  GPR_RESOLVE(cuMemAddressReserve, "cuMemAddressReserve");
  GPR_RESOLVE(cuMemMap, "cuMemMap");
  GPR_RESOLVE(cuMemSetAccess, "cuMemSetAccess");
  GPR_RESOLVE(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle");
  GPR_RESOLVE(cuMemExportToShareableHandle, "cuMemExportToShareableHandle");
  GPR_RESOLVE(cuMemRelease, "cuMemRelease");
  GPR_RESOLVE(cuMemUnmap, "cuMemUnmap");
  GPR_RESOLVE(cuMemAddressFree, "cuMemAddressFree");
  GPR_RESOLVE(cuMemPoolCreate, "cuMemPoolCreate");
  GPR_RESOLVE(cuMemPoolSetAttribute, "cuMemPoolSetAttribute");
  GPR_RESOLVE(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
  GPR_RESOLVE(cuMemPoolExportToShareableHandle, "cuMemPoolExportToShareableHandle");
  GPR_RESOLVE(cuMemPoolExportPointer, "cuMemPoolExportPointer");
  GPR_RESOLVE(cuMemPoolImportFromShareableHandle, "cuMemPoolImportFromShareableHandle");
  GPR_RESOLVE(cuMemPoolImportPointer, "cuMemPoolImportPointer");
  GPR_RESOLVE(cuMemPoolDestroy, "cuMemPoolDestroy");
#undef GPR_RESOLVE
  if (!missing.empty()) {
    d.error = "libcuda.so.1 lacks " + missing + " (driver too old)";
    return d;  // the library stays loaded: unloading a driver is not safe
  }
  d.cuDriverGetVersion(&d.version);
  CUresult rc = d.cuInit(0);
  if (rc != CUDA_SUCCESS) {
    d.error = "cuInit failed: " + d.Describe(rc);
    return d;
  }
  d.loaded = true;
  return d;
}

}  // namespace

const Driver &Driver::Get() {
  static const Driver driver = Load();  // thread-safe, once per process
  return driver;
}

std::string Driver::Describe(CUresult rc) const {
  const char *name = nullptr, *text = nullptr;
  if (cuGetErrorName) cuGetErrorName(rc, &name);
  if (cuGetErrorString) cuGetErrorString(rc, &text);
  return std::string(name ? name : "CUDA_ERROR_UNKNOWN") + " (" + std::to_string(rc) + ")" + (text ? std::string(": ") + text : "");
}

}  // namespace gpuring::cuda
