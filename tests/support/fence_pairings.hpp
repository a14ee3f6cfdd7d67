// tests/support/fence_pairings.hpp: the two ways a doorbell's ringer and
// its sleeper may fence, for tests of the wake-up race to run in turn.
#pragma once

#include <catch2/catch.hpp>

#include <vector>

#include "core/asymmetric_fence.hpp"

namespace kizuna::test {

// false: a full fence on each side. true: the sleeper's heavy fence alone
// (it sets light_ring, and the ringer skips its fence), only where the
// kernel has membarrier's global expedited command; elsewhere a warning
// says that pairing is not tested.
inline std::vector<bool> fence_pairings() {
  if (core::asymmetric_fence_available()) return {false, true};
  WARN("membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) is not available here: light rings not tested");
  return {false};
}

}  // namespace kizuna::test
