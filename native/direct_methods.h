// Methods called once per frame, defined on each instance as functions that
// carry their object. An ObjectWrap InstanceMethod finds its object with
// napi_unwrap, which in Node 20 is a private-property lookup through V8's
// generic path: 13% of a batched consumer's CPU, all of it in release(), and
// one more cold step in a publish made by a CPU just woken from sleep.
#pragma once
#include <napi.h>
#include <exception>
#include <memory>

namespace gpuring {

template <typename T>
class DirectMethods {
 public:
  using Method = Napi::Value (T::*)(const Napi::CallbackInfo &);

  explicit DirectMethods(T *self) : self_(std::make_shared<T *>(self)) {}
  // The functions may outlive the object (JS can keep one): from then on they throw.
  ~DirectMethods() { *self_ = nullptr; }
  DirectMethods(const DirectMethods &) = delete;
  DirectMethods &operator=(const DirectMethods &) = delete;

  // Defines `name` on `instance` as `method`, shadowing any prototype method of that name.
  template <Method method>
  void Define(Napi::Object instance, const char *name) {
    Napi::Env env = instance.Env();
    auto *data = new std::shared_ptr<T *>(self_);
    napi_value fn = nullptr;
    NAPI_THROW_IF_FAILED_VOID(env, napi_create_function(env, name, NAPI_AUTO_LENGTH, &Call<method>, data, &fn));
    NAPI_THROW_IF_FAILED_VOID(env, napi_add_finalizer(env, fn, data, [](napi_env, void *d, void *) {
      delete static_cast<std::shared_ptr<T *> *>(d);
    }, nullptr, nullptr));
    instance.Set(name, Napi::Value(env, fn));
  }

 private:
  template <Method method>
  static napi_value Call(napi_env raw_env, napi_callback_info raw_info) {
    Napi::Env env(raw_env);
    try {
      Napi::CallbackInfo info(raw_env, raw_info);
      T *self = **static_cast<std::shared_ptr<T *> *>(info.Data());
      if (!self) throw Napi::Error::New(env, "gpuring: the native object behind this call was collected");
      return (self->*method)(info);
    } catch (const Napi::Error &e) {
      e.ThrowAsJavaScriptException();
    } catch (const std::exception &e) {  // as InstanceMethod does (NODE_ADDON_API_CPP_EXCEPTIONS_ALL)
      Napi::Error::New(env, e.what()).ThrowAsJavaScriptException();
    }
    return nullptr;
  }

  std::shared_ptr<T *> self_;
};

}  // namespace gpuring
