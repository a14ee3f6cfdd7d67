// comm/placement_probe.hpp: how far apart the caches of two CPUs that run
// ranks of one node are, told by bouncing a cache line between two ranks.
//
// The symmetric and staged all-reduces (comm/symmetric.hpp) write what
// peers read either through the caches or past them into memory, and
// which is faster depends on where the CPUs are: a virtual machine's host
// places its virtual CPUs sharing a last-level cache one minute ("near")
// and not the next ("far"), docs/symmetric-memory.md#where-the-staging-goes.
//
// A probe pairs ranks that run on different CPUs (pair_across_cpus), and
// each pair bounces a ball, a counter in one cache line per rank, a few
// times (bounce). The fastest round trip says where the two CPUs are
// (placement_of). Only a round trip during which both ranks ran on their
// own CPUs says anything: with more ranks than cores a rank also waits for
// its CPU, so a bounce spins in slices and lets others run between them,
// and the fastest round trip is kept.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kizuna::comm {

// Partners for a probe, by the CPU each rank runs on (`cpus`, by rank):
// in rank order, each rank without a partner takes the next rank without
// one that runs on another CPU. -1 for a rank left without.
std::vector<int> pair_across_cpus(const std::vector<int>& cpus);

// Round trips a pair bounces in one probe.
inline constexpr int kBounces = 16;

struct Bounced {
  int round_trips = 0;  // completed, of kBounces
  std::chrono::nanoseconds fastest = std::chrono::nanoseconds::max();
};

// One side of a probe: this rank throws the ball by writing `mine`, and
// catches it by seeing the partner's `theirs` change. `lead` is true on
// exactly one side of the pair; `probe` is a number both sides use for
// this probe only, and no earlier or later one. Gives up at `until` (the
// partner may be gone, or never run while this rank does), and tells the
// partner, which then stops waiting too; whatever round trips finished by
// then count.
Bounced bounce(std::atomic<std::uint64_t>& mine, const std::atomic<std::uint64_t>& theirs, bool lead,
               std::uint64_t probe, std::chrono::steady_clock::time_point until);

enum class Placement { Near, Far, Unknown };
// "near", "far" or "unknown".
std::string_view name(Placement placement);

// The fastest round trip, timed as bounce() times it (the clock read with
// it), took 220-350 ns on this project's machine with the two CPUs near
// and 570-1060 ns with them far (2 and 4 ranks on 2 cores): over 450 ns is
// far. One over 2 us had a rank wait for its CPU and says nothing, nor
// does a probe without any round trip.
Placement placement_of(const Bounced& b);

}  // namespace kizuna::comm
