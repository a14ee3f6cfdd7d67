// comm/death_watch.hpp: while a communicator is being set up by shrink()
// or grow(), watch the processes that must take part, and end the set-up
// on every rank at once when one of them dies.
//
// A background thread looks every 50 ms at each watched process this one
// can judge (comm::process_gone: the same node and PID namespace) and
// publishes the first death under the new communicator's "failed" key,
// which every rank's set-up watches (comm/bootstrap.hpp), so none waits
// for the dead one until its deadline.
#pragma once

#include <kizuna/store.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/bootstrap.hpp"

namespace kizuna::comm {

class DeathWatch {
 public:
  struct Watched {
    PeerInfo process;
    std::string label;  // as the failure names it: "rank 2 of NAME (rank 3 before the shrink)"
  };

  // `what`: when it died, for the message ("while the shrunk communicator
  // was set up").
  DeathWatch(Store& store, std::string failed_key, std::vector<Watched> watched, std::string what);
  ~DeathWatch();
  DeathWatch(const DeathWatch&) = delete;
  DeathWatch& operator=(const DeathWatch&) = delete;

  // The index in `watched` of the process it saw die, or -1.
  int dead() const { return dead_.load(); }

 private:
  void run();

  Store& store_;
  const std::string failed_key_;
  const std::vector<Watched> watched_;
  const std::string what_;
  const PeerInfo self_;
  std::atomic<int> dead_{-1};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kizuna::comm
