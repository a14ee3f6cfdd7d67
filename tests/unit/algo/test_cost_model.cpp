#include <catch2/catch.hpp>

#include "algo/cost_model.hpp"

using namespace kizuna::algo;

TEST_CASE("the cost model picks tree for small messages on many ranks, ring for large", "[cost]") {
  const LinkModel tcp;  // 25 us, 2 GB/s
  CHECK(choose_algorithm(Collective::AllReduce, 4, 8, tcp) == Algorithm::Tree);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 8, tcp) == Algorithm::Ring);
  // two ranks: a tree is never better than the ring
  for (std::uint64_t bytes : {4ull, 1ull << 10, 1ull << 20, 1ull << 26})
    CHECK(choose_algorithm(Collective::AllReduce, bytes, 2, tcp) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::Broadcast, 4, 16, tcp) == Algorithm::Tree);
  CHECK(choose_algorithm(Collective::Broadcast, 64 << 20, 16, tcp) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::AllGather, 4, 16, tcp) == Algorithm::Ring);
  CHECK(predicted_us(Collective::AllReduce, Algorithm::Ring, 1 << 20, 1, tcp) == 0.0);
}

TEST_CASE("a measured tree crossover overrides the model for large all-reduces only", "[cost]") {
  LinkModel loopback;  // 25 us, 2 GB/s: the model alone prefers the ring for large messages
  loopback.tree_all_reduce_from = 1 << 20;
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 4, LinkModel{}) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 4, loopback) == Algorithm::Tree);
  CHECK(choose_algorithm(Collective::AllReduce, 1 << 20, 4, loopback) == Algorithm::Tree);
  CHECK(choose_algorithm(Collective::AllReduce, (1 << 20) - 4, 4, loopback) ==
        choose_algorithm(Collective::AllReduce, (1 << 20) - 4, 4, LinkModel{}));
  CHECK(choose_algorithm(Collective::Broadcast, 64 << 20, 4, loopback) == Algorithm::Ring);
}

TEST_CASE("within one host the model picks one-shot for tiny all-reduces and two-shot above", "[cost]") {
  const LinkModel shm{2.0, 1.0 / 8000.0};            // every rank has a core
  const LinkModel oversubscribed{15.0, 1.0 / 8000.0};  // a round costs a peer's wake-up
  const bool direct = true;
  CHECK(choose_algorithm(Collective::AllReduce, 64, 4, shm, direct) == Algorithm::OneShot);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 10, 4, shm, direct) == Algorithm::TwoShot);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 4, shm, direct) == Algorithm::TwoShot);
  CHECK(choose_algorithm(Collective::AllReduce, 16 << 10, 4, oversubscribed, direct) == Algorithm::OneShot);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 10, 4, oversubscribed, direct) == Algorithm::TwoShot);
  // two-shot never costs more than the ring...
  for (int world : {3, 4, 8, 33})
    for (std::uint64_t bytes : {4ull, 1ull << 16, 1ull << 26})
      CHECK(predicted_us(Collective::AllReduce, Algorithm::TwoShot, bytes, world, shm) <=
            predicted_us(Collective::AllReduce, Algorithm::Ring, bytes, world, shm));
  // ...and with 2 ranks it is the ring's schedule, so the tie goes to the ring
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 2, shm, direct) == Algorithm::Ring);
  // across hosts neither is considered, nor for other collectives
  CHECK(choose_algorithm(Collective::AllReduce, 64, 4, shm) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::AllReduce, 64 << 20, 4, shm) == Algorithm::Ring);
  CHECK(choose_algorithm(Collective::Broadcast, 64 << 20, 4, shm, direct) == Algorithm::Ring);
}
