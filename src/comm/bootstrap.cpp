#include "comm/bootstrap.hpp"

#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>

#include "core/check.hpp"
#include "core/log.hpp"
#include "transport/tcp/tcp_connect.hpp"
#include "transport/tcp/tcp_link.hpp"

namespace kizuna::comm {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t random_u64() {
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf[0] ? buf : "unknown";
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  in >> id;
  return id.empty() ? "unknown" : id;
}

std::chrono::milliseconds left(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

}  // namespace

std::string encode_peer(const PeerInfo& p) {
  std::ostringstream out;
  out << "kizuna-peer-v1 " << p.hostname << " " << p.boot_id << " " << p.pid << " " << p.address
      << " " << p.port << " " << p.incarnation;
  return out.str();
}

PeerInfo decode_peer(const std::string& text, int rank) {
  std::istringstream in(text);
  std::string version;
  PeerInfo p;
  in >> version >> p.hostname >> p.boot_id >> p.pid >> p.address >> p.port >> p.incarnation;
  if (!in || version != "kizuna-peer-v1" || p.port <= 0 || p.port > 65535)
    KIZUNA_THROW(ErrorCode::Mismatch, "rank ", rank, " published an address kizuna cannot read: '",
                 text.substr(0, 200), "'");
  return p;
}

Connected bootstrap(Store& store, const std::string& name, int rank, int world_size,
                    const std::string& local_address, Clock::time_point deadline) {
  Connected out;
  const std::string id_key = name + "/comm_id";
  if (rank == 0) {
    out.topology.comm_id = random_u64();
    store.set(id_key, std::to_string(out.topology.comm_id));
  } else {
    const std::string id = text(store.get(id_key, left(deadline)));
    out.topology.comm_id = std::stoull(id);
  }

  transport::TcpListener listener(local_address);
  PeerInfo self{hostname(), boot_id(), static_cast<int>(::getpid()), listener.host(), listener.port(),
                random_u64()};
  store.set(name + "/peer/" + std::to_string(rank), encode_peer(self));

  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(name + "/peer/" + std::to_string(r));
  const std::vector<Bytes> entries = store.multi_get(keys, left(deadline));
  for (int r = 0; r < world_size; ++r) out.topology.peers.push_back(decode_peer(text(entries[r]), r));

  std::vector<transport::TcpPeer> connect_to, accept_from;
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    const PeerInfo& p = out.topology.peers[r];
    (r > rank ? connect_to : accept_from).push_back({r, p.address, p.port, p.incarnation});
  }
  transport::Hello hello{out.topology.comm_id, rank, world_size, self.incarnation};
  const std::vector<int> fds = transport::connect_peers(listener, hello, connect_to, accept_from, deadline);
  out.links.resize(world_size);
  for (int r = 0; r < world_size; ++r)
    if (fds[r] >= 0) out.links[r] = transport::make_tcp_link(r, fds[r]);
  KIZUNA_LOG(Debug) << "rank " << rank << " of " << name << ": connected to " << world_size - 1
                    << " peers from " << local_address << ":" << listener.port();
  return out;
}

}  // namespace kizuna::comm
