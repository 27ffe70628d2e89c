#include "lent_mappings.h"
#include <sys/mman.h>

namespace gpuring {

// The registry is weak here: a buffer may outlive the core that lent it.
struct LentMappings::Lent {
  void *base;
  size_t size;
  std::weak_ptr<Registry> registry;
};

LentMappings::LentMappings() : lent_(std::make_shared<Registry>()) {}

Napi::ArrayBuffer LentMappings::Lend(Napi::Env env, void *base, size_t size) {
  auto *lent = new Lent{base, size, lent_};
  Napi::ArrayBuffer buffer;
  try {
    buffer = Napi::ArrayBuffer::New(
        env, base, size,
        [](Napi::Env, void *, Lent *l) {
          munmap(l->base, l->size);
          if (auto registry = l->registry.lock()) registry->erase(l);
          delete l;
        },
        lent);
  } catch (...) {
    munmap(base, size);
    delete lent;
    throw;
  }
  lent_->insert(lent);
  return buffer;
}

void LentMappings::TakeBack() {
  // Over the whole mapping, so the replacement adds no mapping of its own.
  // Should it fail, the file stays mapped until the finalizer, as before.
  for (Lent *l : *lent_)
    mmap(l->base, l->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  lent_->clear();
}

}  // namespace gpuring
