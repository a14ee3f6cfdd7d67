// algo/cost_model.hpp: choosing ring or tree per call with an alpha-beta
// model.
//
// A message of b bytes over a link costs alpha + b * beta. With N ranks and
// an n-byte buffer (S = ceil(log2 N), the tree depth):
//
//   all-reduce ring   2(N-1) alpha + 2(N-1)/N n beta    bandwidth-optimal
//   all-reduce tree   2(S+1) alpha + 2 n beta           fewer hops: small n, large N
//   all-reduce 1-shot alpha + (N-1) n beta (+ N-1 local folds) one round: tiny n
//   all-reduce 2-shot 2 alpha + 2(N-1)/N n beta         two rounds of direct messages
//   bcast/reduce chain   (N-1) alpha + n beta           pipelined: large n
//   bcast/reduce binomial S alpha + S n beta            fewer hops: small n
//
// The one- and two-shot forms send to every peer at once, so their terms
// assume that a rank's messages to different peers travel side by side, as
// they do between the ranks of one host; across hosts they would share one
// NIC, and the model is told not to consider them (`direct` below). Where
// they are considered, two-shot costs no more than the ring for any n, and
// the ring is left for 2 ranks (where both are the same schedule) and for
// several hosts.
//
// The transports supply alpha and beta (measured defaults per transport);
// KIZUNA_ALGO=ring|tree|oneshot|twoshot bypasses the model.
#pragma once

#include <cstdint>

#include "algo/schedule.hpp"

namespace kizuna::algo {

struct LinkModel {
  double alpha_us = 25.0;              // per-message latency, microseconds
  double beta_us_per_byte = 0.0005;    // inverse bandwidth (0.0005 us/B = 2 GB/s)
  // A measured crossover the alpha-beta terms cannot express: all-reduces of
  // at least this many bytes take the tree (loopback TCP with more ranks
  // than cores, where the ring's every step needs all ranks scheduled).
  std::uint64_t tree_all_reduce_from = UINT64_MAX;
};

double predicted_us(Collective c, Algorithm a, std::uint64_t bytes, int world,
                    const LinkModel& link);

// The fastest algorithm for this call under `link`; Ring for collectives
// that have no other form, and on ties. One-shot and two-shot only when
// `direct` (every rank on one host).
Algorithm choose_algorithm(Collective c, std::uint64_t bytes, int world, const LinkModel& link,
                           bool direct = false);

}  // namespace kizuna::algo
