// SegmentHandle: creating, opening, inspecting, sweeping and removing a segment
// without joining it as a producer or consumer (the CLI and Ring use it).
#pragma once
#include <napi.h>
#include "gpuring.h"

namespace gpuring {

class SegmentHandle : public Napi::ObjectWrap<SegmentHandle> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit SegmentHandle(const Napi::CallbackInfo &info);
  ~SegmentHandle() override;

 private:
  static Napi::Value Unlink(const Napi::CallbackInfo &info);
  Napi::Value Inspect(const Napi::CallbackInfo &info);
  Napi::Value Sweep(const Napi::CallbackInfo &info);
  Napi::Value Close(const Napi::CallbackInfo &info);
  const gpr_segment &Open(Napi::Env env) const;

  gpr_segment seg_{};
  bool open_ = false;
};

}  // namespace gpuring
