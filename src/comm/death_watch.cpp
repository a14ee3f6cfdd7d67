#include "comm/death_watch.hpp"

#include <chrono>

#include "comm/agreement.hpp"

namespace kizuna::comm {
namespace {

// How soon a death is seen; set-up ends within about this after it.
constexpr std::chrono::milliseconds kWatchEvery{50};

}  // namespace

DeathWatch::DeathWatch(Store& store, std::string failed_key, std::vector<Watched> watched, std::string what)
    : store_(store), failed_key_(std::move(failed_key)), watched_(std::move(watched)), what_(std::move(what)),
      self_(this_process()), thread_([this] { run(); }) {}

DeathWatch::~DeathWatch() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void DeathWatch::run() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, kWatchEvery, [this] { return stop_; })) {
    for (std::size_t i = 0; i < watched_.size(); ++i) {
      if (!process_gone(watched_[i].process, self_)) continue;
      dead_.store(static_cast<int>(i));
      const std::string message = watched_[i].label + " died " + what_;
      try {
        store_.compare_set(failed_key_, {}, Bytes(message.begin(), message.end()));
      } catch (const std::exception&) {
        // the store's own failure ends the set-up anyway
      }
      return;
    }
  }
}

}  // namespace kizuna::comm
