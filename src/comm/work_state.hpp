// comm/work_state.hpp: what a Work handle points to.
//
// Finished exactly once by finish(); waiters sleep on the condition
// variable; callbacks run after the state is published, outside the lock.
// `run_inline` lets a waiter execute its own queued collective when it is
// next in line and the worker is idle (see Work::wait).
#pragma once

#include <kizuna/work.hpp>

#include "core/log.hpp"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

namespace kizuna::detail {

struct WorkState : std::enable_shared_from_this<WorkState> {
  mutable std::mutex mutex;
  std::condition_variable cv;
  // Written under the mutex; read without it by the waiters' fast path
  // (`error` is written before it, and not after).
  std::atomic<bool> finished{false};
  std::exception_ptr error;
  std::atomic<int> source{-1};  // a receive's source rank, set before finish()
  std::vector<std::function<void(const Work&)>> callbacks;
  std::function<void()> run_inline;

  void finish(std::exception_ptr e) {
    std::vector<std::function<void(const Work&)>> todo;
    {
      std::lock_guard lock(mutex);
      if (finished.load(std::memory_order_relaxed)) return;
      error = std::move(e);
      finished.store(true, std::memory_order_release);
      todo.swap(callbacks);
      run_inline = nullptr;
    }
    cv.notify_all();
    const Work self(shared_from_this());
    // A callback that throws (one that calls wait() on a failed Work) must
    // not stop the others, nor leave the thread that finishes Works: its
    // exception is logged and dropped.
    for (auto& fn : todo) {
      try {
        fn(self);
      } catch (const std::exception& e) {
        KIZUNA_LOG(Error) << "a Work's on_complete callback threw, ignored: " << e.what();
      } catch (...) {
        KIZUNA_LOG(Error) << "a Work's on_complete callback threw something that is not a std::exception, ignored";
      }
    }
  }
};

}  // namespace kizuna::detail
