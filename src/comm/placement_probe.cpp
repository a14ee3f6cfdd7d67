#include "comm/placement_probe.hpp"

#include <sched.h>

#include <algorithm>

namespace kizuna::comm {
namespace {

using Clock = std::chrono::steady_clock;

// How long a rank spins for the ball before it offers its CPU: long
// enough that two ranks which both run, on two CPUs, finish round trips
// in it (0.2-0.9 us each), short enough that a rank sharing a CPU with the
// partner, or with a rank of another pair, lets it run soon. Measured, 4
// ranks on 2 cores: giving the CPU up every 64 looks (about 0.2 us) left
// no round trip under 3.8 us; 5-50 us slices gave the CPUs' own figures.
// The two sides' slices differ, so that two pairs sharing two CPUs do not
// keep taking turns in step, each rank with the other pair's rank
// running beside it (all four waited about 44 us a round trip then).
constexpr auto kLeadSlice = std::chrono::microseconds(20);
constexpr auto kOtherSlice = std::chrono::microseconds(13);
constexpr auto kFar = std::chrono::nanoseconds(450);
constexpr auto kWaitedForCpu = std::chrono::microseconds(2);

// The ball's value at `step` of probe `probe`: distinct across probes, and
// never 0, a line's value before its first probe. kQuit: a side that gave
// up says so, and the other stops waiting for it.
std::uint64_t ball(std::uint64_t probe, int step) { return probe * 64 + static_cast<std::uint64_t>(step); }
constexpr int kQuit = 63;

}  // namespace

std::vector<int> pair_across_cpus(const std::vector<int>& cpus) {
  const int n = static_cast<int>(cpus.size());
  std::vector<int> partner(n, -1);
  for (int a = 0; a < n; ++a) {
    if (partner[a] >= 0) continue;
    for (int b = a + 1; b < n; ++b) {
      if (partner[b] < 0 && cpus[b] != cpus[a]) {
        partner[a] = b;
        partner[b] = a;
        break;
      }
    }
  }
  return partner;
}

Bounced bounce(std::atomic<std::uint64_t>& mine, const std::atomic<std::uint64_t>& theirs, bool lead,
               std::uint64_t probe, Clock::time_point until) {
  static_assert(2 * kBounces + 1 < kQuit, "a probe's balls must stay below its quit and the next probe's");
  // Spins until the partner's line holds `want`; false at `until`, or
  // when the partner has given up (and then says so itself).
  const Clock::duration slice = lead ? kLeadSlice : kOtherSlice;
  const std::uint64_t quit = ball(probe, kQuit);
  auto catch_ball = [&](std::uint64_t want) {
    Clock::time_point slice_end = Clock::now() + slice;
    for (unsigned looks = 1;; ++looks) {
      const std::uint64_t seen = theirs.load(std::memory_order_acquire);
      if (seen == want) return true;
      if (seen == quit) return false;
      if (looks % 64 != 0) continue;
      const Clock::time_point now = Clock::now();
      if (now >= until) {
        mine.store(quit, std::memory_order_release);
        return false;
      }
      if (now >= slice_end) {
        ::sched_yield();
        slice_end = Clock::now() + slice;
      }
    }
  };
  Bounced b;
  auto timed = [&](Clock::time_point thrown) {
    b.fastest = std::min(b.fastest, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - thrown));
    ++b.round_trips;
  };
  // The lead throws the odd balls and times each until the next even one
  // comes back; the other side throws the even ones, from the lead's
  // first catch on.
  if (!lead && !catch_ball(ball(probe, 1))) return b;
  for (int k = 0; k < kBounces; ++k) {
    const Clock::time_point thrown = Clock::now();
    if (lead) {
      mine.store(ball(probe, 2 * k + 1), std::memory_order_release);
      if (!catch_ball(ball(probe, 2 * k + 2))) break;
    } else {
      mine.store(ball(probe, 2 * k + 2), std::memory_order_release);
      if (k + 1 == kBounces || !catch_ball(ball(probe, 2 * k + 3))) break;
    }
    timed(thrown);
  }
  return b;
}

std::string_view name(Placement placement) {
  switch (placement) {
    case Placement::Near: return "near";
    case Placement::Far: return "far";
    case Placement::Unknown: break;
  }
  return "unknown";
}

Placement placement_of(const Bounced& b) {
  if (b.round_trips == 0 || b.fastest > kWaitedForCpu) return Placement::Unknown;
  return b.fastest > kFar ? Placement::Far : Placement::Near;
}

}  // namespace kizuna::comm
