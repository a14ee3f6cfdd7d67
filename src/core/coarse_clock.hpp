// core/coarse_clock.hpp: the steady clock read cheaply, to a few
// milliseconds.
//
// std::chrono::steady_clock::now() costs about 25 ns on these virtual
// machines, and a small collective read it half a dozen times for records
// and deadlines that only need milliseconds. coarse_now() reads
// CLOCK_MONOTONIC_COARSE (the same clock as steady_clock on Linux, a tick
// behind at most; about 4 ns), so its time points mix with steady_clock's.
// Use it for deadlines and records, never for spinning or measuring.
#pragma once

#include <time.h>

#include <chrono>

namespace kizuna::core {

inline std::chrono::steady_clock::time_point coarse_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

}  // namespace kizuna::core
