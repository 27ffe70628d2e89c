#include "cuda_api.h"
#include <cstdio>
#include <string>
#include "cuda_context.h"
#include "gpuring.h"
#include "errors.h"
#include "js_values.h"
#include "vmm_memory.h"

namespace gpuring::cuda {

namespace {

std::string UuidText(const CUuuid &u) {
  char s[48];
  const unsigned char *b = u.bytes;
  snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

// Whether legacy CUDA IPC can export memory on this device: allocate, ask for
// a handle, free. (Opening it needs a second process; the GPU suite does that.)
Napi::Object IpcCheck(Napi::Env env, const Driver &d) {
  Napi::Object o = Napi::Object::New(env);
  CUdeviceptr p = 0;
  CUresult rc = d.cuMemAlloc(&p, 1 << 21);
  CUipcMemHandle h;
  if (rc == CUDA_SUCCESS) rc = d.cuIpcGetMemHandle(&h, p);
  if (p) d.cuMemFree(p);
  o.Set("ok", rc == CUDA_SUCCESS);
  if (rc != CUDA_SUCCESS) o.Set("reason", "cuIpcGetMemHandle: " + d.Describe(rc));
  return o;
}

Napi::Object Device(Napi::Env env, const Driver &d, int ordinal, int count) {
  ScopedContext ctx(env, ordinal);
  CUdevice dev;
  Check(env, d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  char name[256] = {0};
  CUuuid uuid{};
  size_t total = 0, free_bytes = 0, total_ctx = 0;
  Check(env, d.cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  Check(env, d.cuDeviceGetUuid(&uuid, dev), "cuDeviceGetUuid");
  Check(env, d.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  Check(env, d.cuMemGetInfo(&free_bytes, &total_ctx), "cuMemGetInfo");
  Napi::Object o = Napi::Object::New(env);
  o.Set("ordinal", ordinal);
  o.Set("name", std::string(name));
  o.Set("uuid", UuidText(uuid));
  o.Set("uuidBytes", Napi::Buffer<uint8_t>::Copy(env, uuid.bytes, 16));
  o.Set("totalBytes", static_cast<double>(total));
  o.Set("freeBytes", static_cast<double>(free_bytes));
  o.Set("ipc", IpcCheck(env, d));
  Napi::Array peers = Napi::Array::New(env, count);
  for (int j = 0; j < count; j++) {
    int can = 0;
    CUdevice other;
    if (j != ordinal && d.cuDeviceGet(&other, j) == CUDA_SUCCESS) d.cuDeviceCanAccessPeer(&can, dev, other);
    peers.Set(j, j == ordinal || can != 0);
  }
  o.Set("peerAccess", peers);
  return o;
}

// cudaInfo() -> { available, error?, driverVersion?, devices: [...] }
Napi::Value CudaInfo(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  const Driver &d = Driver::Get();
  Napi::Object o = Napi::Object::New(env);
  o.Set("available", d.loaded);
  if (d.version) o.Set("driverVersion", d.version);
  Napi::Array devices = Napi::Array::New(env);
  o.Set("devices", devices);
  if (!d.loaded) {
    o.Set("error", d.error);
    return o;
  }
  int count = 0;
  Check(env, d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  for (int i = 0; i < count; i++) devices.Set(i, Device(env, d, i, count));
  return o;
}

// deviceUuids() -> Buffer[16] per visible device, by ordinal (cheap: no allocation)
Napi::Value DeviceUuids(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  const Driver &d = Require(env);
  int count = 0;
  Check(env, d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  Napi::Array out = Napi::Array::New(env, count);
  for (int i = 0; i < count; i++) {
    CUdevice dev;
    CUuuid uuid{};
    Check(env, d.cuDeviceGet(&dev, i), "cuDeviceGet");
    Check(env, d.cuDeviceGetUuid(&uuid, dev), "cuDeviceGetUuid");
    out.Set(i, Napi::Buffer<uint8_t>::Copy(env, uuid.bytes, 16));
  }
  return out;
}

// deviceAlloc(ordinal, bytes) -> bigint
Napi::Value DeviceAlloc(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  ScopedContext ctx(env, info[0].As<Napi::Number>().Int32Value());
  CUdeviceptr p = 0;
  Check(env, ctx.driver().cuMemAlloc(&p, static_cast<size_t>(info[1].As<Napi::Number>().DoubleValue())), "cuMemAlloc");
  return Napi::BigInt::New(env, static_cast<uint64_t>(p));
}

// deviceFree(ordinal, ptr)
Napi::Value DeviceFree(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  ScopedContext ctx(env, info[0].As<Napi::Number>().Int32Value());
  CUdeviceptr p = DevicePtr(info[1]);
  if (VmmAllocations::Get().Free(ctx.driver(), p)) return env.Undefined();
  Check(env, ctx.driver().cuMemFree(p), "cuMemFree");
  return env.Undefined();
}

// deviceUpload(ordinal, ptr, bytes: Uint8Array)
Napi::Value DeviceUpload(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  ScopedContext ctx(env, info[0].As<Napi::Number>().Int32Value());
  auto src = info[2].As<Napi::Uint8Array>();
  Check(env, ctx.driver().cuMemcpyHtoD(DevicePtr(info[1]), src.Data(), src.ByteLength()), "cuMemcpyHtoD");
  return env.Undefined();
}

// deviceDownload(ordinal, ptr, bytes) -> ArrayBuffer
Napi::Value DeviceDownload(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  ScopedContext ctx(env, info[0].As<Napi::Number>().Int32Value());
  size_t n = static_cast<size_t>(info[2].As<Napi::Number>().DoubleValue());
  Napi::ArrayBuffer out = Napi::ArrayBuffer::New(env, n);
  Check(env, ctx.driver().cuMemcpyDtoH(out.Data(), DevicePtr(info[1]), n), "cuMemcpyDtoH");
  return out;
}

// Device memory from the virtual memory management API (what PyTorch's
// expandable segments use): physical memory mapped at a reserved range.
CUdeviceptr AllocVmm(Napi::Env env, const Driver &d, size_t n) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  size_t granularity = 0;
  Check(env, d.cuMemGetAllocationGranularity(&granularity, &prop, 0), "cuMemGetAllocationGranularity");
  n = (n + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle physical = 0;
  CUdeviceptr p = 0;
  Check(env, d.cuMemCreate(&physical, n, &prop, 0), "cuMemCreate");
  Check(env, d.cuMemAddressReserve(&p, n, 0, 0, 0), "cuMemAddressReserve");
  Check(env, d.cuMemMap(p, n, 0, physical, 0), "cuMemMap");
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  Check(env, d.cuMemSetAccess(p, n, &access, 1), "cuMemSetAccess");
  return p;
}

// allocOtherMemory(kind: 'pinned' | 'managed' | 'pool' | 'vmm', bytes) -> bigint.
// Memory CUDA IPC cannot export, for showing that it is refused by name. Freed
// at exit.
Napi::Value AllocOtherMemory(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  ScopedContext ctx(env, 0);
  std::string kind = info[0].As<Napi::String>();
  size_t n = static_cast<size_t>(info[1].As<Napi::Number>().DoubleValue());
  if (kind == "vmm") return Napi::BigInt::New(env, static_cast<uint64_t>(AllocVmm(env, ctx.driver(), n)));
  if (kind == "pinned") {
    void *p = nullptr;
    Check(env, ctx.driver().cuMemHostAlloc(&p, n, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
    return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)));
  }
  CUdeviceptr p = 0;
  if (kind == "pool") {
    Check(env, ctx.driver().cuMemAllocAsync(&p, n, nullptr), "cuMemAllocAsync");
    Check(env, ctx.driver().cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  } else {
    Check(env, ctx.driver().cuMemAllocManaged(&p, n, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
  }
  return Napi::BigInt::New(env, static_cast<uint64_t>(p));
}

// rawCopySeconds(kind: 'dtoh' | 'htod' | 'dtod', device, bytes, iterations) ->
// seconds per copy of the driver's own async copy between plain allocations
// (pinned host memory for host sides), timed around a stream synchronize: the
// baseline benchmarks compare gpuring's copies with.
Napi::Value RawCopySeconds(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  std::string kind = info[0].As<Napi::String>();
  ScopedContext ctx(env, info[1].As<Napi::Number>().Int32Value());
  const Driver &d = ctx.driver();
  size_t n = static_cast<size_t>(info[2].As<Napi::Number>().DoubleValue());
  uint32_t iterations = info[3].As<Napi::Number>().Uint32Value();
  CUdeviceptr a = 0, b = 0;
  void *host = nullptr;
  CUstream stream = nullptr;
  Check(env, d.cuMemAlloc(&a, n), "cuMemAlloc");
  CUresult rc = kind == "dtod" ? d.cuMemAlloc(&b, n) : d.cuMemHostAlloc(&host, n, CU_MEMHOSTALLOC_PORTABLE);
  if (rc == CUDA_SUCCESS) rc = d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  double seconds = 0;
  for (uint32_t i = 0; rc == CUDA_SUCCESS && i <= iterations; i++) {  // iteration 0 warms up
    uint64_t t0 = gpr_monotonic_ns();
    rc = kind == "dtod" ? d.cuMemcpyDtoDAsync(b, a, n, stream)
         : kind == "dtoh" ? d.cuMemcpyDtoHAsync(host, a, n, stream)
                          : d.cuMemcpyHtoDAsync(a, host, n, stream);
    if (rc == CUDA_SUCCESS) rc = d.cuStreamSynchronize(stream);
    if (i) seconds += static_cast<double>(gpr_monotonic_ns() - t0) / 1e9;
  }
  if (stream) d.cuStreamDestroy(stream);
  if (b) d.cuMemFree(b);
  if (host) d.cuMemFreeHost(host);
  d.cuMemFree(a);
  Check(env, rc, "raw copy");
  return Napi::Number::New(env, seconds / iterations);
}

// streamCreate(ordinal) -> bigint: a non-blocking stream on the device's
// primary context (it does not synchronize with the legacy default stream).
Napi::Value StreamCreate(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  ScopedContext ctx(env, info[0].As<Napi::Number>().Int32Value());
  CUstream s = nullptr;
  Check(env, ctx.driver().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s)));
}

// streamSynchronize(ordinal, stream)
Napi::Value StreamSynchronize(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  ScopedContext ctx(env, info[0].As<Napi::Number>().Int32Value());
  Check(env, ctx.driver().cuStreamSynchronize(StreamOf(info[1])), "cuStreamSynchronize");
  return env.Undefined();
}

// streamDestroy(ordinal, stream): work already queued still completes.
Napi::Value StreamDestroy(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  ScopedContext ctx(env, info[0].As<Napi::Number>().Int32Value());
  Check(env, ctx.driver().cuStreamDestroy(StreamOf(info[1])), "cuStreamDestroy");
  return env.Undefined();
}

}  // namespace

void DefineCudaApi(Napi::Env env, Napi::Object exports) {
  exports.Set("cudaInfo", Napi::Function::New(env, CudaInfo));
  exports.Set("rawCopySeconds", Napi::Function::New(env, RawCopySeconds));
  exports.Set("allocOtherMemory", Napi::Function::New(env, AllocOtherMemory));
  exports.Set("deviceUuids", Napi::Function::New(env, DeviceUuids));
  exports.Set("deviceAlloc", Napi::Function::New(env, DeviceAlloc));
  exports.Set("deviceFree", Napi::Function::New(env, DeviceFree));
  exports.Set("deviceUpload", Napi::Function::New(env, DeviceUpload));
  exports.Set("deviceDownload", Napi::Function::New(env, DeviceDownload));
  exports.Set("streamCreate", Napi::Function::New(env, StreamCreate));
  exports.Set("streamSynchronize", Napi::Function::New(env, StreamSynchronize));
  exports.Set("streamDestroy", Napi::Function::New(env, StreamDestroy));
}

}  // namespace gpuring::cuda
