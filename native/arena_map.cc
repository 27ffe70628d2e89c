#include "arena_map.h"
#include "errors.h"

namespace gpuring {

Napi::ArrayBuffer MapArenaBuffer(Napi::Env env, LentMappings &lent, int fd, uint64_t start, uint64_t length, std::string file) {
  void *base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  if (base == MAP_FAILED) {
    gpr_error err{};
    gpr_fail(&err, GPR_E_SYSTEM, errno, "mmap of arena failed: %s", strerror(errno));
    Throw(env, err);
  }
  return lent.Lend(env, base, length, std::move(file));
}

namespace {

// The validated file of arena `name`, closed when this goes out of scope.
struct ArenaFile {
  int fd = -1;
  uint64_t size = 0;
  ArenaFile(Napi::Env env, const gpr_segment &seg, const std::string &name) {
    Check(env, [&](gpr_error *e) { return gpr_arena_open_file(&seg, name.c_str(), &fd, &size, e); });
  }
  ~ArenaFile() {
    if (fd >= 0) close(fd);
  }
  ArenaFile(const ArenaFile &) = delete;
  ArenaFile &operator=(const ArenaFile &) = delete;
};

}  // namespace

Napi::Value OpenArenaBuffer(Napi::Env env, LentMappings &lent, const gpr_segment &seg, const std::string &name) {
  ArenaFile file(env, seg, name);
  if (file.size > LentMappings::Limit()) return Napi::Number::New(env, static_cast<double>(file.size));
  return MapArenaBuffer(env, lent, file.fd, 0, file.size, name);
}

Napi::ArrayBuffer OpenArenaWindow(Napi::Env env, LentMappings &lent, const gpr_segment &seg, const std::string &name,
                                  uint64_t start, uint64_t length) {
  ArenaFile file(env, seg, name);
  if (start % static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) != 0 || length == 0 || !gpr_range_ok(start, length, file.size))
    Throw(env, GPR_E_FRAME_BOUNDS,
          "a window [" + std::to_string(start) + ", +" + std::to_string(length) + ") of arena " + name + " (" + std::to_string(file.size) + " bytes) is not page-aligned inside it");
  return MapArenaBuffer(env, lent, file.fd, start, length, name);
}

BodyReader::~BodyReader() {
  for (auto &kv : views_) gpr_arena_view_close(&kv.second);
}

void BodyReader::ForgetRemoved(const std::function<bool(uint32_t index, uint32_t gen, uint32_t arena)> &removed) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = views_.begin(); it != views_.end();) {
    auto [index, gen, arena] = it->first;
    if (!removed(index, gen, arena)) {
      ++it;
      continue;
    }
    gpr_arena_view_close(&it->second);
    it = views_.erase(it);
  }
}

bool BodyReader::Locate(const gpr_frame_ref &ref, const uint8_t **src, gpr_error *err) {
  if (ref.producer >= seg_->participant_capacity || ref.body_arena >= GPR_MAX_ARENAS ||
      ref.body_length < sizeof(gpr_body_header) || ref.body_length > GPR_MAX_BODY_BYTES) {
    gpr_fail(err, GPR_E_FRAME_INVALID, 0, "frame record is malformed (producer %u, arena %u, %u bytes)",
             ref.producer, ref.body_arena, ref.body_length);
    return false;
  }
  char name[GPR_SHM_NAME_MAX];
  std::lock_guard<std::mutex> lock(mu_);
  auto it = views_.find(ArenaKey{ref.producer, ref.producer_gen, ref.body_arena});
  if (it == views_.end()) {
    if (views_.size() >= kMaxViews) {  // producers come and go; keep the mappings bounded
      for (auto &kv : views_) gpr_arena_view_close(&kv.second);
      views_.clear();
    }
    gpr_arena_shm_name(seg_->name, ref.producer, ref.producer_gen, ref.body_arena, name);
    gpr_arena_view view{};
    if (gpr_arena_open(seg_, name, &view, err) != 0) return false;
    it = views_.emplace(ArenaKey{ref.producer, ref.producer_gen, ref.body_arena}, view).first;
  }
  if (!gpr_range_ok(ref.body_offset, ref.body_length, it->second.size)) {
    gpr_fail(err, GPR_E_FRAME_BOUNDS, 0, "frame body [%llu, +%u) lies outside arena a%u of participant %u",
             (unsigned long long)ref.body_offset, ref.body_length, ref.body_arena, ref.producer);
    return false;
  }
  *src = it->second.base + ref.body_offset;
  return true;
}

}  // namespace gpuring
