#include "comm/death_watch.hpp"

#include <kizuna/error.hpp>

#include <chrono>
#include <cstring>

#include "comm/agreement.hpp"

namespace kizuna::comm {
namespace {

// How soon a death is seen; set-up ends within about this after it.
constexpr std::chrono::milliseconds kWatchEvery{50};

// What a member writes under the new communicator's "failed" key once
// every member has set it up.
constexpr const char* kCommitted = "committed";

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

void publish_failure(Store& store, const std::string& name, const std::string& why) {
  try {
    store.compare_set(name + "/failed", {}, Bytes(why.begin(), why.end()));
  } catch (const std::exception&) {
    // the store's own failure reaches every member anyway
  }
}

std::string commit(Store& store, const std::string& name, int rank, int world,
                   std::chrono::steady_clock::time_point deadline) {
  const std::string failed_key = name + "/failed";
  store.set(name + "/ok/" + std::to_string(rank), Bytes{'1'});
  std::vector<std::string> ok;
  for (int r = 0; r < world; ++r) ok.push_back(name + "/ok/" + std::to_string(r));
  std::string verdict;
  try {
    comm::get_watching(store, ok, failed_key, deadline);
    const Bytes v = store.compare_set(failed_key, {}, Bytes(kCommitted, kCommitted + std::strlen(kCommitted)));
    verdict.assign(v.begin(), v.end());
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Mismatch) throw;
    verdict = e.what();
  }
  return verdict == kCommitted ? "" : verdict;
}

}  // namespace kizuna::comm
