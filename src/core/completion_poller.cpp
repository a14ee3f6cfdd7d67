#include "core/completion_poller.hpp"

#include <kizuna/error.hpp>

#include <algorithm>

namespace kizuna::core {

CompletionPoller::~CompletionPoller() {
  std::list<Entry> left;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    left.swap(items_);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // One last look at each: what has finished ends as it would have.
  for (Entry& e : left) {
    if (e.expired) continue;
    Item& item = e.item;
    try {
      if (item.poll()) {
        item.on_done(nullptr);
        continue;
      }
    } catch (...) {
      item.on_done(std::current_exception());
      continue;
    }
    item.on_done(std::make_exception_ptr(
        Error(ErrorCode::Aborted, item.what + ": its communicator's device state was destroyed before it ended")));
  }
}

void CompletionPoller::watch(Item item) {
  {
    std::lock_guard lock(mutex_);
    items_.push_back({std::move(item)});
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_one();
}

std::size_t CompletionPoller::pending() const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const Entry& e : items_) n += !e.expired;
  return n;
}

void CompletionPoller::run() {
  using std::chrono::microseconds;
  // Idle passes since something last finished: a short spin first (a
  // kernel of a few microseconds), then naps growing to 1 ms.
  int idle = 0;
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !items_.empty(); });
    if (stopping_) return;
    // Take the items out to poll them without the lock; watch() may add
    // more meanwhile.
    std::list<Entry> batch;
    batch.swap(items_);
    lock.unlock();
    bool progressed = false;
    for (auto it = batch.begin(); it != batch.end();) {
      Item& item = it->item;
      std::exception_ptr error;
      bool done = false;
      try {
        done = item.poll();
      } catch (...) {
        error = std::current_exception();
        done = true;
      }
      if (it->expired) {  // reported already: dropped once the device is past it
        it = done ? batch.erase(it) : std::next(it);
        continue;
      }
      if (!done && Clock::now() >= item.deadline) {
        if (item.on_expire) item.on_expire();
        item.on_done(std::make_exception_ptr(
            Error(ErrorCode::Timeout, item.what + " timed out: the device did not finish it by its deadline")));
        it->expired = true;
        progressed = true;
        ++it;
        continue;
      }
      if (!done) {
        ++it;
        continue;
      }
      item.on_done(std::move(error));
      it = batch.erase(it);
      progressed = true;
    }
    idle = progressed ? 0 : idle + 1;
    lock.lock();
    items_.splice(items_.begin(), batch);  // the older ones first, as they came
    if (items_.empty() || stopping_) continue;
    if (idle < 64) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    } else {
      const auto nap = microseconds(std::min(1000, 10 * (idle - 63)));
      cv_.wait_for(lock, nap, [this] { return stopping_; });
    }
  }
}

}  // namespace kizuna::core
