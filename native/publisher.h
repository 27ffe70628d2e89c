// Who published memory a consumer maps: producer (index, gen) of a ring. The
// process-wide caches of mappings and imports (IpcHandleCache, PoolImports)
// record it, so that a consumer's sweep can let go of what dead producers left
// mapped here: their allocations stay alive while this process maps them.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>

namespace gpuring::cuda {

struct Publisher {
  const std::string *segment = nullptr;  // interned (InternSegment): compared by address
  uint32_t index = 0, gen = 0;
};

// Whether producer (index, gen) of the ring being swept is still attached and alive.
using LivePublisher = std::function<bool(uint32_t index, uint32_t gen)>;

// One stable string per ring name, so a cache entry names its ring without a copy.
inline const std::string *InternSegment(const std::string &name) {
  static std::mutex mu;
  static std::set<std::string> names;
  std::lock_guard<std::mutex> lock(mu);
  return &*names.insert(name).first;
}

}  // namespace gpuring::cuda
