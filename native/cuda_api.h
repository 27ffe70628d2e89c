// JS functions over the CUDA driver: devices (for doctor and device lookup) and
// plain device memory (DeviceBuffer in lib/device-buffer.ts).
#pragma once
#include <napi.h>

namespace gpuring::cuda {
void DefineCudaApi(Napi::Env env, Napi::Object exports);
}
