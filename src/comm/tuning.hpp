// comm/tuning.hpp: every number that steers a communicator's routes and
// paces, in one place.
//
// A communicator builds its Tuning once, at creation, from these inputs:
//   Settings  what the user asked for: CommOptions over the KIZUNA_*
//             variables (core/env.hpp), resolved and validated before any
//             rank waits on another (settings_from);
//   Facts     what every rank of the communicator knows alike once it is
//             connected: the world, its nodes, ranks per node against
//             cores, the transport, the congestion control of its sockets;
//   Profile   optionally, what kizuna-perf --calibrate measured on this
//             machine (comm/profile.hpp): rank 0 loads KIZUNA_TUNING_FILE
//             and hands the sections that fit this communicator to every
//             rank at creation, so all decide from the same figures.
// make_tuning() is a pure function of them, so every rank derives the same
// table, and tests pin it as a table. Nothing here looks at a clock, a
// socket or the environment.
//
// The reasons behind each default live once, in docs/tuning.md (the anchor
// is named beside each field); KIZUNA_LOG=info prints the table at
// creation (describe()), and kizuna-perf prints it in its header.
#pragma once

#include <kizuna/comm_options.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <vector>

#include "algo/cost_model.hpp"
#include "comm/profile.hpp"
#include "core/env.hpp"

namespace kizuna::comm {

// CommOptions over KIZUNA_*: an option that is set wins over its variable.
struct Settings {
  Algorithm algorithm = Algorithm::Auto;
  Transport transport = Transport::Auto;
  std::uint64_t slice_bytes = 512 << 10;
  bool check = false;
  std::chrono::milliseconds timeout{300'000};
  // Unset: the default that make_tuning derives.
  std::optional<std::size_t> symmetric_from, staged_from, mailbox_upto, staging_bytes;
  core::StagedStores stores = core::StagedStores::Auto;
  std::optional<int> spin_us, yield_us;
  std::string tuning_file;  // "": none (only rank 0's is read)
  std::optional<algo::LinkModel> device_link;  // KIZUNA_CUDA_LINK
};

// Throws InvalidArgument naming the option or variable that is wrong.
Settings settings_from(const CommOptions& options, const core::Env& env);

struct Facts {
  int world = 1;
  int nodes = 1;
  int local_ranks = 1;           // ranks on this rank's node
  int cores = 1;                 // this node's hardware threads
  std::string tcp_congestion;    // of this rank's sockets ("" when none)
  bool asymmetric_fence = false; // core/asymmetric_fence.hpp is available
  std::size_t mailbox_capacity = 0;  // comm/mailbox.hpp
};

struct Tuning {
  // What kind of machine this is, as the rules below see it.
  bool shared_memory = true;   // ranks of a node may share memory (not forced to TCP)
  bool single_host = false;    // one node: one- and two-shot may be chosen
  bool hierarchical = false;   // several nodes over shared memory: node-local first
  bool oversubscribed = false; // more ranks on the node than cores
  bool node_memory = false;    // one node of several ranks sharing memory: symmetric
                               // memory, the mailboxes and the staging memory exist

  // Algorithm: forced (KIZUNA_ALGO, CommOptions.algorithm) or Auto, which
  // lets the cost model choose under `link` (#link-model,
  // #large-all-reduce-over-tcp).
  Algorithm algorithm = Algorithm::Auto;
  algo::LinkModel link;
  // GPU to GPU, the FIFO kernel's rounds (#device-link-model): a message
  // a round of a block, every further one another round of the same block
  // (a block sends one at a time), bytes at one block's rate.
  algo::LinkModel device_link{3.4, 1.0 / 3000.0, 3.8};
  std::uint64_t slice_bytes = 512 << 10;
  bool check = false;
  std::chrono::milliseconds timeout{300'000};

  // A measured profile's decisions for all-reduce (#tuner): from each
  // band's size on, its candidate (a route; on the Schedule route, an
  // algorithm), by private and by symmetric buffers. Empty: the rules
  // below decide. `link` is then fitted to the profile too.
  std::string profile;  // where the profile came from; "" when none applies
  std::vector<Band> private_bands, symmetric_bands;
  // Where the CPUs were while each table was measured (for describe()).
  MeasuredPlacement private_placement = MeasuredPlacement::Unknown;
  MeasuredPlacement symmetric_placement = MeasuredPlacement::Unknown;
  // Where the profile has a section measured with the CPUs near beside
  // one measured far, the near one's tables: they decide the calls that
  // the ranks agree run near (SymmetricMemory::agreed_placement), the far
  // ones above every other (far, or not yet probed). Empty: the tables
  // above decide whatever the placement.
  std::vector<Band> near_private_bands, near_symmetric_bands;

  // Route thresholds, in bytes of one rank's input (#mailbox-limit,
  // #symmetric-from, #staged-from, #staged-while-near).
  std::size_t mailbox_upto = 0;       // 0: no mailbox route
  std::size_t symmetric_from = 0;
  std::size_t staged_from = 0;
  std::size_t staged_near_from = 0;   // 0: the staged route is taken however near the CPUs are
  std::size_t staged_near_upto = 0;   // 0: however large the call, near too
  std::size_t staging_bytes = 0;      // #staging-bytes

  // Stores that peers read (#streaming-stores, #probe-cadence).
  core::StagedStores stores = core::StagedStores::Auto;
  bool stream_until_probed = false;   // under Auto, before a probe tells
  bool slots_stream = false;          // the slots stream from the start
  bool slots_follow_probe = false;    // and then as the probe says
  std::uint64_t probe_every_calls = 64;
  std::uint64_t probe_every_bytes = 32 << 20;
  std::uint64_t stream_output_from = 8 << 20;
  std::uint64_t stream_out_of_place_from = 2 << 20;

  // Waiting (#spin-and-yield).
  std::chrono::microseconds spin{200};
  std::chrono::microseconds yield{50};
  bool light_rings = false;

  // Calls run by their caller, and the worker's pace (#direct-calls).
  std::size_t direct_bytes = 64 << 10;
  std::chrono::microseconds inline_grace{50};
  int exec_tries = 32;
  std::chrono::microseconds worker_nap{1000};
  std::chrono::milliseconds awake{50};
  std::chrono::milliseconds peer_watch{100};
  std::chrono::milliseconds abort_grace{300};

  // Device calls (#device-parts).
  std::size_t direct_part_bytes = 1 << 20;
  std::size_t staged_part_bytes = 4 << 20;
  int staged_parts = 64;

  // One block of "name value" lines, for KIZUNA_LOG=info and kizuna-perf.
  std::string describe() const;
};

// `profile`: the sections rank 0 loaded for its facts (null: none); the
// ones of this world, nodes and transport decide, whatever this rank's own
// ranks per node.
Tuning make_tuning(const Settings& settings, const Facts& facts, const Profile* profile = nullptr);

}  // namespace kizuna::comm
