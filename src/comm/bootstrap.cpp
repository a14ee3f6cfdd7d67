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
#include "store/keys.hpp"
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

// "/proc/self/ns/<kind>" as the kernel names it ("net:[4026531840]"),
// spaces replaced.
std::string own_namespace(const char* kind) {
  char buf[128] = {};
  const ssize_t n = ::readlink((std::string("/proc/self/ns/") + kind).c_str(), buf, sizeof buf - 1);
  std::string ns = n > 0 ? std::string(buf, n) : "unknown";
  for (char& c : ns)
    if (c == ' ') c = '_';
  return ns;
}

std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

// How long a wait for the peers' keys goes before looking for a failure
// that another rank published: the start-up mistakes it reports (a rank
// claimed twice, another world size) are known within this.
constexpr std::chrono::milliseconds kFailureCheck{100};

// A failure that ends every rank's start-up, published under `failed_key`:
// the message every rank then throws.
[[noreturn]] void publish_failure(Store& store, const std::string& failed_key, const std::string& message) {
  store.set(failed_key, message);
  throw Error(ErrorCode::Mismatch, message);
}

// This process, as errors name it.
std::string whoami() { return hostname() + " (pid " + std::to_string(::getpid()) + ")"; }

}  // namespace

// store.multi_get(keys) until `deadline`, but ended at once by a failure any
// rank publishes under `failed_key` (thrown here with its message). Waits
// for one missing key at a time, a slice at a time, so that a long wait
// costs the store one small request a slice.
std::vector<Bytes> get_watching(Store& store, const std::vector<std::string>& keys, const std::string& failed_key,
                                std::chrono::steady_clock::time_point deadline) {
  const auto start = Clock::now();
  for (std::size_t next = 0; next < keys.size();) {
    try {
      store.wait({keys[next]}, std::min(time_left(deadline), kFailureCheck));
      ++next;
      continue;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
    }
    if (store.check({failed_key})) throw Error(ErrorCode::Mismatch, text(store.get(failed_key, time_left(deadline))));
    if (Clock::now() >= deadline) {
      std::vector<std::string> missing;
      for (std::size_t k = next; k < keys.size() && missing.size() < 16; ++k)
        if (!store.check({keys[k]})) missing.push_back(keys[k]);
      throw Error(ErrorCode::Timeout,
                  store::timeout_message(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start),
                                         keys, missing, ""));
    }
  }
  return store.multi_get(keys, time_left(deadline));
}

std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

PeerInfo this_process() {
  PeerInfo p;
  p.hostname = hostname();
  p.boot_id = boot_id();
  p.netns = own_namespace("net");
  p.pidns = own_namespace("pid");
  p.pid = static_cast<int>(::getpid());
  return p;
}

std::string encode_process(const PeerInfo& p) {
  std::ostringstream out;
  out << p.hostname << " " << p.boot_id << " " << p.netns << " " << p.pidns << " " << p.pid;
  return out.str();
}

PeerInfo decode_process(const std::string& text) {
  PeerInfo p;
  std::istringstream in(text);
  in >> p.hostname >> p.boot_id >> p.netns >> p.pidns >> p.pid;
  if (!in) p = PeerInfo{};
  return p;
}

bool same_node(const PeerInfo& a, const PeerInfo& b) {
  return a.hostname == b.hostname && a.boot_id == b.boot_id && a.netns == b.netns;
}

std::string encode_peer(const PeerInfo& p) {
  std::ostringstream out;
  out << "kizuna-peer-v4 " << encode_process(p) << " " << p.address << " " << p.port << " " << p.incarnation << " "
      << p.p2p_port;
  return out.str();
}

PeerInfo decode_peer(const std::string& text, int rank) {
  std::istringstream in(text);
  std::string version;
  PeerInfo p;
  in >> version >> p.hostname >> p.boot_id >> p.netns >> p.pidns >> p.pid >> p.address >> p.port >>
      p.incarnation >> p.p2p_port;
  if (!in || version != "kizuna-peer-v4" || p.port <= 0 || p.port > 65535 || p.p2p_port <= 0 || p.p2p_port > 65535)
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
  // Like every wait of set-up, ended at once by a failure published under
  // "failed" (a rank that died while shrink() or grow() sets up).
  const std::string failed_key = name + "/failed";
  const std::vector<Bytes> statuses = get_watching(store, keys, failed_key, deadline);

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
  const std::vector<Bytes> all_mapped = get_watching(store, keys, failed_key, deadline);
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

namespace {

Connected join_peers(Store& store, const std::string& name, int rank, int world_size,
                     const BootstrapOptions& options, Clock::time_point deadline);

}  // namespace

Connected bootstrap(Store& store, const std::string& name, int rank, int world_size,
                    const BootstrapOptions& options, Clock::time_point deadline) {
  try {
    return join_peers(store, name, rank, world_size, options, deadline);
  } catch (const Error& e) {
    // A rank that cannot start (no port to listen on, shared memory refused)
    // tells the others, which would otherwise wait for it until their
    // deadline. A failure read from the store (Mismatch) is there already;
    // a Timeout, every waiting rank reaches by itself.
    if (e.code() != ErrorCode::Mismatch && e.code() != ErrorCode::Timeout) {
      try {
        const std::string failed_key = name + "/failed";
        if (!store.check({failed_key}))
          store.set(failed_key, "rank " + std::to_string(rank) + " of " + name + " (" + whoami() +
                                    ") could not start: " + e.what());
      } catch (const Error&) {
      }
    }
    throw;
  }
}

namespace {

Connected join_peers(Store& store, const std::string& name, int rank, int world_size,
                     const BootstrapOptions& options, Clock::time_point deadline) {
  const std::string& local_address = options.local_address;
  Connected out;
  const std::string failed_key = name + "/failed";
  // Each rank claims its number first: a second claimant (two processes
  // given the same RANK) fails every rank at once, naming both, instead of
  // leaving them to wait for the rank nobody took.
  const std::string rank_text = std::to_string(rank);
  const std::int64_t claims = store.add(name + "/claims/" + rank_text, 1);
  store.set(name + "/claimant/" + rank_text + "/" + std::to_string(claims), whoami());
  if (claims > 1) {
    std::string first = "another process";
    try {
      first = text(store.get(name + "/claimant/" + rank_text + "/1", std::min(time_left(deadline), kFailureCheck * 20)));
    } catch (const Error&) {
    }
    publish_failure(store, failed_key,
                    "rank " + rank_text + " of " + name + " is claimed by two processes, " + first + " and " +
                        whoami() + ": give each process its own RANK");
  }
  const std::string id_key = name + "/comm_id";
  const std::string world_key = name + "/world_size";
  if (rank == 0) {
    out.topology.comm_id = random_u64();
    store.set(world_key, std::to_string(world_size));
    store.set(id_key, std::to_string(out.topology.comm_id));
  } else {
    const std::vector<Bytes> got = get_watching(store, {world_key, id_key}, failed_key, deadline);
    const std::string theirs = text(got[0]);
    if (theirs != std::to_string(world_size))
      publish_failure(store, failed_key,
                      "rank " + rank_text + " of " + name + " (" + whoami() + ") says world size " +
                          std::to_string(world_size) + ", rank 0 says " + theirs +
                          ": every rank must give the same WORLD_SIZE");
    out.topology.comm_id = std::stoull(text(got[1]));
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
  PeerInfo self = this_process();
  self.address = listener.host();
  self.port = listener.port();
  self.incarnation = random_u64();
  self.p2p_port = p2p_port;
  store.set(name + "/peer/" + std::to_string(rank), encode_peer(self));

  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back(name + "/peer/" + std::to_string(r));
  const std::vector<Bytes> entries = get_watching(store, keys, failed_key, deadline);
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
  // A failure another rank publishes (a death while shrink() or grow() sets
  // up) ends the connecting too.
  const std::string failed = name + "/failed";
  const std::vector<int> fds = transport::connect_peers(listener, hello, connect_to, accept_from, deadline, [&] {
    return store.check({failed}) ? text(store.get(failed, time_left(deadline))) : std::string();
  });
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

}  // namespace

}  // namespace kizuna::comm
