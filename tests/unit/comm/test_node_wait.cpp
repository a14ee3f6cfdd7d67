// comm/node_wait.hpp: a rank that sleeps on its doorbell while a peer
// publishes is woken by that peer's ring, with either fence pairing.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "comm/node_wait.hpp"

#include "fence_pairings.hpp"

using namespace kizuna;
using namespace kizuna::comm;

namespace {

// The doorbell of one rank, as it lies in shared memory.
struct Bell {
  alignas(64) std::atomic<std::uint32_t> bell{0};
  std::atomic<std::uint32_t> sleeping{0};
  std::atomic<std::uint32_t> light_ring{0};
  Doorbell doorbell() { return {bell, sleeping, &light_ring}; }
};

NodeWait node_of(int rank, bool light) {
  NodeWait node;
  node.rank = rank;
  node.world = 2;
  node.links = {nullptr, nullptr};
  node.light = light;
  node.nap = std::chrono::milliseconds(5000);  // a lost ring would sleep this long
  return node;
}

}  // namespace

// The waiter spins a few rounds (no spin or yield time) and then sleeps;
// the peer publishes within a few microseconds of that, where the race is.
// Every wake must come from the ring: a lost one sleeps out the 5 s nap.
// Both pairings: a fence on each side, and the sleeper's heavy fence alone
// (its light_ring set, the peer's process taking part).
TEST_CASE("wait_for_peer: a sleeping rank is woken by the peer's ring, with either fence pairing", "[node_wait]") {
  for (const bool light : test::fence_pairings()) {
    CAPTURE(light);
    Bell waiter;
    waiter.light_ring.store(light ? 1 : 0);
    const NodeWait mine = node_of(0, light), theirs = node_of(1, light);
    std::atomic<std::uint64_t> published{0};
    std::mt19937 random(light ? 1 : 2);
    std::chrono::steady_clock::duration longest{};
    RunLabel label;
    label.what = "test wait";
    // One peer thread for every round, told to go by `round`, so that its
    // publication lands within microseconds of the waiter's start.
    constexpr std::uint64_t kRounds = 1000;
    std::atomic<std::uint64_t> round{0};
    std::thread peer([&] {
      for (std::uint64_t i = 1; i <= kRounds; ++i) {
        while (round.load() != i) {
        }
        const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(random() % 4000);
        while (std::chrono::steady_clock::now() < until) {
        }
        published.store(i, std::memory_order_release);
        ring_sleepers(theirs, [&](int) { return waiter.doorbell(); });
      }
    });
    for (std::uint64_t i = 1; i <= kRounds; ++i) {
      round.store(i);
      const auto start = std::chrono::steady_clock::now();
      const bool arrived = wait_for_peer(
          mine, waiter.doorbell(), 1, start + std::chrono::seconds(60), Executor::kHoldOn, label,
          [&] { return published.load(std::memory_order_acquire) == i; }, [] {});
      longest = std::max(longest, std::chrono::steady_clock::now() - start);
      REQUIRE(arrived);
    }
    peer.join();
    CHECK(longest < std::chrono::seconds(1));
    CHECK(waiter.light_ring.load() == (light ? 1u : 0u));  // the heavy fence never failed
  }
}
