#include "call_timeouts.hpp"

#include <utility>

namespace kizuna_torch {

void CallTimeouts::watch(const c10::intrusive_ptr<KizunaWork>& work, std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  deadlines_.emplace(std::chrono::steady_clock::now() + timeout,
                     Entry{c10::weak_intrusive_ptr<KizunaWork>(work), timeout});
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  cv_.notify_one();
}

void CallTimeouts::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    deadlines_.clear();
  }
  cv_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void CallTimeouts::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (deadlines_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const auto first = deadlines_.begin();
    if (std::chrono::steady_clock::now() < first->first) {
      cv_.wait_until(lock, first->first);  // woken early by a nearer deadline or stop()
      continue;
    }
    Entry entry = std::move(first->second);
    deadlines_.erase(first);
    const c10::intrusive_ptr<KizunaWork> work = entry.work.lock();
    if (!work || work->isCompleted()) continue;
    lock.unlock();
    expire_(work, entry.timeout);
    lock.lock();
  }
}

}  // namespace kizuna_torch
