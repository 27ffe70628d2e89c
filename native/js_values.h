// Conversions of JS values the addon receives.
#pragma once
#include <napi.h>
#include <cstdint>

namespace gpuring {

// A BigInt as an unsigned 64-bit integer (device pointers, tags, buffer ids).
inline uint64_t ToU64(const Napi::Value &v) {
  bool lossless = true;
  return v.As<Napi::BigInt>().Uint64Value(&lossless);
}

}  // namespace gpuring
