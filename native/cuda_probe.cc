#include "cuda_probe.h"
#include <dlfcn.h>
#include <string>

namespace gpuring {

namespace {
using CuInit = int (*)(unsigned);
using CuDriverGetVersion = int (*)(int *);
using CuDeviceGetCount = int (*)(int *);
}  // namespace

// -> { found: boolean, library?: string, driverVersion?: number, devices?: number, error?: string }
Napi::Value ProbeCudaDriver(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    o.Set("found", false);
    const char *why = dlerror();
    o.Set("error", std::string(why ? why : "libcuda.so.1 not found"));
    return o;
  }
  o.Set("found", true);
  o.Set("library", "libcuda.so.1");
  auto init = reinterpret_cast<CuInit>(dlsym(lib, "cuInit"));
  auto version = reinterpret_cast<CuDriverGetVersion>(dlsym(lib, "cuDriverGetVersion"));
  auto count = reinterpret_cast<CuDeviceGetCount>(dlsym(lib, "cuDeviceGetCount"));
  int v = 0, n = 0;
  if (version && version(&v) == 0) o.Set("driverVersion", v);
  int rc = init ? init(0) : -1;
  if (rc == 0 && count && count(&n) == 0) o.Set("devices", n);
  else o.Set("error", "cuInit failed with CUDA error " + std::to_string(rc));
  // The library stays loaded: unloading libcuda after cuInit is unsafe.
  return o;
}

}  // namespace gpuring
