// PinnedHostPool: page-locked host blocks that large device-to-host results
// (frame.toTable()) are copied into directly. DMA into pinned memory runs at
// the link's full rate and needs no second copy out of a staging buffer; the
// ArrayBuffer over a block gives it back when V8 collects it, and the next
// result of a similar size reuses it. Bounded: past the limit, callers stage
// through the two small pinned chunks instead.
//
// A fresh block is huge-page memory pinned piece by piece (cuMemHostRegister),
// not cuMemHostAlloc: that pins at 2-3 GB/s, a twentieth of the copy's rate,
// and on the first result of a size it was the whole cost. Piece by piece, the
// copy of one piece, the pinning of the next and the faulting-in of the one
// after run at the same time.
#pragma once
#include <napi.h>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include "cuda_driver.h"

namespace gpuring::cuda {

class PinnedHostPool {
 public:
  static PinnedHostPool &Get();

  // Queues the copy of [offset, offset + length) of the result into `host`
  // (the block's bytes there): called once per piece, in order, as each is
  // ready. A piece is pinned unless pinning failed; then the copy is a
  // pageable one, still correct.
  using PieceReady = std::function<void(void *host, size_t offset, size_t length)>;

  // An ArrayBuffer of n bytes over a block, `ready` called for each of its
  // pieces; an empty one (and no call) when the bound would be passed or the
  // memory cannot be mapped. Needs a current CUDA context. The caller waits
  // for its copies before the buffer is used.
  Napi::ArrayBuffer Take(Napi::Env env, const Driver &d, size_t n, const PieceReady &ready);

  // Pins a block for results of about n bytes now and keeps it idle, so that
  // the first such result copies at the link's rate instead of pinning as it
  // goes; false when the bound would be passed or the memory cannot be mapped.
  // Needs a current CUDA context.
  bool Reserve(const Driver &d, size_t n);

  // { pinnedBytes, idleBytes, limitBytes }
  Napi::Object Stats(Napi::Env env);

 private:
  static constexpr size_t kPiece = 32u << 20;  // H100: 16 and 64 MiB were slower
  struct Block {
    void *base;
    size_t capacity;
    size_t pinned;  // bytes from base registered: all, unless pinning failed part way
  };
  static size_t Capacity(size_t n);
  size_t IdleBytes() const;  // mu_ held
  bool Fresh(const Driver &d, Block *b);
  void Pin(const Driver &d, Block &b, size_t n, const PieceReady &ready);
  void Give(const Block &b);
  bool Reuse(size_t capacity, Block *out);
  bool Trim(const Driver &d, size_t need);
  static void Free(const Driver &d, const Block &b);

  std::mutex mu_;
  std::multimap<size_t, Block> idle_;  // capacity -> block
  size_t reserved_ = 0;                // bytes of blocks, in use or idle
  size_t limit_ = 0;
};

}  // namespace gpuring::cuda
