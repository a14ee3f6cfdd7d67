// integrations/torch/csrc/call_timeouts.hpp: the deadlines of calls made
// with a timeout of their own.
//
// torch passes a per-call timeout in a call's options (barrier(timeout=...),
// monitored_barrier, the ops of torch 2.x). kizuna has one deadline per
// communicator (the group's timeout, set at creation), so a shorter per-call
// timeout is kept here: watch(work, timeout) arranges for `expire(work,
// timeout)` to run if the Work has not completed `timeout` after the call.
// The owner's expire fails the Work and aborts the communicator, as kizuna
// does itself when its own deadline passes.
//
// Threading: one thread, started by the first watch() and ended by stop()
// or the destructor; expire runs on it. Entries hold the Work weakly: a
// Work the caller dropped and that has completed costs nothing at its
// deadline.
#pragma once

#include "kizuna_work.hpp"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace kizuna_torch {

class CallTimeouts {
 public:
  using Expire = std::function<void(const c10::intrusive_ptr<KizunaWork>&, std::chrono::milliseconds)>;

  explicit CallTimeouts(Expire expire) : expire_(std::move(expire)) {}
  ~CallTimeouts() { stop(); }
  CallTimeouts(const CallTimeouts&) = delete;
  CallTimeouts& operator=(const CallTimeouts&) = delete;

  void watch(const c10::intrusive_ptr<KizunaWork>& work, std::chrono::milliseconds timeout);
  // Ends the thread (waiting for an expire in progress); later deadlines
  // are dropped. Idempotent.
  void stop();

 private:
  struct Entry {
    c10::weak_intrusive_ptr<KizunaWork> work;
    std::chrono::milliseconds timeout;
  };
  void run();

  Expire expire_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::multimap<std::chrono::steady_clock::time_point, Entry> deadlines_;
  std::thread thread_;
  bool stopping_ = false;
};

}  // namespace kizuna_torch
