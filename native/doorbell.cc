#include "doorbell.h"
#include <sys/random.h>
#include <climits>
#include "errors.h"

namespace gpuring {

struct Doorbell::Handles {
  uv_poll_t poll;
  uv_timer_t timer;
  Doorbell *owner;
  int open = 2;  // handles not yet closed
};

namespace {
uint64_t RandomKey() {
  uint64_t key = 0;
  while (key == 0)
    if (getrandom(&key, sizeof key, 0) != sizeof key) key = gpr_monotonic_ns() ^ (static_cast<uint64_t>(getpid()) << 32);
  return key;
}

void CloseOne(uv_handle_t *h) {
  auto *hs = static_cast<Doorbell::Handles *>(h->data);
  if (--hs->open == 0) delete hs;
}
}  // namespace

Doorbell::Doorbell(Napi::Env env, gpr_segment *seg, uint32_t index, Callback on_wake)
    : seg_(seg), index_(index), on_wake_(std::move(on_wake)) {
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) Throw(env, GPR_E_SYSTEM, std::string("cannot create the doorbell socket: ") + strerror(errno));
  // A random key makes the name unguessable to processes that cannot read the
  // segment; a clash (or a squatter) only costs another draw.
  uint64_t key = 0;
  int rc = -1;
  for (int attempt = 0; attempt < 8 && rc != 0; attempt++) {
    key = RandomKey();
    struct sockaddr_un addr;
    socklen_t len = gpr_doorbell_address(seg->name, key, &addr);
    rc = bind(fd_, reinterpret_cast<struct sockaddr *>(&addr), len);
  }
  if (rc != 0) {
    int e = errno;
    close(fd_);
    Throw(env, GPR_E_SYSTEM, std::string("cannot bind the doorbell socket: ") + strerror(e));
  }
  key_ = key;
  __atomic_store_n(&seg->participants[index].doorbell_key, key, __ATOMIC_RELEASE);
  uv_loop_t *loop = nullptr;
  napi_get_uv_event_loop(env, &loop);
  handles_ = new Handles();
  handles_->owner = this;
  uv_poll_init(loop, &handles_->poll, fd_);
  uv_timer_init(loop, &handles_->timer);
  handles_->poll.data = handles_->timer.data = handles_;
  // Polled from now until closed: starting and stopping a poll costs epoll_ctl
  // system calls on every sleep and wake. The socket is readable only when
  // rung, so an idle poll costs nothing; it keeps the process alive only while
  // a Sleep() asks for that.
  uv_unref(reinterpret_cast<uv_handle_t *>(&handles_->poll));
  uv_poll_start(&handles_->poll, UV_READABLE, [](uv_poll_t *h, int, int) {
    auto *hs = static_cast<Handles *>(h->data);
    if (hs->owner) hs->owner->Rung();
  });
}

Doorbell::~Doorbell() {
  Disarm();
  __atomic_store_n(&seg_->participants[index_].doorbell_key, 0, __ATOMIC_RELEASE);
  uv_poll_stop(&handles_->poll);
  uv_timer_stop(&handles_->timer);
  // The loop frees the handles once it has closed them; until then they must
  // not call back into this object.
  handles_->owner = nullptr;
  uv_close(reinterpret_cast<uv_handle_t *>(&handles_->poll), CloseOne);
  uv_close(reinterpret_cast<uv_handle_t *>(&handles_->timer), CloseOne);
  close(fd_);
}

// Notifiers ring the address the entry names: a key that damage changed
// (shared memory is untrusted, SPEC.md §10a) would leave us woken only by our
// timeout for good, so each sleep stores it again where it differs.
void Doorbell::Arm(uint32_t bit) {
  if (unread_) Drain();
  uint64_t *key = &seg_->participants[index_].doorbell_key;
  if (__atomic_load_n(key, __ATOMIC_RELAXED) != key_) __atomic_store_n(key, key_, __ATOMIC_RELEASE);
  gpr_doorbell_arm(seg_, index_, bit);
}

void Doorbell::Disarm() { gpr_doorbell_clear(seg_, index_, GPR_BELL_DATA | GPR_BELL_SPACE | GPR_BELL_FUTEX); }

void Doorbell::Sleep(uint64_t timeout_ms, bool keep_alive) {
  sleeping_ = true;
  rung_ = false;
  for (auto *h : {reinterpret_cast<uv_handle_t *>(&handles_->poll), reinterpret_cast<uv_handle_t *>(&handles_->timer)})
    keep_alive ? uv_ref(h) : uv_unref(h);
  uv_timer_start(&handles_->timer, [](uv_timer_t *h) {
    auto *hs = static_cast<Handles *>(h->data);
    if (hs->owner) hs->owner->Wake();
  }, timeout_ms, 0);
}

void Doorbell::Stop() {
  sleeping_ = false;
  uv_unref(reinterpret_cast<uv_handle_t *>(&handles_->poll));
  uv_timer_stop(&handles_->timer);
}

bool Doorbell::Block(uint32_t bit, uint64_t timeout_ms) {
  return gpr_doorbell_sleep_on_word(seg_, index_, bit, std::min<uint64_t>(timeout_ms, UINT64_MAX / 1000000) * 1000000);
}

// A ring that wakes us is left unread: reading it (the datagram, then the
// EAGAIN that proves the socket empty) would put two system calls between the
// ring and the JS callback. The next Arm() reads it before declaring us asleep
// again, so no ring meant for that sleep is read away. A ring that comes while
// awake (a producer saw our armed bit just before we cleared it) is read and
// ignored at once: the poll is level-triggered.
void Doorbell::Rung() {
  if (!sleeping_) return Drain();
  unread_ = rung_ = true;
  Wake();
}

void Doorbell::Wake() {
  if (!sleeping_) return;
  Stop();
  on_wake_();
}

// Rings carry no data: read them all so the next sleep starts quiet.
void Doorbell::Drain() {
  char buf[64];
  while (recv(fd_, buf, sizeof buf, MSG_DONTWAIT) >= 0) {
  }
  unread_ = false;
}

}  // namespace gpuring
