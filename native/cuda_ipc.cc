// CUDA IPC for frames: exporting device memory, mapping it in a consumer,
// interprocess events for ordering, and event-ordered copies to the host.
#include "cuda_ipc.h"
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <vector>
#include "cuda_context.h"
#include "errors.h"
#include "js_values.h"
#include "descriptor_channels.h"
#include "ipc_handle_cache.h"
#include "opened_events.h"
#include "pool_memory.h"
#include "vmm_memory.h"
#include "parallel_copy.h"
#include "huge_pages.h"
#include "pinned_host_pool.h"

namespace gpuring::cuda {

namespace {

[[noreturn]] void NotExportable(Napi::Env env, const std::string &why) {
  Throw(env, GPR_E_NOT_EXPORTABLE, "this memory cannot be shared with CUDA IPC: " + why);
}

template <typename T>
T Attribute(const Driver &d, int attr, CUdeviceptr p, CUresult *rc) {
  T value{};
  *rc = d.cuPointerGetAttribute(&value, attr, p);
  return value;
}

// Refuses, naming the reason, memory that cannot be exported; `*pool` is the
// pool of stream-ordered pool memory (exported as cuda-pool), else null.
int CheckExportable(Napi::Env env, const Driver &d, CUdeviceptr p, CUmemoryPool *pool) {
  CUresult rc;
  unsigned type = Attribute<unsigned>(d, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p, &rc);
  if (rc != CUDA_SUCCESS) NotExportable(env, "not memory CUDA knows (" + d.Describe(rc) + ")");
  if (Attribute<int>(d, CU_POINTER_ATTRIBUTE_IS_MANAGED, p, &rc) && rc == CUDA_SUCCESS)
    NotExportable(env, "managed (unified) memory from cudaMallocManaged");
  if (type == CU_MEMORYTYPE_HOST) NotExportable(env, "pinned host memory (cudaHostAlloc / cudaMallocHost)");
  int device = Attribute<int>(d, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p, &rc);
  Check(env, rc, "cuPointerGetAttribute(DEVICE_ORDINAL)");
  ScopedContext ctx(env, device);
  *pool = Attribute<CUmemoryPool>(d, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p, &rc);
  if (rc != CUDA_SUCCESS) *pool = nullptr;
  if (*pool) return device;
  int legacy = Attribute<int>(d, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p, &rc);
  if (rc == CUDA_SUCCESS && !legacy)
    NotExportable(env, "virtual memory management allocations (cuMemCreate) travel only when gpuring made them "
                       "(DeviceBuffer.alloc(n, { vmm: true })) or from Python (PyTorch's expandable segments)");
  return device;
}

// One exported allocation, of either device memory kind.
struct Exported {
  uint16_t kind = GPR_MEM_CUDA_IPC;
  uint64_t pool_id = 0;  // cuda-pool only
  unsigned char handle[64];
  Mapping m;
};

// Whether the allocation at `p` is still the one with buffer id `id`
// (addresses are reused; buffer ids are not).
bool SameAllocation(const Driver &d, CUdeviceptr p, uint64_t id) {
  CUresult rc;
  return Attribute<unsigned long long>(d, CU_POINTER_ATTRIBUTE_BUFFER_ID, p, &rc) == id && rc == CUDA_SUCCESS;
}

// A span of this process's VMM memory: its handle carries the span's size and
// chunk count (SPEC.md §9d); consumers fetch the chunks over the channel.
Exported FromSpan(const SpanExport &s) {
  Exported e;
  e.kind = GPR_MEM_CUDA_VMM;
  gpr_vmm_handle_write(e.handle, s.bytes, s.chunks);
  e.m.alloc_id = s.span;
  e.m.base = s.base;
  e.m.bytes = s.bytes;
  e.m.device = s.device;
  return e;
}

Exported FromPool(const PoolExport &pe) {
  Exported e;
  e.kind = GPR_MEM_CUDA_POOL;
  e.pool_id = pe.pool_id;
  memcpy(e.handle, pe.data.reserved, sizeof e.handle);
  e.m.alloc_id = pe.alloc_id;
  e.m.base = pe.base;
  e.m.bytes = pe.bytes;
  e.m.device = pe.device;
  return e;
}

// The export of the allocation containing `p`, from this process's earlier
// exports when the allocation there is still the one exported (same buffer id:
// one attribute query instead of eight driver calls), else made now: pool
// memory as cuda-pool, cudaMalloc memory as cuda-ipc.
Exported Export(Napi::Env env, const Driver &d, CUdeviceptr p) {
  Exported e;
  CUipcMemHandle h;
  PoolExport pe;
  SpanExport span;
  if (VmmAllocations::Get().Find(p, &span)) return FromSpan(span);  // freed ones leave the table: no reuse check
  if (PoolExports::Get().Find(p, &pe) && SameAllocation(d, p, pe.alloc_id)) return FromPool(pe);
  if (IpcHandleCache::Get().FindExport(p, &h, &e.m) && SameAllocation(d, p, e.m.alloc_id)) {
    memcpy(e.handle, h.reserved, sizeof e.handle);
    return e;
  }
  CUmemoryPool pool = nullptr;
  e.m.device = CheckExportable(env, d, p, &pool);
  ScopedContext ctx(env, e.m.device);
  if (pool) return FromPool(PoolExports::Get().Export(env, d, p, e.m.device, pool));
  size_t size = 0;
  Check(env, d.cuMemGetAddressRange(&e.m.base, &size, p), "cuMemGetAddressRange");
  e.m.bytes = size;
  Check(env, d.cuIpcGetMemHandle(&h, e.m.base), "cuIpcGetMemHandle");
  CUresult rc;
  e.m.alloc_id = Attribute<unsigned long long>(d, CU_POINTER_ATTRIBUTE_BUFFER_ID, e.m.base, &rc);
  Check(env, rc, "cuPointerGetAttribute(BUFFER_ID)");
  IpcHandleCache::Get().RememberExport(h, e.m.alloc_id, e.m.base, e.m.device, e.m.bytes);
  memcpy(e.handle, h.reserved, sizeof e.handle);
  return e;
}

// exportDeviceMemory(ptr, out): writes the export into the caller's Uint8Array
// `out` (at least kExportBytes, reused by the caller): the 64-byte handle, then
// u32 kind, i32 device, and u64 offset, base, allocation bytes, allocation id,
// pool id (little-endian, as JS reads them). Building a JS object with a Buffer
// here cost about 9 us per call on the GPU hosts, several times the lookup.
constexpr size_t kExportBytes = 112;
Napi::Value ExportDeviceMemory(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  const Driver &d = Require(env);
  CUdeviceptr p = DevicePtr(info[0]);
  auto out = info[1].As<Napi::Uint8Array>();
  if (out.ByteLength() < kExportBytes) Throw(env, GPR_E_INVALID_ARGUMENT, "exportDeviceMemory: the output holds fewer than 112 bytes");
  Exported e = Export(env, d, p);
  uint8_t *o = out.Data();
  const uint32_t kind = e.kind;
  const int32_t device = e.m.device;
  const uint64_t words[5] = {static_cast<uint64_t>(p - e.m.base), static_cast<uint64_t>(e.m.base), static_cast<uint64_t>(e.m.bytes),
                             static_cast<uint64_t>(e.m.alloc_id), e.pool_id};
  memcpy(o, e.handle, sizeof e.handle);
  memcpy(o + 64, &kind, 4);
  memcpy(o + 68, &device, 4);
  memcpy(o + 72, words, sizeof words);
  return env.Undefined();
}

// This process's ordinal of the device with `uuid`; throws DEVICE_NOT_FOUND.
// Ordinals differ between processes (CUDA_VISIBLE_DEVICES); UUIDs do not.
int OrdinalOfUuid(Napi::Env env, const Driver &d, const uint8_t *uuid) {
  static const std::vector<CUuuid> uuids = [&d] {
    std::vector<CUuuid> all;
    int count = 0;
    d.cuDeviceGetCount(&count);
    for (int i = 0; i < count; i++) {
      CUdevice dev;
      CUuuid u{};
      if (d.cuDeviceGet(&dev, i) == CUDA_SUCCESS) d.cuDeviceGetUuid(&u, dev);
      all.push_back(u);
    }
    return all;
  }();
  for (size_t i = 0; i < uuids.size(); i++)
    if (memcmp(uuids[i].bytes, uuid, 16) == 0) return static_cast<int>(i);
  char hex[33];
  for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
  Throw(env, GPR_E_DEVICE_NOT_FOUND,
        std::string("the frame's device (UUID ") + hex + ") is not visible in this process; check CUDA_VISIBLE_DEVICES");
}

// The references one frame took while mapping: one per distinct allocation.
struct FrameReferences {
  std::vector<CUipcMemHandle> legacy;
  std::vector<uint64_t> imported;  // PoolImports and VmmImports ids
  void DropAll() {
    for (const auto &h : legacy) IpcHandleCache::Get().Release(h);
    for (uint64_t id : imported) ReleaseImport(id);
  }
  // One reference per imported allocation or span per frame.
  void Keep(uint64_t id) {
    if (std::find(imported.begin(), imported.end(), id) != imported.end()) ReleaseImport(id);
    else imported.push_back(id);
  }
  static void ReleaseImport(uint64_t id) { PoolImports::Get().Release(id) || VmmImports::Get().Release(id); }
};

// Maps one device buffer; returns its allocation's base and size.
Mapping MapBuffer(Napi::Env env, const Driver &d, const gpr_body_buffer &b, int device, const std::string &segment,
                  const uint32_t producer[2], FrameReferences *refs) {
  Mapping m;
  if (b.kind == GPR_MEM_CUDA_POOL && DescriptorChannels::Get().Serves(segment, producer[0], producer[1])) {
    // Published by this process: CUDA imports pools into other processes
    // only, and the memory is mapped here already.
    PoolExport own;
    if (!PoolExports::Get().FindOwn(b.pool_id, b.alloc_id, &own))
      Throw(env, GPR_E_DESCRIPTOR_UNAVAILABLE, "this process's producer exported no such pool allocation");
    m.base = own.base;
    m.bytes = own.bytes;
    return m;
  }
  if (b.kind == GPR_MEM_CUDA_POOL || b.kind == GPR_MEM_CUDA_VMM) {
    ImportRef r = b.kind == GPR_MEM_CUDA_POOL
                      ? PoolImports::Get().Acquire(env, d, segment, producer[0], producer[1], b, device)
                      : VmmImports::Get().Acquire(env, d, segment, producer[0], producer[1], b, device);
    refs->Keep(r.id);
    m.base = r.base;
    m.bytes = r.bytes;
    return m;
  }
  CUipcMemHandle h;
  memcpy(h.reserved, b.handle, sizeof h.reserved);
  auto same = [&](const CUipcMemHandle &t) { return memcmp(t.reserved, h.reserved, sizeof h.reserved) == 0; };
  bool held = std::any_of(refs->legacy.begin(), refs->legacy.end(), same);
  m = IpcHandleCache::Get().Acquire(env, h, b.alloc_id, device, Publisher{InternSegment(segment), producer[0], producer[1]});
  if (held) IpcHandleCache::Get().Release(h);  // one reference per allocation per frame
  else refs->legacy.push_back(h);
  return m;
}

// mapFrame(body, segment, producer, producerGen, out) -> bytes written. Maps
// every device buffer of a validated frame body (of producer (index, gen) of
// ring `segment`: pool memory is fetched from its descriptor channel) in one
// call, and writes it all into the caller's Uint8Array `out`, reused from frame
// to frame (a new ArrayBuffer per call cost more than the mapping: mapFrame with
// the JS around it and the release took 3.5-3.7 us on the H100 host, 1.1-1.7 us
// without):
//   count u32 | legacy u32 | imported u32 | 0 u32 | count views | legacy handles | imported ids
// a view per buffer in wire order, 24 bytes `ptr u64 | length u64 | device i32 |
// mapped u32` (mapped 0: host or absent); then the 64-byte handle of each
// legacy-IPC reference taken and the u64 id of each pool-allocation or VMM
// span reference (one per distinct allocation or span), for ipcReleaseAll and
// importReleaseAll at release. When `out` is shorter than 16 + 96 bytes per
// buffer (the most this can write), it maps nothing and returns minus that size.
// On any error the references already taken are dropped.
Napi::Value MapFrame(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  const Driver &d = Require(env);
  auto body = info[0].As<Napi::Uint8Array>();
  std::string segment = info[1].As<Napi::String>();
  uint32_t producer[2] = {info[2].As<Napi::Number>().Uint32Value(), info[3].As<Napi::Number>().Uint32Value()};
  auto out = info[4].As<Napi::Uint8Array>();
  gpr_body_view view{};
  gpr_error err{};
  if (gpr_body_validate(body.Data(), body.ByteLength(), &view, &err) != 0) throw MakeError(env, err);
  uint32_t n = view.header->buffer_count;
  size_t most = 16 + static_cast<size_t>(n) * (24 + sizeof(CUipcMemHandle) + 8);
  if (out.ByteLength() < most) return Napi::Number::New(env, -static_cast<double>(most));
  uint8_t *views = out.Data() + 16;
  memset(views, 0, static_cast<size_t>(n) * 24);
  FrameReferences refs;
  try {
    for (uint32_t i = 0; i < n; i++) {
      gpr_body_buffer b;
      memcpy(&b, &view.buffers[i], sizeof b);
      if (b.kind != GPR_MEM_CUDA_IPC && b.kind != GPR_MEM_CUDA_POOL && b.kind != GPR_MEM_CUDA_VMM) continue;
      int device = OrdinalOfUuid(env, d, b.device_uuid);
      Mapping m = MapBuffer(env, d, b, device, segment, producer, &refs);
      if (!gpr_range_ok(b.offset, b.length, m.bytes))
        Throw(env, GPR_E_FRAME_BOUNDS, "a device buffer [" + std::to_string(b.offset) + ", +" + std::to_string(b.length) +
                                           ") lies outside its " + std::to_string(m.bytes) + "-byte allocation");
      uint64_t ptr = m.base + b.offset;
      uint32_t mapped = 1;
      memcpy(views + i * 24, &ptr, 8);
      memcpy(views + i * 24 + 8, &b.length, 8);
      memcpy(views + i * 24 + 16, &device, 4);
      memcpy(views + i * 24 + 20, &mapped, 4);
    }
  } catch (...) {
    refs.DropAll();
    throw;
  }
  uint32_t counts[4] = {n, static_cast<uint32_t>(refs.legacy.size()), static_cast<uint32_t>(refs.imported.size()), 0};
  memcpy(out.Data(), counts, sizeof counts);
  uint8_t *at = views + static_cast<size_t>(n) * 24;
  size_t legacy_bytes = refs.legacy.size() * sizeof(CUipcMemHandle), imported_bytes = refs.imported.size() * 8;
  if (legacy_bytes) memcpy(at, refs.legacy.data(), legacy_bytes);
  if (imported_bytes) memcpy(at + legacy_bytes, refs.imported.data(), imported_bytes);
  return Napi::Number::New(env, static_cast<double>(at + legacy_bytes + imported_bytes - out.Data()));
}

// importReleaseAll(ids: BigUint64Array): drops one reference per pool
// allocation or VMM span id, freeing imports no frame holds any more.
Napi::Value ImportReleaseAll(const Napi::CallbackInfo &info) {
  auto ids = info[0].As<Napi::BigUint64Array>();
  for (size_t i = 0; i < ids.ElementLength(); i++) FrameReferences::ReleaseImport(ids[i]);
  return info.Env().Undefined();
}

Napi::Value PoolStats(const Napi::CallbackInfo &info) { return PoolImports::Get().Stats(info.Env()); }

// deviceAllocPool(device, bytes) -> bigint: memory from gpuring's exportable
// pool on `device` (published as cuda-pool); free it with deviceFree.
Napi::Value DeviceAllocPool(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int device = info[0].As<Napi::Number>().Int32Value();
  ScopedContext ctx(env, device);
  const Driver &d = ctx.driver();
  CUdeviceptr p = 0;
  size_t n = static_cast<size_t>(info[1].As<Napi::Number>().DoubleValue());
  Check(env, d.cuMemAllocFromPoolAsync(&p, n, ExportablePool(env, d, device), nullptr), "cuMemAllocFromPoolAsync");
  Check(env, d.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  return Napi::BigInt::New(env, static_cast<uint64_t>(p));
}

// deviceAllocVmm(device, bytes) -> bigint: VMM memory on `device`, exportable
// (published as cuda-vmm); free it with deviceFree.
Napi::Value DeviceAllocVmm(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int device = info[0].As<Napi::Number>().Int32Value();
  ScopedContext ctx(env, device);
  uint64_t n = static_cast<uint64_t>(info[1].As<Napi::Number>().DoubleValue());
  return Napi::BigInt::New(env, static_cast<uint64_t>(VmmAllocations::Get().Alloc(env, ctx.driver(), device, n)));
}

// ipcReleaseAll(handles): drops one reference per 64-byte handle.
Napi::Value IpcReleaseAll(const Napi::CallbackInfo &info) {
  auto bytes = info[0].As<Napi::Uint8Array>();
  for (size_t at = 0; at + sizeof(CUipcMemHandle) <= bytes.ByteLength(); at += sizeof(CUipcMemHandle)) {
    CUipcMemHandle h;
    memcpy(h.reserved, bytes.Data() + at, sizeof h.reserved);
    IpcHandleCache::Get().Release(h);
  }
  return info.Env().Undefined();
}


Napi::Value IpcStats(const Napi::CallbackInfo &info) { return IpcHandleCache::Get().Stats(info.Env()); }

Napi::Value PinnedHostStats(const Napi::CallbackInfo &info) { return PinnedHostPool::Get().Stats(info.Env()); }

// reservePinnedHost(device, bytes) -> whether a block was pinned (PinnedHostPool::Reserve).
Napi::Value ReservePinnedHost(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int device = info[0].As<Napi::Number>().Int32Value();
  auto bytes = static_cast<size_t>(info[1].As<Napi::Number>().DoubleValue());
  ScopedContext ctx(env, device);
  return Napi::Boolean::New(env, PinnedHostPool::Get().Reserve(ctx.driver(), bytes));
}

// ipcSetLimits(entries, bytes): bounds on cached mappings; closes idle ones now if over.
Napi::Value IpcSetLimits(const Napi::CallbackInfo &info) {
  IpcHandleCache::Get().SetLimits(info[0].As<Napi::Number>().Uint32Value(),
                                  static_cast<uint64_t>(info[1].As<Napi::Number>().DoubleValue()));
  return info.Env().Undefined();
}

// ---- events ---------------------------------------------------------------

// Two pinned host chunks per device: the DMA of one chunk overlaps the copy
// of the previous one out of the other (split across cores) into the caller's
// (pageable) buffer.
struct Staging {
  static constexpr size_t kChunk = 32u << 20;
  static constexpr size_t kMinStaged = 1u << 20;  // smaller copies go straight to pageable memory
  void *host[2] = {nullptr, nullptr};
  CUevent done[2] = {nullptr, nullptr};
};

struct EventPool {
  std::mutex mu;
  std::map<int, Staging> staging;
  struct Pooled {
    int device;
    CUevent event;
    CUipcEventHandle handle;  // fixed for the event's life: fetched once
  };
  std::vector<Pooled> events;  // by id
  std::vector<uint32_t> idle;
  OpenedEvents opened;                // consumer side
  std::map<int, CUstream> streams;    // one copy stream per device
};

EventPool &Events() {
  static EventPool pool;
  return pool;
}

// recordEvent(device, onlyIfBusy, stream, handle) -> id, or -1: an
// interprocess event recorded on `stream` (a CUstream as a BigInt; the legacy
// default stream when undefined), after all work queued there so far; its
// 64-byte IPC handle is written into the Uint8Array `handle` (the caller's:
// a frame body's sync_handle, or a description's), so the hot path allocates
// nothing. With onlyIfBusy, -1 (and nothing written) when that stream has
// nothing left to do: then the buffers are complete already and a frame needs
// no event (recording one and waiting on it cost both sides microseconds).
// Events are reused only after recycleEvent(id) (when the frame carrying it
// was released).
Napi::Value RecordEvent(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int device = info[0].As<Napi::Number>().Int32Value();
  ScopedContext ctx(env, device);
  CUstream stream = info[2].IsBigInt() ? StreamOf(info[2]) : nullptr;
  if (info[1].ToBoolean() && ctx.driver().cuStreamQuery(stream) == CUDA_SUCCESS) return Napi::Number::New(env, -1);
  auto handle_out = info[3].As<Napi::Uint8Array>();
  if (handle_out.ByteLength() < sizeof(CUipcEventHandle)) Throw(env, GPR_E_INVALID_ARGUMENT, "recordEvent: the handle buffer holds fewer than 64 bytes");
  EventPool &pool = Events();
  std::lock_guard<std::mutex> lock(pool.mu);
  uint32_t id = 0;
  auto free_one = std::find_if(pool.idle.begin(), pool.idle.end(), [&](uint32_t i) { return pool.events[i].device == device; });
  if (free_one != pool.idle.end()) {
    id = *free_one;
    pool.idle.erase(free_one);
  } else {
    EventPool::Pooled e{device, nullptr, {}};
    Check(env, ctx.driver().cuEventCreate(&e.event, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS), "cuEventCreate");
    Check(env, ctx.driver().cuIpcGetEventHandle(&e.handle, e.event), "cuIpcGetEventHandle");
    // CUDA will not open a handle in the process that made it: a consumer in
    // this process finds the event itself under its handle.
    pool.opened.AddOwn(device, std::string(e.handle.reserved, sizeof e.handle.reserved), e.event);
    id = static_cast<uint32_t>(pool.events.size());
    pool.events.push_back(e);
  }
  Check(env, ctx.driver().cuEventRecord(pool.events[id].event, stream), "cuEventRecord");
  memcpy(handle_out.Data(), pool.events[id].handle.reserved, sizeof(CUipcEventHandle));
  return Napi::Number::New(env, id);
}

Napi::Value RecycleEvent(const Napi::CallbackInfo &info) {
  EventPool &pool = Events();
  std::lock_guard<std::mutex> lock(pool.mu);
  uint32_t id = info[0].As<Napi::Number>().Uint32Value();
  if (id < pool.events.size() && std::find(pool.idle.begin(), pool.idle.end(), id) == pool.idle.end()) pool.idle.push_back(id);
  return info.Env().Undefined();
}

// eventStats() -> { pooled, idle, opened }: this process's interprocess
// events, those of them free for the next frame, and other processes' events
// it holds open.
Napi::Value EventStats(const Napi::CallbackInfo &info) {
  EventPool &pool = Events();
  std::lock_guard<std::mutex> lock(pool.mu);
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("pooled", static_cast<double>(pool.events.size()));
  out.Set("idle", static_cast<double>(pool.idle.size()));
  out.Set("opened", static_cast<double>(pool.opened.Count()));
  return out;
}

CUstream CopyStream(Napi::Env env, const Driver &d, EventPool &pool, int device) {
  auto it = pool.streams.find(device);
  if (it != pool.streams.end()) return it->second;
  CUstream s;
  Check(env, d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return pool.streams[device] = s;
}

Staging &StagingFor(Napi::Env env, const Driver &d, EventPool &pool, int device) {
  Staging &s = pool.staging[device];
  for (int i = 0; i < 2 && !s.host[i]; i++) {
    Check(env, d.cuMemHostAlloc(&s.host[i], Staging::kChunk, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
    Check(env, d.cuEventCreate(&s.done[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  return s;
}

// Copies n bytes at `src` into `dst` (pageable) through the pinned chunks, in
// stream order after whatever the stream waits on.
void StagedCopy(Napi::Env env, const Driver &d, Staging &s, CUstream stream, uint8_t *dst, CUdeviceptr src, size_t n) {
  const size_t c = Staging::kChunk, chunks = (n + c - 1) / c;
  size_t held[2] = {SIZE_MAX, SIZE_MAX};  // chunk index in each staging slot
  auto drain = [&](int slot) {
    if (held[slot] == SIZE_MAX) return;
    Check(env, d.cuEventSynchronize(s.done[slot]), "cuEventSynchronize");
    size_t k = held[slot];
    ParallelCopy(dst + k * c, s.host[slot], std::min(c, n - k * c));
    held[slot] = SIZE_MAX;
  };
  for (size_t k = 0; k < chunks; k++) {
    int slot = static_cast<int>(k & 1);
    drain(slot);
    Check(env, d.cuMemcpyDtoHAsync(s.host[slot], src + k * c, std::min(c, n - k * c), stream), "cuMemcpyDtoHAsync");
    Check(env, d.cuEventRecord(s.done[slot], stream), "cuEventRecord");
    held[slot] = k;
  }
  drain(static_cast<int>(chunks & 1));  // the older of the two in flight first
  drain(static_cast<int>((chunks + 1) & 1));
}

// A producer's interprocess event (or this process's own), opened once while
// it is in use (OpenedEvents). `bytes`: its handle, then (from a Frame) the
// producer's entry and generation and the ring's name.
CUevent OpenedEvent(Napi::Env env, const Driver &d, EventPool &pool, int device, const Napi::Uint8Array &bytes) {
  CUevent ev = nullptr;
  std::string key(reinterpret_cast<const char *>(bytes.Data()), bytes.ByteLength());
  Check(env, pool.opened.Find(d, device, key, &ev), "cuIpcOpenEventHandle");
  return ev;
}

// Orders `stream` after a producer's interprocess event, on the device. An
// event already complete needs no wait, and a device-side wait on an
// interprocess event costs more than this host-side check.
void WaitForProducer(Napi::Env env, const Driver &d, EventPool &pool, CUstream stream, int device, const Napi::Value &handle) {
  if (!handle.IsTypedArray()) return;
  CUevent ev = OpenedEvent(env, d, pool, device, handle.As<Napi::Uint8Array>());
  if (d.cuEventQuery(ev) == CUDA_SUCCESS) return;
  Check(env, d.cuStreamWaitEvent(stream, ev, 0), "cuStreamWaitEvent");
}

// synchronizeEvent(device, eventHandle): waits on the host until the
// producer's work before the event is complete.
Napi::Value SynchronizeEvent(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int device = info[0].As<Napi::Number>().Int32Value();
  ScopedContext ctx(env, device);
  EventPool &pool = Events();
  CUevent ev;
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    ev = OpenedEvent(env, ctx.driver(), pool, device, info[1].As<Napi::Uint8Array>());
  }
  Check(env, ctx.driver().cuEventSynchronize(ev), "cuEventSynchronize");
  return env.Undefined();
}

// A pageable host buffer for a large staged copy (huge pages: see
// huge_pages.h), unmapped by the ArrayBuffer's finalizer.
Napi::ArrayBuffer LargeHostBuffer(Napi::Env env, size_t n) {
  void *p = MapHugePages(n);
  if (!p) return Napi::ArrayBuffer::New(env, n);
  return Napi::ArrayBuffer::New(env, p, n, [](Napi::Env, void *data, size_t *len) {
    UnmapHugePages(data, *len);
    delete len;
  }, new size_t(n));
}

// copyToHost(device, ptr, bytes, eventHandle | null) -> ArrayBuffer. The copy
// is ordered after the producer's event on the device (cuStreamWaitEvent), not
// by a host-side wait; the call returns when the copy is complete. A large
// result lands straight in a pinned block (PinnedHostPool); when the pool is
// at its bound, it is staged through pinned chunks into pageable memory.
Napi::Value CopyToHost(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int device = info[0].As<Napi::Number>().Int32Value();
  ScopedContext ctx(env, device);
  const Driver &d = ctx.driver();
  size_t n = static_cast<size_t>(info[2].As<Napi::Number>().DoubleValue());
  EventPool &pool = Events();
  std::lock_guard<std::mutex> lock(pool.mu);
  CUstream stream = CopyStream(env, d, pool, device);
  WaitForProducer(env, d, pool, stream, device, info[3]);
  CUdeviceptr src = DevicePtr(info[1]);
  Napi::ArrayBuffer out;
  if (n > Staging::kMinStaged) {
    out = PinnedHostPool::Get().Take(env, d, n, [&](void *host, size_t at, size_t len) {
      Check(env, d.cuMemcpyDtoHAsync(host, src + at, len, stream), "cuMemcpyDtoHAsync");
    });
    if (out.IsEmpty()) {  // the pinned pool is at its bound
      out = LargeHostBuffer(env, n);
      StagedCopy(env, d, StagingFor(env, d, pool, device), stream, static_cast<uint8_t *>(out.Data()), src, n);
      return out;
    }
  } else {
    out = Napi::ArrayBuffer::New(env, n);
    if (n) Check(env, d.cuMemcpyDtoHAsync(out.Data(), src, n, stream), "cuMemcpyDtoHAsync");
  }
  Check(env, d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  return out;
}

// copyDeviceToDevice(device, dsts: BigUint64Array, srcs: BigUint64Array,
// lengths: Float64Array, eventHandle | null, stream?): copies lengths[i]
// bytes from srcs[i] (mapped frame buffers) to dsts[i] (this process's memory
// on `device`), all after the producer's event. Without `stream`, complete on
// return, after one synchronization for all of them (a frame's columns are
// one call, not one wait each); with it, queued on that stream.
Napi::Value CopyDeviceToDevice(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  int device = info[0].As<Napi::Number>().Int32Value();
  ScopedContext ctx(env, device);
  const Driver &d = ctx.driver();
  EventPool &pool = Events();
  std::lock_guard<std::mutex> lock(pool.mu);
  bool queued = info.Length() > 5 && info[5].IsBigInt();
  CUstream stream = queued ? StreamOf(info[5]) : CopyStream(env, d, pool, device);
  WaitForProducer(env, d, pool, stream, device, info[4]);
  auto dsts = info[1].As<Napi::BigUint64Array>(), srcs = info[2].As<Napi::BigUint64Array>();
  auto lengths = info[3].As<Napi::Float64Array>();
  if (dsts.ElementLength() != srcs.ElementLength() || srcs.ElementLength() != lengths.ElementLength())
    Throw(env, GPR_E_INVALID_ARGUMENT, "copyDeviceToDevice(): one destination, source and length per buffer");
  for (size_t i = 0; i < lengths.ElementLength(); i++) {
    size_t n = static_cast<size_t>(lengths[i]);
    if (n) Check(env, d.cuMemcpyDtoDAsync(dsts[i], srcs[i], n, stream), "cuMemcpyDtoDAsync");
  }
  if (!queued) Check(env, d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  return env.Undefined();
}

// Holds a stream for `ms` milliseconds (cuLaunchHostFunc), so that the work
// queued after it is certainly still pending when a test publishes.
void Stall(void *ms) { std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<uintptr_t>(ms))); }

// deviceMemsetAsync(device, ptr, byte, bytes, times, stream = legacy, stallMs = 0):
// queues, on `stream`, a stall of stallMs, then `times` memsets of the range
// (the last one writes `byte`), and returns at once. Tests use it to publish
// a buffer whose writes are still queued: a reader that is not ordered after
// them reads what was there before.
Napi::Value DeviceMemsetAsync(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  ScopedContext ctx(env, info[0].As<Napi::Number>().Int32Value());
  CUdeviceptr p = DevicePtr(info[1]);
  unsigned char value = static_cast<unsigned char>(info[2].As<Napi::Number>().Uint32Value());
  size_t n = static_cast<size_t>(info[3].As<Napi::Number>().DoubleValue());
  uint32_t times = info[4].As<Napi::Number>().Uint32Value();
  CUstream stream = info.Length() > 5 && info[5].IsBigInt() ? StreamOf(info[5]) : nullptr;
  uintptr_t stall_ms = info.Length() > 6 ? info[6].As<Napi::Number>().Uint32Value() : 0;
  if (stall_ms) Check(env, ctx.driver().cuLaunchHostFunc(stream, Stall, reinterpret_cast<void *>(stall_ms)), "cuLaunchHostFunc");
  for (uint32_t i = 0; i < times; i++)
    Check(env, ctx.driver().cuMemsetD8Async(p, i + 1 == times ? value : static_cast<unsigned char>(i), n, stream), "cuMemsetD8Async");
  return env.Undefined();
}

}  // namespace

void DefineCudaIpc(Napi::Env env, Napi::Object exports) {
  exports.Set("exportDeviceMemory", Napi::Function::New(env, ExportDeviceMemory));
  exports.Set("ipcReleaseAll", Napi::Function::New(env, IpcReleaseAll));
  exports.Set("mapFrame", Napi::Function::New(env, MapFrame));
  exports.Set("importReleaseAll", Napi::Function::New(env, ImportReleaseAll));
  exports.Set("poolStats", Napi::Function::New(env, PoolStats));
  exports.Set("deviceAllocPool", Napi::Function::New(env, DeviceAllocPool));
  exports.Set("deviceAllocVmm", Napi::Function::New(env, DeviceAllocVmm));
  exports.Set("ipcStats", Napi::Function::New(env, IpcStats));
  exports.Set("pinnedHostStats", Napi::Function::New(env, PinnedHostStats));
  exports.Set("reservePinnedHost", Napi::Function::New(env, ReservePinnedHost));
  exports.Set("ipcSetLimits", Napi::Function::New(env, IpcSetLimits));
  exports.Set("recordEvent", Napi::Function::New(env, RecordEvent));
  exports.Set("recycleEvent", Napi::Function::New(env, RecycleEvent));
  exports.Set("eventStats", Napi::Function::New(env, EventStats));
  exports.Set("copyToHost", Napi::Function::New(env, CopyToHost));
  exports.Set("copyDeviceToDevice", Napi::Function::New(env, CopyDeviceToDevice));
  exports.Set("synchronizeEvent", Napi::Function::New(env, SynchronizeEvent));
  exports.Set("deviceMemsetAsync", Napi::Function::New(env, DeviceMemsetAsync));
}

}  // namespace gpuring::cuda
