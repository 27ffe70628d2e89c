// Module entry: the classes lib/ wraps, and the constants it checks against.
#include <napi.h>
#include "consumer_core.h"
#include "cuda_api.h"
#include "cuda_ipc.h"
#include "lent_mappings.h"
#include "loop_participant.h"
#include "producer_core.h"
#include "segment_handle.h"

namespace gpuring {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("SegmentHandle", SegmentHandle::Define(env));
  exports.Set("ProducerCore", ProducerCore::Define(env));
  exports.Set("ConsumerCore", ConsumerCore::Define(env));
  cuda::DefineCudaApi(env, exports);
  cuda::DefineCudaIpc(env, exports);
  Napi::Array codes = Napi::Array::New(env, GPR_E_COUNT_);
  for (uint32_t i = 0; i < GPR_E_COUNT_; i++) codes.Set(i, Napi::String::New(env, gpr_code_name(static_cast<gpr_code>(i))));
  exports.Set("errorCodes", codes);
  exports.Set("liveParticipants", Napi::Function::New(env, [](const Napi::CallbackInfo &info) {
                return Napi::Number::New(info.Env(), static_cast<double>(LoopParticipant::alive.load()));
              }));
  exports.Set("setLendLimit", Napi::Function::New(env, [](const Napi::CallbackInfo &info) {
                LentMappings::SetLimit(static_cast<uint64_t>(info[0].As<Napi::Number>().DoubleValue()));
              }));
  exports.Set("lendLimit", Napi::Function::New(env, [](const Napi::CallbackInfo &info) {
                return Napi::Number::New(info.Env(), static_cast<double>(LentMappings::Limit()));
              }));
  char hash[20];
  snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(GPR_LAYOUT_HASH));
  exports.Set("layoutHash", Napi::String::New(env, hash));
  exports.Set("versionMajor", Napi::Number::New(env, GPR_VERSION_MAJOR));
  exports.Set("versionMinor", Napi::Number::New(env, GPR_VERSION_MINOR));
  return exports;
}

}  // namespace gpuring

static Napi::Object InitGpuring(Napi::Env env, Napi::Object exports) { return gpuring::Init(env, exports); }

NODE_API_MODULE(gpuring, InitGpuring)
