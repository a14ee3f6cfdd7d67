// tests/support/algorithms.hpp: every all-reduce algorithm a communicator
// can be forced to, with the name KIZUNA_ALGO and kizuna-perf --algo take
// for it, for tests that run each on a communicator of its own.
#pragma once

#include <kizuna/comm_options.hpp>

#include <utility>

namespace kizuna::test {

inline constexpr std::pair<Algorithm, const char*> kForcedAlgorithms[] = {
    {Algorithm::Ring, "ring"},
    {Algorithm::Tree, "tree"},
    {Algorithm::OneShot, "oneshot"},
    {Algorithm::TwoShot, "twoshot"},
    {Algorithm::Doubling, "doubling"},
};

}  // namespace kizuna::test
