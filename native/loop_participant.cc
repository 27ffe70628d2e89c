#include "loop_participant.h"
#include <sched.h>
#include <exception>
#include <string>
#include "errors.h"

namespace gpuring {

void LoopParticipant::StartBell(Napi::Env e, const char *resource, uint32_t tick, std::weak_ptr<LoopParticipant> self) {
  env = e;
  tick_ms = std::max<uint32_t>(1, tick);
  async = std::make_unique<Napi::AsyncContext>(e, resource);
  bell = std::make_unique<Doorbell>(e, &seg, me, [self] {
    if (auto held = self.lock()) held->OnWake();
  });
}

void LoopParticipant::Woken(const std::function<void(Napi::Env)> &serve) {
  Napi::Env e(env);
  try {
    Napi::HandleScope handles(e);
    {
      // Node ignores a callback scope's resource object (the async context
      // keeps its own); Napi::CallbackScope would make a JS object for it per
      // wake-up.
      napi_callback_scope opened = nullptr;
      if (napi_open_callback_scope(e, nullptr, *async, &opened) != napi_ok) return;
      Napi::CallbackScope scope(e, opened);
      try {
        serve(e);
      } catch (const Napi::Error &thrown) {
        Failed(e, thrown.Value());
      } catch (const std::exception &failed) {
        Failed(e, JsRuns(e) ? MakeError(e, GPR_E_SYSTEM, std::string("a wake-up failed: ") + failed.what()).Value()
                            : Napi::Value());
      }
    }
    // Closing the scope ran the continuations of what serve() resolved (the
    // code after an awaited next()). A sweep takes 50-80 us just after a
    // sleep: done before, a due one would hold up the frame that woke us.
    // What it repairs rings us again. The caller keeps this state alive
    // (StartBell), though those continuations may have closed it.
    if (!shut) Tidy();
  } catch (...) {
  }
}

void LoopParticipant::Failed(Napi::Env e, napi_value error) {
  if (!JsRuns(e)) return;
  if (!shut && bell) bell->Sleep(0);
  if (error) napi_fatal_exception(e, error);
}

bool LoopParticipant::JsRuns(napi_env e) {
  napi_value probe;
  bool has = false;
  return napi_create_object(e, &probe) == napi_ok && napi_has_named_property(e, probe, "x", &has) == napi_ok;
}

void LoopParticipant::SweepIfDue() {
  uint64_t now = gpr_monotonic_ns();
  if (now - last_sweep_ns < tick_ms * 1000000ull) return;
  last_sweep_ns = now;
  gpr_sweep(&seg, nullptr, nullptr);
  gpr_bc_release_strays(&seg, me);  // a broadcast subscriber's own repair (SPEC.md §5.4); else nothing
  sweeps++;
}

void LoopParticipant::HookExit() {
  exit_hooked = napi_add_env_cleanup_hook(env, AtExit, this) == napi_ok;
}

void LoopParticipant::UnhookExit() {
  if (exit_hooked) napi_remove_env_cleanup_hook(env, AtExit, this);
  exit_hooked = false;
}

void LoopParticipant::AtExit(void *participant) {
  auto *p = static_cast<LoopParticipant *>(participant);
  p->exit_hooked = false;
  p->Shutdown();
}

bool LoopParticipant::SpareCores() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 4;
}

}  // namespace gpuring
