#include "errors.h"

namespace gpuring {

Napi::Error MakeError(Napi::Env env, gpr_code code, const std::string &message, int sys_errno) {
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("code", Napi::String::New(env, gpr_code_name(code)));
  if (sys_errno) e.Set("errno", Napi::Number::New(env, sys_errno));
  return e;
}

Napi::Error MakeError(Napi::Env env, const gpr_error &err) {
  return MakeError(env, err.code, err.message, err.sys_errno);
}

void Throw(Napi::Env env, const gpr_error &err) { throw MakeError(env, err); }

void Throw(Napi::Env env, gpr_code code, const std::string &message) {
  throw MakeError(env, code, message);
}

}  // namespace gpuring
