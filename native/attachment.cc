#include "attachment.h"
#include "errors.h"

namespace gpuring {

void Attachment::Attach(Napi::Env env, const std::string &name, uint32_t open_timeout_ms, uint32_t open_flags,
                        uint32_t roles) {
  gpr_segment_options open{0, 0, 0, open_timeout_ms, open_flags, GPR_DELIVERY_EACH};
  Check(env, [&](gpr_error *e) { return gpr_segment_join_with(&seg, name.c_str(), &open, roles, &me, &gen, e); });
  attached = true;
}

bool Attachment::Detach() {
  bool held = true;
  if (attached) {
    gpr_error err{};
    held = gpr_participant_detach(&seg, me, gen, &err) != -static_cast<int>(GPR_E_DETACHED);
    attached = false;
  }
  gpr_segment_close(&seg);
  return held;
}

}  // namespace gpuring
