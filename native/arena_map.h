// External ArrayBuffers over host arenas. Each call maps the arena anew and the
// mapping is lent to JS (LentMappings): unmapped by the buffer's finalizer, so
// a table that outlives its consumer or producer never reads unmapped memory,
// V8 never sees two ArrayBuffers over one address, and close() takes it back.
#pragma once
#include <napi.h>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include "gpuring.h"
#include "lent_mappings.h"

namespace gpuring {

// Maps the bytes [start, start + length) of arena file `fd` and lends them
// (`file`: its name, for LentMappings::TakeBackRemoved). Throws on failure.
Napi::ArrayBuffer MapArenaBuffer(Napi::Env env, LentMappings &lent, int fd, uint64_t start, uint64_t length, std::string file = {});

// Opens a consumer-side arena by name (validated against the segment) and lends
// it whole; or, when it is larger than one ArrayBuffer can hold in this Node
// (LentMappings::Limit()), returns its size, for OpenArenaWindow.
Napi::Value OpenArenaBuffer(Napi::Env env, LentMappings &lent, const gpr_segment &seg, const std::string &name);

// Lends the bytes [start, start + length) of a consumer-side arena as their own
// mapping: how JS reads an arena OpenArenaBuffer could not lend whole. `start`
// must be a multiple of the page size and the range inside the arena.
Napi::ArrayBuffer OpenArenaWindow(Napi::Env env, LentMappings &lent, const gpr_segment &seg, const std::string &name,
                                  uint64_t start, uint64_t length);

// Process-local, mutex-guarded cache of consumer mappings used to copy frame
// bodies out of producers' arenas. Lives as long as its consumer.
class BodyReader {
 public:
  explicit BodyReader(const gpr_segment *seg) : seg_(seg) {}
  ~BodyReader();
  // Points *src at the body `ref` names, in its arena, after checking that it
  // lies inside the arena. Returns false with `err` set if not.
  // The mapping stays valid until the next call that maps a new arena.
  bool Locate(const gpr_frame_ref &ref, const uint8_t **src, gpr_error *err);
  // Unmaps the arenas `removed` says no frame can refer to any more.
  void ForgetRemoved(const std::function<bool(uint32_t index, uint32_t gen, uint32_t arena)> &removed);

 private:
  static constexpr size_t kMaxViews = 64;
  const gpr_segment *seg_;
  std::mutex mu_;
  // Keyed by (producer, generation, arena number): the name is only formatted to open one.
  using ArenaKey = std::tuple<uint32_t, uint32_t, uint32_t>;
  std::map<ArenaKey, gpr_arena_view> views_;
};

}  // namespace gpuring
