#include "comm/bootstrap.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "core/check.hpp"
#include "core/log.hpp"
#include "comm/p2p.hpp"
#include "transport/tcp/congestion.hpp"
#include "transport/tcp/tcp_connect.hpp"
#include "transport/shm/shm_link.hpp"
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

std::string network_namespace() {
  char buf[128] = {};
  const ssize_t n = ::readlink("/proc/self/ns/net", buf, sizeof buf - 1);
  std::string ns = n > 0 ? std::string(buf, n) : "unknown";
  for (char& c : ns)
    if (c == ' ') c = '_';
  return ns;
}

std::chrono::milliseconds left(Clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

}  // namespace

bool same_node(const PeerInfo& a, const PeerInfo& b) {
  return a.hostname == b.hostname && a.boot_id == b.boot_id && a.netns == b.netns;
}

std::string encode_peer(const PeerInfo& p) {
  std::ostringstream out;
  out << "kizuna-peer-v3 " << p.hostname << " " << p.boot_id << " " << p.netns << " " << p.pid << " "
      << p.address << " " << p.port << " " << p.incarnation << " " << p.p2p_port;
  return out.str();
}

PeerInfo decode_peer(const std::string& text, int rank) {
  std::istringstream in(text);
  std::string version;
  PeerInfo p;
  in >> version >> p.hostname >> p.boot_id >> p.netns >> p.pid >> p.address >> p.port >> p.incarnation >>
      p.p2p_port;
  if (!in || version != "kizuna-peer-v3" || p.port <= 0 || p.port > 65535 || p.p2p_port <= 0 || p.p2p_port > 65535)
    KIZUNA_THROW(ErrorCode::Mismatch, "rank ", rank, " published an address kizuna cannot read: '",
                 text.substr(0, 200), "'");
  return p;
}

namespace {

std::set<int> parse_ranks(const std::string& text) {
  std::set<int> out;
  std::istringstream in(text);
  int r;
  while (in >> r) out.insert(r);
  return out;
}

// Step 4: shared memory between the ranks of this node. Every rank creates
// its segment (one inbound channel per local rank) and says so; maps the
// segments of the local peers that could; says which it mapped; and, once
// every local peer has said so, unlinks its own name, so nothing is left in
// /dev/shm whatever happens next. A pair uses shared memory when each side
// mapped the other's segment.
void setup_shm(Store& store, const std::string& name, int rank, const BootstrapOptions& options,
               Connected& out, Clock::time_point deadline) {
  const auto& peers = out.topology.peers;
  std::vector<int> local;
  for (int r = 0; r < static_cast<int>(peers.size()); ++r)
    if (out.topology.node_of[r] == out.topology.node_of[rank]) local.push_back(r);
  out.local_ranks = static_cast<int>(local.size());
  if (options.transport == Transport::Shm && local.size() != peers.size())
    KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_TRANSPORT=shm, but only ", local.size(), " of ",
                 peers.size(), " ranks run on this host (", peers[rank].hostname,
                 "); use auto to combine shared memory and TCP");
  if (options.transport == Transport::Tcp || local.size() < 2) return;
  auto index_of = [&](int r) {
    return static_cast<std::uint32_t>(std::find(local.begin(), local.end(), r) - local.begin());
  };

  transport::shm::Geometry g;
  g.channels = static_cast<std::uint32_t>(local.size());
  g.slot_bytes = 64 << 10;
  // A power of two (transport/shm/layout.hpp): KIZUNA_SHM_BYTES rounded down.
  g.slots = static_cast<std::uint32_t>(std::bit_floor(std::max<std::uint64_t>(4, options.shm_bytes / g.slot_bytes)));
  // What a rank killed during an earlier set-up on this host left behind
  // (one look at /dev/shm per host, by its first rank).
  if (rank == local.front()) {
    for (const std::string& stale : transport::shm::remove_stale_segments())
      KIZUNA_LOG(Info) << "rank " << rank << ": removed shared memory " << stale
                       << ", left behind by a process that is gone";
  }
  auto shm = std::make_unique<ShmSegments>();
  std::string status;
  try {
    const auto ends = std::chrono::system_clock::now() +
                      std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline - Clock::now());
    shm->mine = transport::shm::Segment::create(
        transport::shm::segment_name(::getpid(), out.topology.comm_id, rank, ends), g, out.topology.comm_id, rank);
    status = "ok " + shm->mine.name();
  } catch (const Error& e) {
    if (options.transport == Transport::Shm) throw;
    KIZUNA_LOG(Warn) << "rank " << rank << ": no shared memory, using TCP inside the node: " << e.what();
    status = std::string("fail ") + e.what();
  }
  const std::string prefix = name + "/shm/";
  store.set(prefix + "segment/" + std::to_string(rank), status);
  std::vector<std::string> keys;
  for (int r : local) keys.push_back(prefix + "segment/" + std::to_string(r));
  const std::vector<Bytes> statuses = store.multi_get(keys, left(deadline));

  std::string mapped;
  for (std::size_t i = 0; i < local.size(); ++i) {
    const int r = local[i];
    const std::string st = text(statuses[i]);
    if (r == rank || st.rfind("ok ", 0) != 0 || status.rfind("ok ", 0) != 0) continue;
    try {
      shm->peers.emplace(r, transport::shm::Segment::map(st.substr(3), out.topology.comm_id, r, g.channels));
      mapped += std::to_string(r) + " ";
    } catch (const Error& e) {
      if (options.transport == Transport::Shm) throw;
      KIZUNA_LOG(Warn) << "rank " << rank << ": cannot map rank " << r << "'s shared memory, using TCP: " << e.what();
    }
  }
  store.set(prefix + "mapped/" + std::to_string(rank), mapped);
  keys.clear();
  for (int r : local) keys.push_back(prefix + "mapped/" + std::to_string(r));
  const std::vector<Bytes> all_mapped = store.multi_get(keys, left(deadline));
  shm->mine.unlink();

  bool any = false;
  for (std::size_t i = 0; i < local.size(); ++i) {
    const int r = local[i];
    if (r == rank || !shm->peers.count(r) || !parse_ranks(text(all_mapped[i])).count(rank)) continue;
    out.links[r] = transport::shm::make_shm_link(r, shm->mine, index_of(r), shm->peers.at(r),
                                                 index_of(rank), std::move(out.links[r]), &shm->stream_stores);
    any = true;
  }
  if (options.transport == Transport::Shm && !any)
    KIZUNA_THROW(ErrorCode::SystemError, "KIZUNA_TRANSPORT=shm, but rank ", rank,
                 " could not share memory with its peers");
  if (any) out.shm = std::move(shm);
}

}  // namespace

Connected bootstrap(Store& store, const std::string& name, int rank, int world_size,
                    const BootstrapOptions& options, Clock::time_point deadline) {
  const std::string& local_address = options.local_address;
  Connected out;
  const std::string id_key = name + "/comm_id";
  if (rank == 0) {
    out.topology.comm_id = random_u64();
    store.set(id_key, std::to_string(out.topology.comm_id));
  } else {
    const std::string id = text(store.get(id_key, left(deadline)));
    out.topology.comm_id = std::stoull(id);
  }

  transport::TcpListener listener(local_address, options.tcp_congestion);
  const auto [p2p_fd, p2p_port] = open_p2p_listener(listener.host());
  // Closed if the rest fails; the caller's once returned.
  struct CloseOnThrow {
    int fd;
    bool armed = true;
    ~CloseOnThrow() {
      if (armed) ::close(fd);
    }
  } p2p_guard{p2p_fd};
  PeerInfo self{hostname(), boot_id(), network_namespace(), static_cast<int>(::getpid()),
                listener.host(), listener.port(), random_u64(), p2p_port};
  store.set(name + "/peer/" + std::to_string(rank), encode_peer(self));

  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(name + "/peer/" + std::to_string(r));
  const std::vector<Bytes> entries = store.multi_get(keys, left(deadline));
  for (int r = 0; r < world_size; ++r) out.topology.peers.push_back(decode_peer(text(entries[r]), r));
  Topology& t = out.topology;
  t.node_of.assign(world_size, -1);
  t.nodes = 0;
  for (int r = 0; r < world_size; ++r) {
    if (t.node_of[r] >= 0) continue;
    for (int q = r; q < world_size; ++q)
      if (t.node_of[q] < 0 && same_node(t.peers[r], t.peers[q])) t.node_of[q] = t.nodes;
    ++t.nodes;
  }

  std::vector<transport::TcpPeer> connect_to, accept_from;
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    const PeerInfo& p = out.topology.peers[r];
    (r > rank ? connect_to : accept_from).push_back({r, p.address, p.port, p.incarnation});
  }
  transport::Hello hello{out.topology.comm_id, rank, world_size, self.incarnation};
  const std::vector<int> fds = transport::connect_peers(listener, hello, connect_to, accept_from, deadline);
  out.links.resize(world_size);
  for (int r = 0; r < world_size; ++r) {
    if (fds[r] < 0) continue;
    if (out.tcp_congestion.empty()) out.tcp_congestion = transport::congestion_of(fds[r]);
    out.links[r] = transport::make_tcp_link(r, fds[r]);
  }
  setup_shm(store, name, rank, options, out, deadline);
  p2p_guard.armed = false;
  out.p2p_listener = p2p_fd;
  KIZUNA_LOG(Debug) << "rank " << rank << " of " << name << ": connected to " << world_size - 1
                    << " peers from " << local_address << ":" << listener.port() << ", "
                    << (out.shm ? out.local_ranks - 1 : 0) << " through shared memory";
  return out;
}

}  // namespace kizuna::comm
