// algo/simulator.hpp: runs the schedules of every rank on in-memory buffers.
//
// The simulator is how every algorithm is proved before any network is
// involved. It executes all ranks' steps in one thread: each directed pair
// of ranks has a FIFO of messages; a rank advances through its steps until
// it needs a message that has not been sent yet, then the next rank runs.
// Sends never block (as in the executors). It reports:
//   - a deadlock: no rank can advance but some are unfinished; the error
//     names each blocked rank, its step and the peer it waits for;
//   - a mismatch: a message whose element count differs from the receiving
//     step's;
//   - leftovers: messages sent but never received.
// All three are kizuna::Error(Internal): a schedule generator bug.
//
// Reductions use core::reduce, so the simulator computes exactly what an
// executor computes; Avg is reduced as Sum (the caller divides at the end,
// as the communicator does).
#pragma once

#include <kizuna/types.hpp>

#include <vector>

#include "algo/schedule.hpp"

namespace kizuna::algo {

struct SimRank {
  unsigned char* input = nullptr;   // input_count elements (may alias output: in place)
  unsigned char* output = nullptr;  // output_count elements
};

// Runs schedules[r] on buffers[r] for every rank r. Returns the number of
// messages delivered.
std::size_t simulate(const std::vector<RankSchedule>& schedules, DataType dtype, ReduceOp op,
                     const std::vector<SimRank>& buffers);

}  // namespace kizuna::algo
