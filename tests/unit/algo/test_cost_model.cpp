#include <catch2/catch.hpp>

#include "algo/cost_model.hpp"

using namespace kizuna::algo;

TEST_CASE("across hosts the model picks doubling for small all-reduces, tree for mid-sized on many ranks, ring for large", "[cost]") {
  const LinkModel tcp;  // 25 us, 2 GB/s
  CHECK(choose_algorithm(Collective::AllReduce, 4, 8, tcp) == Algorithm::Doubling);
  CHECK(choose_algorithm(Collective::AllReduce, 256 << 10, 8, tcp) == Algorithm::Tree);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 8, tcp) == Algorithm::Ring);
  // not a power of two: two rounds more, still ahead of the tree's 2(S+1)
  CHECK(choose_algorithm(Collective::AllReduce, 4, 6, tcp) == Algorithm::Doubling);
  // two ranks: one exchange for small buffers, the ring for large; never the tree
  CHECK(choose_algorithm(Collective::AllReduce, 4, 2, tcp) == Algorithm::Doubling);
  CHECK(choose_algorithm(Collective::AllReduce, 1 << 10, 2, tcp) == Algorithm::Doubling);
  for (std::uint64_t bytes : {1ull << 20, 1ull << 26})
    CHECK(choose_algorithm(Collective::AllReduce, bytes, 2, tcp) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::Broadcast, 4, 16, tcp) == Algorithm::Tree);
  CHECK(choose_algorithm(Collective::Broadcast, 64 << 20, 16, tcp) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::Reduce, 4, 16, tcp) == Algorithm::Tree);
  CHECK(choose_algorithm(Collective::AllGather, 4, 16, tcp) == Algorithm::Ring);
  CHECK(predicted_us(Collective::AllReduce, Algorithm::Ring, 1 << 20, 1, tcp) == 0.0);
}

TEST_CASE("a measured crossover overrides the model for large all-reduces only", "[cost]") {
  LinkModel loopback;  // 25 us, 2 GB/s: the model alone prefers the ring for large messages
  loopback.large_all_reduce_from = 1 << 20;
  loopback.large_all_reduce = Algorithm::Tree;
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 4, LinkModel{}) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 4, loopback) == Algorithm::Tree);
  CHECK(choose_algorithm(Collective::AllReduce, 1 << 20, 4, loopback) == Algorithm::Tree);
  CHECK(choose_algorithm(Collective::AllReduce, (1 << 20) - 4, 4, loopback) ==
        choose_algorithm(Collective::AllReduce, (1 << 20) - 4, 4, LinkModel{}));
  CHECK(choose_algorithm(Collective::Broadcast, 64 << 20, 4, loopback) == Algorithm::Ring);
  // within one host, where two-shot would be chosen, a ring crossover
  LinkModel reno;
  reno.message_us = 10.0;
  reno.large_all_reduce_from = 512 << 10;
  CHECK(choose_algorithm(Collective::AllReduce, 256 << 10, 4, reno, true) == Algorithm::TwoShot);
  CHECK(choose_algorithm(Collective::AllReduce, 512 << 10, 4, reno, true) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 4, reno, true) == Algorithm::Ring);
}

TEST_CASE("within one host the model picks one-shot or doubling for small all-reduces and two-shot above", "[cost]") {
  // Shared memory: a further message in a round costs next to nothing.
  const LinkModel shm{2.0, 1.0 / 8000.0};              // every rank has a core
  const LinkModel oversubscribed{15.0, 1.0 / 8000.0};  // a round costs a peer's wake-up
  LinkModel loopback;  // TCP: 25 us, 2 GB/s, and each further message costs 10 us
  loopback.message_us = 10.0;
  const bool direct = true;
  CHECK(choose_algorithm(Collective::AllReduce, 64, 4, shm, direct) == Algorithm::OneShot);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 10, 4, shm, direct) == Algorithm::TwoShot);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 4, shm, direct) == Algorithm::TwoShot);
  CHECK(choose_algorithm(Collective::AllReduce, 64, 4, oversubscribed, direct) == Algorithm::OneShot);
  CHECK(choose_algorithm(Collective::AllReduce, 16 << 10, 4, oversubscribed, direct) == Algorithm::OneShot);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 10, 4, oversubscribed, direct) == Algorithm::TwoShot);
  CHECK(choose_algorithm(Collective::AllReduce, 64, 4, loopback, direct) == Algorithm::Doubling);
  CHECK(choose_algorithm(Collective::AllReduce, 16 << 10, 4, loopback, direct) == Algorithm::Doubling);
  CHECK(choose_algorithm(Collective::AllReduce, 256 << 10, 4, loopback, direct) == Algorithm::TwoShot);
  // three ranks: doubling's two extra rounds leave one-shot ahead
  CHECK(choose_algorithm(Collective::AllReduce, 64, 3, loopback, direct) == Algorithm::OneShot);
  // two-shot never costs more than the ring...
  for (const LinkModel& link : {shm, oversubscribed, loopback})
    for (int world : {3, 4, 8, 33})
      for (std::uint64_t bytes : {4ull, 1ull << 16, 1ull << 26})
        CHECK(predicted_us(Collective::AllReduce, Algorithm::TwoShot, bytes, world, link) <=
              predicted_us(Collective::AllReduce, Algorithm::Ring, bytes, world, link));
  // ...and with 2 ranks it is the ring's schedule, so the tie goes to the
  // ring, as doubling's (one exchange) is one-shot's, and that tie to one-shot
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 2, shm, direct) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::AllReduce, 64, 2, oversubscribed, direct) == Algorithm::OneShot);
  // across hosts neither one- nor two-shot is considered, nor for other collectives
  CHECK(choose_algorithm(Collective::AllReduce, 64, 4, shm) == Algorithm::Doubling);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 4, shm) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::Broadcast, 64 << 20, 4, shm, direct) == Algorithm::Ring);
}
