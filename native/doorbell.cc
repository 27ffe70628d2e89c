#include "doorbell.h"
#include <sys/random.h>
#include <sys/stat.h>
#include <climits>
#include "errors.h"

namespace gpuring {

struct Doorbell::Handles {
  uv_poll_t poll;       // the socket
  uv_poll_t pipe_poll;  // the pipe's read end
  uv_timer_t timer;
  Doorbell *owner;
  int open = 3;  // handles not yet closed
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

uv_handle_t *AsHandle(uv_poll_t *h) { return reinterpret_cast<uv_handle_t *>(h); }
uv_handle_t *AsHandle(uv_timer_t *h) { return reinterpret_cast<uv_handle_t *>(h); }

// Rings carry no data: reads until the descriptor is empty.
void DrainFd(int fd) {
  char buf[64];
  while (read(fd, buf, sizeof buf) > 0) {
  }
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
  OpenPipe(env);
  __atomic_store_n(&seg->participants[index].doorbell_key, key, __ATOMIC_RELEASE);
  uv_loop_t *loop = nullptr;
  napi_get_uv_event_loop(env, &loop);
  handles_ = new Handles();
  handles_->owner = this;
  uv_poll_init(loop, &handles_->poll, fd_);
  uv_poll_init(loop, &handles_->pipe_poll, pipe_[0]);
  uv_timer_init(loop, &handles_->timer);
  handles_->poll.data = handles_->pipe_poll.data = handles_->timer.data = handles_;
  // Polled from now until closed: starting and stopping a poll costs epoll_ctl
  // system calls on every sleep and wake. The socket and the pipe are readable
  // only when rung, so an idle poll costs nothing; they keep the process alive
  // only while a Sleep() asks for that. Notifiers that cannot open the pipe
  // (another user's, SPEC.md §6.1) and those of 2.4 or older ring the socket.
  uv_unref(AsHandle(&handles_->poll));
  uv_unref(AsHandle(&handles_->pipe_poll));
  auto rung = [](uv_poll_t *h, int, int) {
    auto *hs = static_cast<Handles *>(h->data);
    if (hs->owner) hs->owner->Rung(h == &hs->pipe_poll);
  };
  uv_poll_start(&handles_->poll, UV_READABLE, rung);
  uv_poll_start(&handles_->pipe_poll, UV_READABLE, rung);
}

// A pipe wakes its poller 20-30% sooner than a datagram (an eventfd's time;
// SPEC.md §6.1). Notifiers open the read end for writing, as /proc/PID/fd/N.
// The write end stays open, unused: a pipe without a writer polls as hung up,
// readable for ever, whenever no notifier holds it open. Arm() names the pipe
// in the entry before it first sets GPR_BELL_PIPE.
void Doorbell::OpenPipe(Napi::Env env) {
  struct stat st;
  if (pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    int e = errno;
    close(fd_);
    Throw(env, GPR_E_SYSTEM, std::string("cannot create the doorbell pipe: ") + strerror(e));
  }
  fstat(pipe_[0], &st);
  pipe_ino_ = static_cast<uint64_t>(st.st_ino);
}

Doorbell::~Doorbell() {
  Disarm();
  gpr_participant *p = &seg_->participants[index_];
  __atomic_store_n(&p->doorbell_pipe_ino, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&p->doorbell_key, 0, __ATOMIC_RELEASE);
  uv_poll_stop(&handles_->poll);
  uv_poll_stop(&handles_->pipe_poll);
  uv_timer_stop(&handles_->timer);
  // The loop frees the handles once it has closed them; until then they must
  // not call back into this object.
  handles_->owner = nullptr;
  uv_close(AsHandle(&handles_->poll), CloseOne);
  uv_close(AsHandle(&handles_->pipe_poll), CloseOne);
  uv_close(AsHandle(&handles_->timer), CloseOne);
  close(fd_);
  close(pipe_[0]);
  close(pipe_[1]);
}

// Notifiers ring the address and the pipe the entry names: a key or pipe that
// damage changed (shared memory is untrusted, SPEC.md §10a) would leave us
// woken only by our timeout for good, so each sleep stores them where they
// differ (the pipe's, the first time, too), before the bit that says so.
void Doorbell::Arm(uint32_t bit) {
  Drain();
  gpr_participant *p = &seg_->participants[index_];
  if (__atomic_load_n(&p->doorbell_key, __ATOMIC_RELAXED) != key_) __atomic_store_n(&p->doorbell_key, key_, __ATOMIC_RELEASE);
  if (!(bit & GPR_BELL_FUTEX)) {
    if (__atomic_load_n(&p->doorbell_pipe, __ATOMIC_RELAXED) != static_cast<uint32_t>(pipe_[0]))
      __atomic_store_n(&p->doorbell_pipe, static_cast<uint32_t>(pipe_[0]), __ATOMIC_RELAXED);
    if (__atomic_load_n(&p->doorbell_pipe_ino, __ATOMIC_RELAXED) != pipe_ino_)
      __atomic_store_n(&p->doorbell_pipe_ino, pipe_ino_, __ATOMIC_RELEASE);
    bit |= GPR_BELL_PIPE;
  }
  gpr_doorbell_arm(seg_, index_, bit);
}

void Doorbell::Disarm() { gpr_doorbell_clear(seg_, index_, GPR_BELL_ALL); }

void Doorbell::Sleep(uint64_t timeout_ms, bool keep_alive) {
  sleeping_ = true;
  rung_ = false;
  for (auto *h : {AsHandle(&handles_->poll), AsHandle(&handles_->pipe_poll), AsHandle(&handles_->timer)})
    keep_alive ? uv_ref(h) : uv_unref(h);
  uv_timer_start(&handles_->timer, [](uv_timer_t *h) {
    auto *hs = static_cast<Handles *>(h->data);
    if (hs->owner) hs->owner->Wake();
  }, timeout_ms, 0);
}

void Doorbell::Stop() {
  sleeping_ = false;
  uv_unref(AsHandle(&handles_->poll));
  uv_unref(AsHandle(&handles_->pipe_poll));
  uv_timer_stop(&handles_->timer);
}

bool Doorbell::Block(uint32_t bit, uint64_t timeout_ms) {
  return gpr_doorbell_sleep_on_word(seg_, index_, bit, std::min<uint64_t>(timeout_ms, UINT64_MAX / 1000000) * 1000000);
}

// A ring that wakes us is left unread: reading it (the byte or datagram, then
// the EAGAIN that proves it empty) would put two system calls between the
// ring and the JS callback. The next Arm() reads it before declaring us asleep
// again, so no ring meant for that sleep is read away. A ring that comes while
// awake (a producer saw our armed bit just before we cleared it) is read and
// ignored at once: the polls are level-triggered.
void Doorbell::Rung(bool on_pipe) {
  (on_pipe ? unread_pipe_ : unread_socket_) = true;
  if (!sleeping_) return Drain();
  rung_ = true;
  Wake();
}

void Doorbell::Wake() {
  if (!sleeping_) return;
  Stop();
  on_wake_();
}

// Reads every ring so the next sleep starts quiet: only where one woke us,
// each read being a system call.
void Doorbell::Drain() {
  if (std::exchange(unread_socket_, false)) DrainFd(fd_);
  if (std::exchange(unread_pipe_, false)) DrainFd(pipe_[0]);
}

}  // namespace gpuring
