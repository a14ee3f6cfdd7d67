// comm/death_watch.hpp: while a communicator is being set up by shrink()
// or grow(), watch the processes that must take part, end the set-up on
// every rank at once when one of them dies, and agree on whether it held.
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

// The set-up's verdict, the same on every member of the new communicator
// `name`: each writes "ok" once it has set it up, and the verdict is the
// first write to its "failed" key: "committed", by the first member to see
// every "ok", or a failure (publish_failure: a member whose set-up failed;
// a death the watch saw). Returns "" when committed, else why not. Set-up
// alone can end differently on different members (one past its last step
// when another saw a peer die): they would go separate ways.
std::string commit(Store& store, const std::string& name, int rank, int world,
                   std::chrono::steady_clock::time_point deadline);
// Publishes `why` as that verdict, unless there is one already.
void publish_failure(Store& store, const std::string& name, const std::string& why);

}  // namespace kizuna::comm
