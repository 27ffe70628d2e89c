// Running driver calls on a device: its primary context (shared with PyTorch,
// CuPy and every runtime-API user in the process) made current for a scope.
#pragma once
#include <napi.h>
#include "cuda_driver.h"
#include "js_values.h"

namespace gpuring::cuda {

// A device pointer passed from JS as a BigInt.
inline CUdeviceptr DevicePtr(const Napi::Value &v) { return static_cast<CUdeviceptr>(ToU64(v)); }
// A CUstream passed from JS as a BigInt (0n: the legacy default stream).
inline CUstream StreamOf(const Napi::Value &v) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(ToU64(v))); }

// The driver, or a CUDA_UNAVAILABLE error saying why there is none.
const Driver &Require(Napi::Env env);

// Throws a JS error with code CUDA naming the call and the CUDA error.
void Check(Napi::Env env, CUresult rc, const char *call);

// Device `ordinal`'s primary context if a ScopedContext already retained it,
// else null. Never throws (for cleanup paths).
CUcontext RetainedPrimary(int ordinal);

// Runs `fn` in device `ordinal`'s primary context if one was retained (a
// cleanup of memory mapped there); does nothing otherwise. Never throws.
template <typename Fn>
void InRetainedPrimary(int ordinal, Fn &&fn) {
  CUcontext ctx = RetainedPrimary(ordinal), popped;
  const Driver &d = Driver::Get();
  if (!ctx || d.cuCtxPushCurrent(ctx) != CUDA_SUCCESS) return;
  fn(d);
  d.cuCtxPopCurrent(&popped);
}

// Pushes device `ordinal`'s primary context for the scope. Primary contexts
// are retained once per process and never released: releasing one could tear
// down a context another library in this process is using.
class ScopedContext {
 public:
  ScopedContext(Napi::Env env, int ordinal);
  ~ScopedContext();
  ScopedContext(const ScopedContext &) = delete;
  ScopedContext &operator=(const ScopedContext &) = delete;
  const Driver &driver() const { return d_; }

 private:
  const Driver &d_;
};

}  // namespace gpuring::cuda
