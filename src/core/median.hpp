// core/median.hpp: the median of a sample, what the tuner and kizuna-perf
// report of repeated rounds (docs/tuning.md#how-to-read-the-measurements):
// on a shared machine one slow round moves a mean, not a median.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kizuna::core {

// The middle value, or the mean of the two middle ones; `v` non-empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace kizuna::core
