// Dissemination barrier: in round k = 0 .. ceil(log2 N) - 1 every rank sends
// an empty message to rank + 2^k and waits for one from rank - 2^k. After
// the last round every rank has heard, directly or through others, from
// every rank, so nobody leaves before everybody has arrived.
//
//   N = 5   round 0: r -> r+1    round 1: r -> r+2    round 2: r -> r+4
#include "algo/builder.hpp"

namespace kizuna::algo {

void dissemination_barrier(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  StepWriter w(out.steps);
  for (int distance = 1; distance < n; distance <<= 1) {
    w.send(mod(req.rank + distance, n), Buffer::Input, 0, 0);
    w.recv(mod(req.rank - distance, n), Buffer::Output, 0, 0);
  }
}

}  // namespace kizuna::algo
