// Shared memory a core lends to JS as external ArrayBuffers (arena views, the
// sleepers page), taken back at close().
//
// A buffer's finalizer unmaps its mapping, but only a garbage collection runs
// it, on a later turn of the event loop. A process that closes participants
// and seldom collects (a quiet server), or never turns its loop meanwhile (a
// loop of awaits on settled promises), kept every closed ring's files mapped:
// their memory in /dev/shm stayed allocated after the ring was removed, and the
// mappings piled up until mmap failed (vm.max_map_count). So close() replaces
// each mapping still lent, in place, with private zero pages: a view read
// after close() reads zeros and a write goes nowhere, instead of faulting, and
// the files are freed once nobody else maps them. The finalizer unmaps the
// replacement. A consumer takes back an arena sooner, once no frame can refer
// to it any more (TakeBackRemoved).
#pragma once
#include <napi.h>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>

namespace gpuring {

class LentMappings {
 public:
  LentMappings();
  // An ArrayBuffer over the mapping [base, base + size), which it now owns
  // (unmapped at once when it cannot be lent); `file`: the shared-memory
  // object mapped, for TakeBackRemoved(). UNSUPPORTED over Limit().
  Napi::ArrayBuffer Lend(Napi::Env env, void *base, size_t size, std::string file = {});
  // The most bytes one ArrayBuffer over outside memory can hold in this Node
  // (buffer.constants.MAX_LENGTH: 4 GiB before Node 22, which Node refuses to
  // exceed by running the buffer's finalizer at once). lib/native.ts sets it
  // at load; until then the smaller value holds.
  static uint64_t Limit();
  static void SetLimit(uint64_t bytes);
  // Replaces every mapping still lent with zero pages (see above). JS thread only, as finalizers are.
  void TakeBack();
  // The same for each mapping of a file `removed` says is gone; whether it took any back.
  bool TakeBackRemoved(const std::function<bool(const std::string &file)> &removed);

 private:
  struct Lent;
  using Registry = std::unordered_set<Lent *>;
  static void Replace(const Lent &l);
  static void Finalize(napi_env env, void *data, void *hint);
  std::shared_ptr<Registry> lent_;
};

}  // namespace gpuring
