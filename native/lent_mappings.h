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
// replacement.
#pragma once
#include <napi.h>
#include <cstddef>
#include <memory>
#include <unordered_set>

namespace gpuring {

class LentMappings {
 public:
  LentMappings();
  // An ArrayBuffer over the mapping [base, base + size), which it now owns.
  Napi::ArrayBuffer Lend(Napi::Env env, void *base, size_t size);
  // Replaces every mapping still lent with zero pages (see above). JS thread only, as finalizers are.
  void TakeBack();

 private:
  struct Lent;
  using Registry = std::unordered_set<Lent *>;
  std::shared_ptr<Registry> lent_;
};

}  // namespace gpuring
