// comm/route.hpp: which way a call goes, as one pure function.
//
// Beside the schedules of algo/, which the executor runs over the links
// (shared-memory slots or TCP), a communicator on one node has faster ways
// for some calls. Each is a Route:
//
//   Mailbox       an all-reduce of up to a cache line or a few, or a
//                 barrier: every rank writes its input into its mailbox and
//                 folds every peer's (comm/mailbox.hpp)
//   Schedule      a schedule from algo/ (ring, tree, one-shot, two-shot,
//                 doubling, as the cost model or KIZUNA_ALGO chooses) run by
//                 the executor over the links (comm/executor.hpp)
//   Symmetric     an all-reduce whose buffers are symmetric memory, read in
//                 place by the peers (comm/symmetric.hpp)
//   Staged        the same algorithm on private buffers, through the
//                 staging memory every rank allocated at creation
//   PointToPoint  a send or a receive (its own tag space and order)
//   DeviceDirect  device buffers, GPU to GPU: a kernel interprets the
//                 schedule over CUDA IPC (comm/device_backend.hpp)
//   DeviceStaged  device buffers copied to pinned host memory, the host
//                 call run on its parts (each part then takes a host route)
//
// choose_route() maps (the call's shape, its buffers' kind, the placement
// every rank agrees on, what this communicator has, the tuning) to a route.
// Every rank must take the same route for the same call, so its inputs are
// only what every rank knows alike: the call, the tuning (the same settings
// give the same table), the paths that creation set up on all ranks or on
// none, and the placement verdict that changes only within a call (the
// placement probe hands rank 0's verdict to every rank). The one input that
// is a rank's own is its buffers' kind: ranks that disagree on it make
// different calls, which KIZUNA_CHECK reports as a Mismatch and the
// symmetric paths' first meeting too.
//
// When: a call's route is decided as it starts to run, under the executor's
// lock, after the common pre-step (its sequence number, and with
// KIZUNA_CHECK=1 the fingerprint exchange), so that no route-specific
// meeting (a placement probe, a staging round) can come before the check.
// With a measured profile (comm/profile.hpp), its table decides an
// all-reduce's route and algorithm by size and buffers' kind, where the
// route it names exists (the table measured near, where the profile has
// one beside one measured far and the placement is Near); otherwise the
// thresholds below do.
// tests/unit/comm/test_route.cpp pins the table; docs/architecture.md draws it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "algo/schedule.hpp"
#include "comm/placement_probe.hpp"
#include "comm/tuning.hpp"

namespace kizuna::comm {

enum class Route : std::uint8_t { Mailbox, Schedule, Symmetric, Staged, PointToPoint, DeviceDirect, DeviceStaged };

std::string_view name(Route route);

enum class CallKind : std::uint8_t { Collective, Send, Recv };

// Where a call's buffers are. Symmetric: both in symmetric memory
// (Communicator::allocate_symmetric) on this rank; Staging: a part of a
// device call, in the communicator's pinned host memory; Device: a stream
// call's device buffers; Host: anything else.
enum class Buffers : std::uint8_t { Host, Symmetric, Staging, Device };

struct CallShape {
  CallKind kind = CallKind::Collective;
  algo::Collective collective = algo::Collective::AllReduce;
  std::size_t bytes = 0;  // of one rank's input (a block of it for all-gather / reduce-scatter)
};

// What creation set up, alike on every rank.
struct Paths {
  bool mailbox = false;        // the mailboxes
  bool staging = false;        // the staging memory
  bool device_direct = false;  // every rank's device joined through CUDA IPC
};

Route choose_route(const CallShape& call, Buffers buffers, Placement placement, const Paths& paths,
                   const Tuning& tuning);

// The candidate an all-reduce's route is, where the route alone says it
// (the mailboxes, the staged and the symmetric route); none for the
// Schedule route, whose candidate is its algorithm's.
std::optional<Candidate> route_candidate(Route route);

// The algorithm a measured profile gives an all-reduce of `bytes` on the
// Schedule route with the CPUs at `placement` (docs/tuning.md#tuner); none
// where it has no say (no profile, device buffers, or a candidate that is
// not a schedule).
std::optional<Algorithm> profiled_algorithm(std::size_t bytes, Buffers buffers, Placement placement,
                                            const Tuning& tuning);

// Whether a caller that waits for its call at once may run it itself,
// without the queue (comm/dispatch): only the routes that never sleep
// before their peers come (a placement probe due at a Schedule call may),
// only small calls, and never with KIZUNA_CHECK (its exchange meets every
// peer first). docs/tuning.md#direct-calls.
bool runs_in_caller(Route route, std::size_t bytes, bool probe_due, const Tuning& tuning);

}  // namespace kizuna::comm
