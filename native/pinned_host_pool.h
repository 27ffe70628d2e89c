// PinnedHostPool: page-locked host blocks that large device-to-host results
// (frame.toTable()) are copied into directly. DMA into pinned memory runs at
// the link's full rate and needs no second copy out of a staging buffer; the
// ArrayBuffer over a block gives it back when V8 collects it, and the next
// result of a similar size reuses it, because pinning fresh memory costs far
// more than the copy. Bounded: past the limit, callers stage through the two
// small pinned chunks instead.
#pragma once
#include <napi.h>
#include <cstddef>
#include <map>
#include <mutex>
#include "cuda_driver.h"

namespace gpuring::cuda {

class PinnedHostPool {
 public:
  static PinnedHostPool &Get();

  // An ArrayBuffer of n bytes over a pinned block, or an empty one when the
  // bound would be passed or pinning fails. Needs a current CUDA context.
  Napi::ArrayBuffer Take(Napi::Env env, const Driver &d, size_t n);

  // { pinnedBytes, idleBytes, limitBytes }
  Napi::Object Stats(Napi::Env env);

 private:
  static constexpr size_t kGranule = 2u << 20;
  void Give(void *block, size_t capacity);
  void *Reuse(size_t *capacity);
  bool Trim(const Driver &d, size_t need);

  std::mutex mu_;
  std::multimap<size_t, void *> idle_;  // capacity -> block
  size_t pinned_ = 0;                   // bytes pinned, in use or idle
  size_t limit_ = 0;
};

}  // namespace gpuring::cuda
