// comm/bootstrap.hpp: from a store to connected links.
//
//   0. every rank claims its number (a counter under "claims/R"): the second
//      claimant of a rank publishes why under "failed", which every rank
//      waiting in the steps below watches, so all fail at once naming both
//      processes; so does a rank whose world size is not rank 0's;
//   1. rank 0 draws a random communicator id and publishes it with its
//      world size;
//   2. every rank listens on port 0 of its chosen address (twice: the
//      links, and point to point's own, comm/p2p.hpp) and publishes
//      {hostname, boot id, network and PID namespaces, pid, address, port,
//      incarnation, p2p port};
//   3. every rank reads everyone's entry, then the connections are opened
//      (lower rank connects to higher, transport/tcp/tcp_connect.hpp);
//   4. ranks of the same node set up shared memory (see below).
// All keys are under "<name>/". Bounded by `deadline`: a rank that never
// shows up is a Timeout naming it.
#pragma once

#include <kizuna/comm_options.hpp>
#include <kizuna/store.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/link.hpp"
#include "transport/shm/segment.hpp"

namespace kizuna::comm {

struct PeerInfo {
  std::string hostname;
  std::string boot_id;
  std::string netns;  // network namespace: ranks in different ones are different nodes
  std::string pidns;  // PID namespace: `pid` means this process only within it
  int pid = 0;
  std::string address;
  int port = 0;
  std::uint64_t incarnation = 0;
  int p2p_port = 0;  // point-to-point's listener (comm/p2p.hpp)
};

struct Topology {
  std::uint64_t comm_id = 0;
  std::vector<PeerInfo> peers;  // by rank
  std::vector<int> node_of;     // node index of every rank, numbered in rank order
  int nodes = 1;
};

// What is left until `deadline`, at least 1 ms (a store call's timeout: 0
// would mean none).
std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline);

// store.multi_get(keys) until `deadline`, but ended at once, with Mismatch
// and its text, by a failure any rank publishes under `failed_key` (a
// second claimant of a rank, a death while shrink() or grow() sets up: the
// communicator's "<name>/failed"). Timeout names the missing keys.
std::vector<Bytes> get_watching(Store& store, const std::vector<std::string>& keys, const std::string& failed_key,
                                std::chrono::steady_clock::time_point deadline);

// This process: hostname, boot id, namespaces and pid (no addresses).
PeerInfo this_process();
// Those fields as text, and back (a record kizuna cannot read gives an
// empty PeerInfo, which process_gone() judges by nobody).
std::string encode_process(const PeerInfo& p);
PeerInfo decode_process(const std::string& text);

// Ranks are on the same node when hostname, boot id and network namespace
// all agree.
bool same_node(const PeerInfo& a, const PeerInfo& b);

// Shared memory between the ranks of this node: this rank's segment (its
// inbound channels) and the peers' it writes into. Outlives the links.
struct ShmSegments {
  transport::shm::Segment mine;
  std::map<int, transport::shm::Segment> peers;
  // Whether the links write what they send with streaming stores; the
  // communicator sets it (KIZUNA_STAGED_STORES and the placement probe).
  std::atomic<bool> stream_stores{false};
};

struct Connected {
  Topology topology;
  std::unique_ptr<ShmSegments> shm;                     // null when no pair uses shared memory
  std::vector<std::unique_ptr<transport::Link>> links;  // by rank; null for self
  int local_ranks = 1;                                  // ranks on this node, this one included
  // The congestion control of this rank's TCP connections as the kernel
  // reports it (from the first one; every connection within a host gets the
  // same); empty when it has none.
  std::string tcp_congestion;
  // This rank's point-to-point listening socket (comm/p2p.hpp), open
  // since its entry was published; the caller owns it.
  int p2p_listener = -1;
};

struct BootstrapOptions {
  std::string local_address;
  Transport transport = Transport::Auto;
  std::uint64_t shm_bytes = 1 << 20;  // per directed pair
  std::string tcp_congestion = "auto";  // KIZUNA_TCP_CONGESTION, see transport/tcp/congestion.hpp
};

// Opens TCP connections to every peer, then replaces the ones to ranks of
// the same node (same hostname and boot id) by shared-memory links, each
// keeping its TCP connection for liveness and abort notices. With Auto, a
// pair that cannot use shared memory (a full /dev/shm, different mount
// namespaces) stays on TCP with a warning; with Shm it is an error.
Connected bootstrap(Store& store, const std::string& name, int rank, int world_size,
                    const BootstrapOptions& options, std::chrono::steady_clock::time_point deadline);

std::string encode_peer(const PeerInfo& peer);
PeerInfo decode_peer(const std::string& text, int rank);

}  // namespace kizuna::comm
