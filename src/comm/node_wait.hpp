// comm/node_wait.hpp: what a rank needs to wait in shared memory for the
// other ranks of its node, as symmetric memory's meetings (symmetric.hpp)
// and the mailboxes (mailbox.hpp) do: who it is, whose connections to
// watch for a death or an abort notice, how long to spin and yield before
// sleeping, the communicator's abort flag, and where to show progress.
#pragma once

#include <atomic>
#include <chrono>
#include <vector>

#include "comm/history.hpp"
#include "transport/link.hpp"

namespace kizuna::comm {

struct NodeWait {
  int rank = 0;
  int world = 1;
  std::vector<transport::Link*> links;  // by rank: whose death and notices to watch
  std::chrono::microseconds spin{0}, yield{0};
  const std::atomic<bool>* aborted = nullptr;  // the communicator's broken flag
  LiveProgress* live = nullptr;
};

}  // namespace kizuna::comm
