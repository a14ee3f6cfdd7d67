#include <kizuna/work.hpp>

#include "comm/work_state.hpp"

namespace kizuna {

bool Work::done() const {
  return !state_ || state_->finished.load(std::memory_order_acquire);
}

int Work::source() const { return state_ ? state_->source.load(std::memory_order_relaxed) : -1; }

void Work::wait() const {
  if (!state_) return;
  std::function<void()> run;
  {
    std::lock_guard lock(state_->mutex);
    // Taken, not copied: one waiter is enough to run it.
    if (!state_->finished.load(std::memory_order_relaxed)) run = std::move(state_->run_inline);
  }
  if (run) run();
  if (!state_->finished.load(std::memory_order_acquire)) {
    std::unique_lock lock(state_->mutex);
    state_->cv.wait(lock, [&] { return state_->finished.load(std::memory_order_relaxed); });
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::wait(std::chrono::milliseconds timeout) const {
  if (!state_) return true;
  std::unique_lock lock(state_->mutex);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->finished.load(std::memory_order_relaxed); }))
    return false;
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

std::exception_ptr Work::error() const {
  if (!state_) return nullptr;
  std::lock_guard lock(state_->mutex);
  return state_->error;
}

void Work::on_complete(std::function<void(const Work&)> fn) const {
  if (state_) {
    std::unique_lock lock(state_->mutex);
    if (!state_->finished.load(std::memory_order_relaxed)) {
      state_->callbacks.push_back(std::move(fn));
      return;
    }
  }
  fn(*this);
}

}  // namespace kizuna
