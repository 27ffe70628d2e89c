#include "cuda_context.h"
#include <mutex>
#include <vector>
#include "errors.h"

namespace gpuring::cuda {

const Driver &Require(Napi::Env env) {
  const Driver &d = Driver::Get();
  if (!d.loaded) Throw(env, GPR_E_CUDA_UNAVAILABLE, d.error);
  return d;
}

void Check(Napi::Env env, CUresult rc, const char *call) {
  if (rc == CUDA_SUCCESS) return;
  Napi::Error e = MakeError(env, GPR_E_CUDA, std::string(call) + " failed: " + Driver::Get().Describe(rc));
  e.Set("cudaError", Napi::Number::New(env, rc));
  throw e;
}

namespace {
std::mutex contexts_mu;
std::vector<CUcontext> contexts;  // by ordinal, retained on first use

CUcontext Primary(Napi::Env env, const Driver &d, int ordinal) {
  int count = 0;
  Check(env, d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count)
    Throw(env, GPR_E_DEVICE_NOT_FOUND, "no CUDA device " + std::to_string(ordinal) + " (" + std::to_string(count) + " visible)");
  std::lock_guard<std::mutex> lock(contexts_mu);
  if (contexts.size() < static_cast<size_t>(count)) contexts.resize(count, nullptr);
  if (!contexts[ordinal]) {
    CUdevice dev;
    Check(env, d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    Check(env, d.cuDevicePrimaryCtxRetain(&contexts[ordinal], dev), "cuDevicePrimaryCtxRetain");
  }
  return contexts[ordinal];
}
}  // namespace

CUcontext RetainedPrimary(int ordinal) {
  std::lock_guard<std::mutex> lock(contexts_mu);
  return ordinal >= 0 && static_cast<size_t>(ordinal) < contexts.size() ? contexts[ordinal] : nullptr;
}

ScopedContext::ScopedContext(Napi::Env env, int ordinal) : d_(Require(env)) {
  Check(env, d_.cuCtxPushCurrent(Primary(env, d_, ordinal)), "cuCtxPushCurrent");
}

ScopedContext::~ScopedContext() {
  CUcontext popped;
  d_.cuCtxPopCurrent(&popped);
}

}  // namespace gpuring::cuda
