#include "attachment.h"
#include "errors.h"

namespace gpuring {

void Attachment::Attach(Napi::Env env, const std::string &name, uint32_t open_timeout_ms, uint32_t roles) {
  Check(env, [&](gpr_error *e) { return gpr_segment_join(&seg, name.c_str(), open_timeout_ms, roles, &me, &gen, e); });
  attached = true;
}

void Attachment::Detach() {
  if (attached) {
    gpr_error err{};
    gpr_participant_detach(&seg, me, gen, &err);
    attached = false;
  }
  gpr_segment_close(&seg);
}

}  // namespace gpuring
