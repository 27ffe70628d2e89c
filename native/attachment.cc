#include "attachment.h"
#include "errors.h"

namespace gpuring {

void Attachment::Attach(Napi::Env env, const std::string &name, uint32_t open_timeout_ms, uint32_t roles) {
  gpr_segment_options opt{0, 0, 0, open_timeout_ms};
  Check(env, [&](gpr_error *e) { return gpr_segment_open(&seg, name.c_str(), &opt, e); });
  gpr_error err{};
  if (gpr_participant_attach(&seg, roles, &me, &gen, &err) != 0) {
    gpr_segment_close(&seg);
    Throw(env, err);
  }
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
