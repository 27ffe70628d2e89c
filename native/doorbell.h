// Doorbell: this participant's wake-up socket, polled by Node's event loop.
//
// A sleeping Node participant must be woken by another process in one hop:
// the producer's write to our pipe (or sendto() to our socket) makes it
// readable and libuv runs our callback on the JS thread, with no waiter
// thread in between (a futex can
// only be slept on by a thread, which would then have to wake the loop: two
// wake-ups). The protocol (who rings whom, when) is gpuring/doorbell.h's.
//
// Sleep() is one-shot: the callback runs once, when the bell rings or the
// timeout passes (a sleeper still wakes to sweep and to expire requests, and a
// ring lost to a peer outside our network namespace costs one tick, not a
// hang). While asleep the handles keep the process alive unless told not to;
// otherwise not.
#pragma once
#include <napi.h>
#include <uv.h>
#include <functional>
#include <utility>
#include "gpuring.h"

namespace gpuring {

class Doorbell {
 public:
  using Callback = std::function<void()>;

  // Binds a socket under a fresh random key, opens a pipe, and records both
  // in entry `index`; throws SYSTEM if either cannot be made.
  Doorbell(Napi::Env env, gpr_segment *seg, uint32_t index, Callback on_wake);
  ~Doorbell();
  Doorbell(const Doorbell &) = delete;
  Doorbell &operator=(const Doorbell &) = delete;

  // Declares this participant asleep waiting for `bit` (GPR_BELL_DATA or
  // GPR_BELL_SPACE), first reading any ring left from the last wake-up. Look
  // at the ring once more after this, before Sleep().
  void Arm(uint32_t bit);
  // Clears every bit this participant set (it woke on its own or stops waiting).
  void Disarm();
  // Starts the timer and takes the next ring; the callback runs once. With
  // keep_alive false the wait does not keep the process alive.
  void Sleep(uint64_t timeout_ms, bool keep_alive = true);
  // Ends the sleep without running the callback.
  void Stop();
  // For a caller that chose to block its thread (nextSync), after
  // Arm(bit | GPR_BELL_FUTEX): sleeps in FUTEX_WAIT on this participant's
  // doorbell word, not on the socket, for up to timeout_ms; the callback does
  // not run. Returns whether a ring woke it (a timeout or a signal: false).
  // The wake-up then reaches the caller without libuv, a callback scope, a
  // promise and a microtask in between, and costs what an eventfd's does,
  // where a datagram's costs 1-6 us more (SPEC.md §6.1).
  bool Block(uint32_t bit, uint64_t timeout_ms);
  // Whether a ring woke us since the last call (not the timeout).
  bool TakeRung() { return std::exchange(rung_, false); }

  struct Handles;  // the uv handles; freed by their close callbacks, which may run after us

 private:
  void Rung(bool on_pipe);  // the socket or the pipe became readable
  void Wake();              // rung, or the timeout passed
  void Drain();
  void OpenPipe(Napi::Env env);

  gpr_segment *seg_;
  uint32_t index_;
  uint64_t key_ = 0;  // the socket's name; stored again at Arm() if the entry lost it
  int fd_ = -1;
  Callback on_wake_;
  Handles *handles_ = nullptr;
  bool sleeping_ = false;
  int pipe_[2] = {-1, -1};  // polled read end (notifiers open it for writing), unused write end
  uint64_t pipe_ino_ = 0;   // its inode, as the entry names it
  bool unread_socket_ = false, unread_pipe_ = false;  // a ring that woke us may still be there
  bool rung_ = false;    // a ring woke us; not yet asked about
};

}  // namespace gpuring
