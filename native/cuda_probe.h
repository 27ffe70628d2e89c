// Probes the CUDA driver without linking it: dlopen("libcuda.so.1") and ask
// its version and device count. Used by `gpuring doctor`; absent driver is a
// normal answer, not an error.
#pragma once
#include <napi.h>

namespace gpuring {
Napi::Value ProbeCudaDriver(const Napi::CallbackInfo &info);
}
