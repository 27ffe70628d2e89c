#include "lent_mappings.h"
#include <sys/mman.h>
#include <atomic>
#include "errors.h"

namespace gpuring {

// The registry is weak here: a buffer may outlive the core that lent it.
struct LentMappings::Lent {
  void *base;
  size_t size;
  std::string file;
  std::weak_ptr<Registry> registry;
  // Set while napi_create_external_arraybuffer runs: a finalizer Node runs
  // then (it does when it refuses the buffer) leaves the clean-up to Lend.
  bool lending;
};

namespace {
std::atomic<uint64_t> lend_limit{uint64_t{1} << 32};
}

uint64_t LentMappings::Limit() { return lend_limit.load(std::memory_order_relaxed); }

void LentMappings::SetLimit(uint64_t bytes) { lend_limit.store(bytes, std::memory_order_relaxed); }

void LentMappings::Finalize(napi_env, void *, void *hint) {
  auto *l = static_cast<Lent *>(hint);
  if (l->lending) return;
  munmap(l->base, l->size);
  if (auto registry = l->registry.lock()) registry->erase(l);
  delete l;
}

LentMappings::LentMappings() : lent_(std::make_shared<Registry>()) {}

// napi directly rather than Napi::ArrayBuffer::New, whose clean-up after a
// refusal frees what Node's early finalizer call already freed.
Napi::ArrayBuffer LentMappings::Lend(Napi::Env env, void *base, size_t size, std::string file) {
  if (size > Limit()) {
    munmap(base, size);
    Throw(env, GPR_E_UNSUPPORTED,
          "this Node.js lends JavaScript at most " + std::to_string(Limit()) + " bytes as one ArrayBuffer (buffer.constants.MAX_LENGTH), and a mapping of " +
              std::to_string(size) + " bytes was asked for; Node.js 22 or later lends up to 2^53 - 1");
  }
  auto *lent = new Lent{base, size, std::move(file), lent_, true};
  napi_value buffer = nullptr;
  napi_status status = napi_create_external_arraybuffer(env, base, size, Finalize, lent, &buffer);
  lent->lending = false;
  if (status != napi_ok) {
    munmap(base, size);
    delete lent;
    throw Napi::Error::New(env);
  }
  lent_->insert(lent);
  return Napi::ArrayBuffer(env, buffer);
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
