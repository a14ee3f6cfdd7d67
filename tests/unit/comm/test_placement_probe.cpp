// The placement probe's parts (comm/placement_probe.hpp): how ranks pair
// by CPU, a bounce between two threads, and what a bounce's figures mean.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "comm/placement_probe.hpp"

using namespace kizuna::comm;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST_CASE("ranks pair in order with the next free rank on another CPU", "[comm][placement]") {
  CHECK(pair_across_cpus({0, 1}) == std::vector<int>{1, 0});
  CHECK(pair_across_cpus({0, 0}) == std::vector<int>{-1, -1});
  CHECK(pair_across_cpus({3}) == std::vector<int>{-1});
  CHECK(pair_across_cpus({}).empty());
  // Two on each CPU: both pairs straddle the CPUs.
  CHECK(pair_across_cpus({0, 0, 1, 1}) == std::vector<int>{2, 3, 0, 1});
  CHECK(pair_across_cpus({0, 1, 0, 1}) == std::vector<int>{1, 0, 3, 2});
  // An odd one out, and one whose only other-CPU ranks are taken.
  CHECK(pair_across_cpus({0, 1, 0}) == std::vector<int>{1, 0, -1});
  CHECK(pair_across_cpus({0, 1, 1, 1}) == std::vector<int>{1, 0, -1, -1});
  CHECK(pair_across_cpus({5, 7, 9}) == std::vector<int>{1, 0, -1});
}

TEST_CASE("a bounce between two threads finishes its round trips on both sides", "[comm][placement]") {
  for (std::uint64_t probe = 1; probe <= 3; ++probe) {
    alignas(64) std::atomic<std::uint64_t> a{0};
    alignas(64) std::atomic<std::uint64_t> b{0};
    const auto until = Clock::now() + 10s;
    Bounced other;
    std::thread t([&] { other = bounce(b, a, false, probe, until); });
    const Bounced lead = bounce(a, b, true, probe, until);
    t.join();
    CHECK(lead.round_trips == kBounces);
    CHECK(other.round_trips == kBounces - 1);
    CHECK(lead.fastest > 0ns);
    CHECK(lead.fastest < 10s);
    CHECK(other.fastest > 0ns);
  }
}

TEST_CASE("balls left from an earlier probe do not count in a later one", "[comm][placement]") {
  // A lead of probe 1 throws its first ball and gives up at once, leaving
  // it, and its quit, in its line. Its partner in probe 2 must take
  // neither for probe 2's first ball, and gives up at its deadline.
  alignas(64) std::atomic<std::uint64_t> a{0};
  alignas(64) std::atomic<std::uint64_t> b{0};
  CHECK(bounce(a, b, true, 1, Clock::now()).round_trips == 0);
  CHECK(a.load() != 0);
  const auto start = Clock::now();
  const Bounced late = bounce(b, a, false, 2, start + 20ms);
  CHECK(late.round_trips == 0);
  CHECK(Clock::now() - start >= 20ms);
  CHECK(placement_of(late) == Placement::Unknown);
}

TEST_CASE("a side that gives up tells its partner, which stops waiting at once", "[comm][placement]") {
  // The other side of probe 1 gives up at once; the lead, with a long
  // deadline, sees its quit and leaves well before that deadline.
  alignas(64) std::atomic<std::uint64_t> a{0};
  alignas(64) std::atomic<std::uint64_t> b{0};
  CHECK(bounce(b, a, false, 1, Clock::now()).round_trips == 0);
  const auto start = Clock::now();
  CHECK(bounce(a, b, true, 1, start + 60s).round_trips == 0);
  CHECK(Clock::now() - start < 30s);
}

TEST_CASE("a partner that never answers leaves the bounce at its deadline, with no verdict", "[comm][placement]") {
  for (const bool lead : {true, false}) {
    alignas(64) std::atomic<std::uint64_t> mine{0};
    alignas(64) std::atomic<std::uint64_t> theirs{0};
    const auto start = Clock::now();
    const Bounced b = bounce(mine, theirs, lead, 1, start + 30ms);
    const auto took = Clock::now() - start;
    CHECK(b.round_trips == 0);
    CHECK(took >= 30ms);
    CHECK(took < 2s);
    CHECK(placement_of(b) == Placement::Unknown);
  }
}

TEST_CASE("the fastest round trip says near, far or nothing", "[comm][placement]") {
  CHECK(placement_of({16, 250ns}) == Placement::Near);
  CHECK(placement_of({16, 450ns}) == Placement::Near);
  CHECK(placement_of({16, 451ns}) == Placement::Far);
  CHECK(placement_of({3, 900ns}) == Placement::Far);
  CHECK(placement_of({16, 2000ns}) == Placement::Far);
  CHECK(placement_of({16, 2001ns}) == Placement::Unknown);  // a rank waited for its CPU
  CHECK(placement_of({0, 300ns}) == Placement::Unknown);
  CHECK(placement_of({}) == Placement::Unknown);
}
