// JS functions for the cuda-ipc memory kind (see cuda_ipc.cc).
#pragma once
#include <napi.h>

namespace gpuring::cuda {
void DefineCudaIpc(Napi::Env env, Napi::Object exports);
}
