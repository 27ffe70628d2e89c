// JS errors from gpuring's C error codes. Every error the addon throws or
// rejects with carries `code` (a gpr_code name, stable across languages) and,
// for system failures, `errno`. lib/errors.ts turns them into GpuringError.
#pragma once
#include <napi.h>
#include <string>
#include "gpuring.h"

namespace gpuring {

Napi::Error MakeError(Napi::Env env, gpr_code code, const std::string &message, int sys_errno = 0);
Napi::Error MakeError(Napi::Env env, const gpr_error &err);
[[noreturn]] void Throw(Napi::Env env, const gpr_error &err);
[[noreturn]] void Throw(Napi::Env env, gpr_code code, const std::string &message);

// Runs a gpr_* call that reports through gpr_error and throws on failure.
template <typename Fn>
void Check(Napi::Env env, Fn &&fn) {
  gpr_error err{};
  if (fn(&err) != 0) Throw(env, err);
}

}  // namespace gpuring
