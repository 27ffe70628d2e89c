#include "lent_mappings.h"
#include <sys/mman.h>

namespace gpuring {

// The registry is weak here: a buffer may outlive the core that lent it.
struct LentMappings::Lent {
  void *base;
  size_t size;
  std::string file;
  std::weak_ptr<Registry> registry;
};

LentMappings::LentMappings() : lent_(std::make_shared<Registry>()) {}

Napi::ArrayBuffer LentMappings::Lend(Napi::Env env, void *base, size_t size, std::string file) {
  auto *lent = new Lent{base, size, std::move(file), lent_};
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
  for (Lent *l : *lent_) Replace(*l);
  lent_->clear();
}

bool LentMappings::TakeBackRemoved(const std::function<bool(const std::string &file)> &removed) {
  bool any = false;
  for (auto it = lent_->begin(); it != lent_->end();) {
    if ((*it)->file.empty() || !removed((*it)->file)) {
      ++it;
      continue;
    }
    Replace(**it);
    it = lent_->erase(it);
    any = true;
  }
  return any;
}

// Over the whole mapping, so the replacement adds no mapping of its own.
// Should it fail, the file stays mapped until the finalizer, as before.
void LentMappings::Replace(const Lent &l) {
  mmap(l.base, l.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

}  // namespace gpuring
