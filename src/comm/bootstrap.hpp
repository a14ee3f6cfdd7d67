// comm/bootstrap.hpp: from a store to connected links.
//
//   1. rank 0 draws a random communicator id and publishes it;
//   2. every rank listens on port 0 of its chosen address and publishes
//      {hostname, boot id, pid, address, port, incarnation};
//   3. every rank reads everyone's entry, then the connections are opened
//      (lower rank connects to higher, transport/tcp/tcp_connect.hpp).
// All keys are under "<name>/". Bounded by `deadline`: a rank that never
// shows up is a Timeout naming it.
#pragma once

#include <kizuna/store.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/link.hpp"

namespace kizuna::comm {

struct PeerInfo {
  std::string hostname;
  std::string boot_id;
  int pid = 0;
  std::string address;
  int port = 0;
  std::uint64_t incarnation = 0;
};

struct Topology {
  std::uint64_t comm_id = 0;
  std::vector<PeerInfo> peers;  // by rank
};

struct Connected {
  Topology topology;
  std::vector<std::unique_ptr<transport::Link>> links;  // by rank; null for self
};

Connected bootstrap(Store& store, const std::string& name, int rank, int world_size,
                    const std::string& local_address, std::chrono::steady_clock::time_point deadline);

std::string encode_peer(const PeerInfo& peer);
PeerInfo decode_peer(const std::string& text, int rank);

}  // namespace kizuna::comm
