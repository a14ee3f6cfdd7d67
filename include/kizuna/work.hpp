// kizuna/work.hpp: the handle of one queued collective.
//
// Every collective returns a Work at once; the communicator's worker runs
// collectives in call order. A Work finishes exactly once, with success or
// with an exception (after PyTorch c10d's Work): wait() rethrows it,
// error() returns it. Works are cheap shared handles: copies refer to the
// same operation.
//
// wait() blocks until the collective has finished, for at most the timeout
// given (or forever without one: the collective's own deadline,
// KIZUNA_TIMEOUT, still bounds it). If the collective has not started yet and
// is next in line, the waiting thread runs it itself rather than hand it to
// the worker and sleep: a blocking call costs no thread switch.
//
// on_complete(fn) runs fn once the Work has finished: on the thread that
// finished it, or at once if it already has. fn should be short: that
// thread runs the communicator's calls, and the next one waits for fn. It
// may make calls on the same communicator and wait for them (they then
// run on this thread); it must not wait for anything else that needs the
// communicator's worker (another thread's calls, a torch future). An
// exception fn throws on the thread that finished the Work is logged and
// dropped (the other callbacks still run); one it throws at once, from
// on_complete itself, reaches the caller. fn may hold the last reference
// to the Communicator: released on the communicator's own worker, it
// lets that thread end by itself instead of waiting for it.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>

namespace kizuna {

namespace detail {
struct WorkState;
}

class Work {
 public:
  Work() = default;  // an empty Work is done
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}

  bool done() const;
  // Waits and rethrows the collective's error, if any.
  void wait() const;
  // Waits at most `timeout`; returns false if the Work has not finished by
  // then (the collective goes on), true if it has, rethrowing its error.
  bool wait(std::chrono::milliseconds timeout) const;
  // nullptr while running or after success.
  std::exception_ptr error() const;
  void on_complete(std::function<void(const Work&)> fn) const;
  // A finished receive: the rank its message came from (what a receive
  // from kAnySource needs); -1 otherwise.
  int source() const;

  const std::shared_ptr<detail::WorkState>& state() const { return state_; }

 private:
  std::shared_ptr<detail::WorkState> state_;
};

}  // namespace kizuna
