// algo/cost_model.hpp: choosing the algorithm per call with an alpha-beta
// model.
//
// A round in which a rank sends one message and receives one costs alpha,
// each further message it sends or receives in the same round mu, and every
// byte beta. With N ranks and an n-byte buffer (S = ceil(log2 N), the tree
// depth; L = floor(log2 N), E = 2 when N is not a power of two, else 0):
//
//   all-reduce ring   2(N-1) alpha + 2(N-1)/N n beta     bandwidth-optimal
//   all-reduce tree   2(S+1) alpha + 2 n beta            fewer hops: small n, large N
//   all-reduce 1-shot alpha + 2(N-2) mu + 2(N-1) n beta  one round: tiny n
//                     (N-1 messages each way, N-1 local folds)
//   all-reduce 2-shot 2 alpha + 4(N-2) mu + 2(N-1)/N n beta
//                                                        two rounds of direct messages
//   all-reduce doubling (L+E) alpha + (2L + 3E/2) n beta log N rounds of one message: small n
//   bcast/reduce chain   (N-1) alpha + n beta            pipelined: large n
//   bcast/reduce binomial S alpha + S n beta             fewer hops: small n
//
// The one- and two-shot forms send to every peer at once, so their terms
// assume that a rank's messages to different peers travel side by side, as
// they do between the ranks of one host; across hosts they would share one
// NIC, and the model is told not to consider them (`direct` below). Where
// they are considered, two-shot costs no more than the ring for any n, and
// the ring is left for 2 ranks (where both are the same schedule), for
// several hosts and for what a measured crossover gives it (LinkModel's
// large_all_reduce_from). Doubling talks to one peer per round, like the ring, and
// is considered everywhere; with 2 ranks it is one-shot's schedule, and the
// tie goes to one-shot.
//
// The transports supply alpha, beta and mu (measured defaults per
// transport); KIZUNA_ALGO=ring|tree|oneshot|twoshot|doubling bypasses the
// model.
#pragma once

#include <cstdint>

#include "algo/schedule.hpp"

namespace kizuna::algo {

struct LinkModel {
  double alpha_us = 25.0;              // per-message latency, microseconds
  double beta_us_per_byte = 0.0005;    // inverse bandwidth (0.0005 us/B = 2 GB/s)
  double message_us = 0.0;             // mu: each further message of a rank in one round
  // A measured crossover the alpha-beta terms cannot express: all-reduces of
  // at least `large_all_reduce_from` bytes take `large_all_reduce` (loopback
  // TCP with more ranks than cores: docs/tuning.md#large-all-reduce-over-tcp).
  std::uint64_t large_all_reduce_from = UINT64_MAX;
  Algorithm large_all_reduce = Algorithm::Ring;
};

double predicted_us(Collective c, Algorithm a, std::uint64_t bytes, int world,
                    const LinkModel& link);

// The fastest algorithm for this call under `link`; Ring for collectives
// that have no other form, and on ties. One-shot and two-shot only when
// `direct` (every rank on one host).
Algorithm choose_algorithm(Collective c, std::uint64_t bytes, int world, const LinkModel& link,
                           bool direct = false);

}  // namespace kizuna::algo
