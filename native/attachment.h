// One participant's attachment to a segment, shared by the producer and
// consumer cores: open the segment and take a participant entry, or give the
// entry back (handing back claims and releasing leases) and unmap.
#pragma once
#include <napi.h>
#include <string>
#include "gpuring.h"

namespace gpuring {

struct Attachment {
  gpr_segment seg{};
  uint32_t me = 0;   // participant index
  uint32_t gen = 0;  // participant generation
  bool attached = false;

  // Throws the segment's or the attach's error; leaves nothing open on failure.
  // open_flags: GPR_OPEN_* (GPR_OPEN_ANY_OWNER to join another user's segment).
  void Attach(Napi::Env env, const std::string &name, uint32_t open_timeout_ms, uint32_t open_flags, uint32_t roles);
  // Idempotent. False when the entry had been taken from us (DETACHED, SPEC.md §4).
  bool Detach();
};

}  // namespace gpuring
