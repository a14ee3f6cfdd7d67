// perf/timing.hpp: the timed loop and the -a rule, shared by kizuna-perf's
// driver and the comparison harnesses so that every tool measures alike.
//
// time_calls(): `warmup` untimed calls, a barrier, then `iters` calls
// back to back, each complete before the next starts; returns the mean
// wall-clock seconds per call on this rank. The caller then combines the
// ranks' figures with the reduction time_reduction() names and finishes
// with finish_time() (-a 1 divides the sum by the world size).
// time_queued() below times device calls in stream order instead.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

namespace kizuna::perf {

template <typename Call, typename Barrier>
double time_calls(int warmup, int iters, Call&& call, Barrier&& barrier) {
  for (int i = 0; i < warmup; ++i) call();
  barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) call();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iters;
}

// time_queued(): as time_calls(), but the timed calls are issued back to
// back without waiting and the last one is waited for at the end, as
// nccl-tests times a stream: for device calls, which run in stream order,
// so a call's time is the device's and not a host round trip's. `issue`
// returns what has a wait() (a Work).
template <typename Issue, typename Barrier>
double time_queued(int warmup, int iters, Issue&& issue, Barrier&& barrier) {
  for (int i = 0; i < warmup; ++i) issue().wait();
  barrier();
  const auto start = std::chrono::steady_clock::now();
  using Pending = decltype(issue());
  std::vector<Pending> pending;
  pending.reserve(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) pending.push_back(issue());
  for (auto& p : pending) p.wait();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iters;
}

// How -a combines the ranks' times: 0 rank 0's own (no reduction), 1 the
// mean (a sum, then finish_time divides), 2 the minimum, 3 the maximum.
enum class TimeReduction { None, Sum, Min, Max };

inline TimeReduction time_reduction(int average) {
  switch (average) {
    case 0: return TimeReduction::None;
    case 2: return TimeReduction::Min;
    case 3: return TimeReduction::Max;
    default: return TimeReduction::Sum;
  }
}

inline double finish_time(int average, double reduced, int world) {
  return average == 1 ? reduced / world : reduced;
}

}  // namespace kizuna::perf
