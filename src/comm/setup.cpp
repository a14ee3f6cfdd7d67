// Creation: settings, bootstrap, the tuning table, then what one node
// sharing memory adds (symmetric memory, the mailboxes, the staging
// memory) and the device. Every choice that every rank must make alike is
// made from what all ranks know (the settings, the topology), never from
// local accidents such as one rank's shared-memory fallback.
#include <kizuna/prefix_store.hpp>
#include <kizuna/tcp_store.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "comm/comm_impl.hpp"
#include "comm/death_watch.hpp"
#include "comm/signal_dump.hpp"
#include "core/asymmetric_fence.hpp"
#include "core/launch_env.hpp"
#include "core/log.hpp"
#include "transport/shm/shm_link.hpp"
#include "transport/tcp/interface.hpp"

namespace kizuna {
namespace {

// What tells stores apart for default_name: a TCP store by its server (a
// store re-created against the same server goes on counting, so that a new
// communicator never meets the keys an earlier one left there), a prefix
// store by its prefix and base, any other by its address (an in-process
// store starts empty).
std::string store_identity(const Store* store) {
  if (const auto* tcp = dynamic_cast<const TcpStore*>(store))
    return "tcp " + tcp->host() + ":" + std::to_string(tcp->port());
  if (const auto* prefixed = dynamic_cast<const PrefixStore*>(store))
    return "prefix " + prefixed->prefix() + " " + store_identity(prefixed->base().get());
  char address[32];
  std::snprintf(address, sizeof address, "at %p", static_cast<const void*>(store));
  return address;
}

}  // namespace

std::chrono::milliseconds Communicator::Impl::setup_timeout(const CommOptions& options) {
  return options.setup_timeout.count() > 0 ? options.setup_timeout : core::Env::get().store_timeout;
}

std::string Communicator::Impl::default_name(const Store* store) {
  static std::mutex mutex;
  static std::map<std::string, int> created;
  const std::string identity = store_identity(store);
  std::lock_guard lock(mutex);
  return "kizuna/comm" + std::to_string(created[identity]++);
}

namespace {

// The address to listen on: KIZUNA_SOCKET_IFNAME's, else the one that
// routes to the store's host (a TcpStore's, else MASTER_ADDR's), else
// loopback.
std::string choose_local_address(Store* store) {
  std::string towards;
  if (const auto* tcp = dynamic_cast<const TcpStore*>(store)) towards = tcp->host();
  if (towards.empty() || towards == "*" || towards == "0.0.0.0") towards = core::LaunchEnv::from_process().store_host;
  if (towards.empty() || towards == "*" || towards == "0.0.0.0") towards = "127.0.0.1";
  return transport::local_address_for(towards, core::Env::get().socket_ifname);
}

// Rank 0's profile (docs/tuning.md#tuner), as the text every rank parses:
// "none", "error <why>", or "file <path>" and the sections of the file that
// fit this communicator (any buffers).
std::string load_profile(const std::string& path, const comm::ProfileKey& fits) {
  if (path.empty()) return "none";
  try {
    std::ifstream in(path);
    if (!in) KIZUNA_THROW(ErrorCode::InvalidArgument, "tuning profile ", path, " (KIZUNA_TUNING_FILE): cannot read it: ",
                          std::strerror(errno));
    std::stringstream text;
    text << in.rdbuf();
    const comm::Profile all = comm::Profile::parse(text.str(), path);
    comm::Profile mine;
    for (const comm::ProfileSection& s : all.sections) {
      comm::ProfileKey k = s.key;
      k.symmetric = fits.symmetric;
      if (k == fits) mine.sections.push_back(s);
    }
    if (mine.sections.empty()) {
      const std::string what = comm::describe(fits);
      KIZUNA_LOG(Warn) << "tuning profile " << path << " has no section for " << what.substr(0, what.find(" buffers="))
                       << "; the built-in rules decide (kizuna-perf --calibrate measures one)";
      return "none";
    }
    return "file " + path + "\n" + mine.text();
  } catch (const Error& e) {
    return std::string("error ") + e.what();
  }
}

// Rank 0 hands its profile, or why it has none, to every rank through the
// store: all decide from the same figures, or all fail alike.
comm::Profile share_profile(Store& store, const std::string& name, int rank, int world, const std::string& path,
                            const comm::ProfileKey& fits, std::chrono::milliseconds timeout) {
  const std::string key = name + "/tuning-profile";
  std::string text;
  if (rank == 0) {
    text = load_profile(path, fits);
    if (world > 1) store.set(key, Bytes(text.begin(), text.end()));
  } else {
    const Bytes got = store.get(key, timeout);
    text.assign(got.begin(), got.end());
  }
  if (text.rfind("error ", 0) == 0) {
    KIZUNA_THROW(ErrorCode::InvalidArgument, rank == 0 ? "" : "rank 0's ", text.substr(6));
  }
  comm::Profile profile;
  if (text.rfind("file ", 0) != 0) return profile;
  const std::size_t eol = text.find('\n');
  const std::string source = text.substr(5, eol - 5);
  profile = comm::Profile::parse(std::string_view(text).substr(eol + 1), source);
  profile.source = source;
  return profile;
}

}  // namespace

std::shared_ptr<Communicator::Impl> Communicator::Impl::create(const CommOptions& options, bool use_profile) {
  KIZUNA_CHECK_ARG(options.store != nullptr, "CommOptions.store is null");
  KIZUNA_CHECK_ARG(options.world_size >= 1, "CommOptions.world_size is ", options.world_size,
                   "; it must be at least 1");
  KIZUNA_CHECK_ARG(options.rank >= 0 && options.rank < options.world_size, "CommOptions.rank ", options.rank,
                   " is out of range for world size ", options.world_size);
  const core::Env& env = core::Env::get();
  // Validated before any rank waits on this one.
  const comm::Settings settings = comm::settings_from(options, env);
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  impl->rank = options.rank;
  impl->world = options.world_size;
  impl->name = options.name.empty() ? default_name(options.store.get()) : options.name;
  impl->group = impl->name;
  core::set_log_rank(options.rank);

  const auto setup = setup_timeout(options);
  comm::BootstrapOptions boot;
  boot.local_address = choose_local_address(options.store.get());
  boot.transport = settings.transport;
  boot.shm_bytes = env.shm_bytes;
  boot.tcp_congestion = env.tcp_congestion;
  comm::Connected connected =
      comm::bootstrap(*options.store, impl->name, impl->rank, impl->world, boot, Clock::now() + setup);
  impl->topology = std::move(connected.topology);
  impl->shm = std::move(connected.shm);
  impl->links = std::move(connected.links);
  {
    std::vector<comm::P2pEngine::Peer> peers;
    for (const comm::PeerInfo& p : impl->topology.peers) peers.push_back({p.address, p.p2p_port});
    impl->p2p = std::make_shared<comm::P2pEngine>(impl->rank, impl->name, impl->topology.comm_id,
                                                  connected.p2p_listener, std::move(peers));
  }

  comm::Facts facts;
  facts.world = impl->world;
  facts.nodes = impl->topology.nodes;
  facts.local_ranks = connected.local_ranks;
  // Every rank of one node sees the same cores, so they agree on this.
  facts.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  facts.tcp_congestion = connected.tcp_congestion;
  facts.asymmetric_fence = core::asymmetric_fence_available();
  facts.mailbox_capacity = comm::Mailbox::capacity();
  impl->profile_key = {facts.world, facts.nodes, facts.local_ranks, settings.transport != Transport::Tcp, false};
  // Calibration's communicators, which every rank creates alike, have
  // no profile to share: they skip the store's round trip.
  const comm::Profile profile =
      use_profile ? share_profile(*options.store, impl->name, impl->rank, impl->world, settings.tuning_file,
                                  impl->profile_key, std::chrono::duration_cast<std::chrono::milliseconds>(setup))
                  : comm::Profile{};
  impl->tuning = comm::make_tuning(settings, facts, profile.sections.empty() ? nullptr : &profile);
  const comm::Tuning& tuning = impl->tuning;
  KIZUNA_LOG(Info) << "communicator " << impl->name << ", rank " << impl->rank << " of " << impl->world << ", "
                   << tuning.describe();

  impl->set_up_executor();
  impl->set_up_device(setup);
  if (tuning.node_memory) {
    comm::NodeWait wait;
    wait.rank = impl->rank;
    wait.world = impl->world;
    for (auto& link : impl->links) wait.links.push_back(link.get());
    wait.spin = tuning.spin;
    wait.yield = tuning.yield;
    wait.aborted = &impl->broken;
    wait.live = &impl->live;
    wait.light = tuning.light_rings;
    impl->set_up_node_memory(wait, Clock::now() + setup);
  }
  // The slots (transport/shm) carry everything else between the ranks of
  // a node, with streaming stores as docs/tuning.md#streaming-stores says.
  if (impl->shm) {
    impl->shm->stream_stores.store(tuning.slots_stream, std::memory_order_relaxed);
    if (impl->symmetric && tuning.slots_follow_probe) impl->symmetric->report_placement_to(&impl->shm->stream_stores);
  }
  impl->start();
  return impl;
}

// The executor over the links, and the stuck-rank report on a signal.
void Communicator::Impl::set_up_executor() {
  std::vector<transport::Link*> raw;
  for (auto& link : links) raw.push_back(link.get());
  executor = std::make_unique<comm::Executor>(std::move(raw), rank);
  if (shm) executor->set_doorbell(shm->mine.header());
  executor->set_live(&live);
  executor->set_wait(tuning.spin, tuning.yield);
  std::weak_ptr<Impl> weak = weak_from_this();
  dump_handle = comm::register_dump([weak] {
    const auto self = weak.lock();
    return self ? self->report() : std::string();
  });
  // A rank that spins before it sleeps can afford a heavy fence when it
  // goes to sleep, which spares its peers a fence on every message to it
  // (docs/tuning.md#spin-and-yield).
  if (shm && tuning.light_rings) transport::shm::use_light_ring(shm->mine.header());
}

// Symmetric memory, the mailboxes and the staging memory, on one node
// whose ranks share memory (what every rank knows alike; a pair that fell
// back to TCP is found when memory is allocated, on every rank alike).
void Communicator::Impl::set_up_node_memory(const comm::NodeWait& wait, Clock::time_point deadline) {
  comm::SymmetricSetup sym{wait, options.store.get(), name, topology.comm_id};
  sym.probe_every_calls = tuning.probe_every_calls;
  sym.probe_every_bytes = tuning.probe_every_bytes;
  sym.stream_output_from = tuning.stream_output_from;
  sym.stream_out_of_place_from = tuning.stream_out_of_place_from;
  symmetric = std::make_unique<comm::SymmetricMemory>(std::move(sym));
  // Allocated whatever mailbox_upto is: an allocation is collective, and
  // ranks that set it differently must still meet (their calls then fail
  // with Mismatch, not their creation with Timeout).
  std::vector<unsigned char*> parts =
      symmetric->allocate_internal(comm::Mailbox::region_bytes(), deadline, mailbox_memory);
  if (!parts.empty()) mailbox = std::make_unique<comm::Mailbox>(comm::MailboxSetup{wait, std::move(parts)});
  // A rank that asks for no staging memory, or a size its peers do not,
  // leaves every rank without it.
  symmetric->allocate_staging(tuning.staging_bytes, tuning.stores, tuning.stream_until_probed, deadline);
  paths.mailbox = mailbox != nullptr;
  paths.staging = symmetric->staging();
}

void Communicator::Impl::set_up_device(Clock::duration setup) {
  const core::Env& env = core::Env::get();
  const std::pair<std::string, int> chosen = options.device.empty()
                                                 ? std::pair{env.device, env.device_index}
                                                 : core::parse_device("CommOptions.device", options.device);
  if (chosen.first == "cpu") return;
  const int local_rank = options.local_rank >= 0 ? options.local_rank : core::LaunchEnv::from_process().local_rank;
  device = comm::make_device_backend(chosen.first, chosen.second, local_rank);
  // GPU to GPU when every rank's device can join (one node: CUDA IPC), else
  // staged. Every rank asks, so that all decide alike.
  if (topology.nodes != 1 || !env.cuda_ipc) return;
  std::string why;
  const auto timeout = std::min<std::chrono::milliseconds>(
      std::chrono::duration_cast<std::chrono::milliseconds>(setup), std::chrono::seconds(60));
  paths.device_direct = device->connect(options.store, name + "/cuda-ipc", rank, world, timeout, &why);
  if (!paths.device_direct) {
    KIZUNA_LOG(Warn) << "communicator " << name << ": device collectives are staged through host memory: " << why;
  }
}

Communicator::Impl::~Impl() {
  comm::unregister_dump(dump_handle);
  shutdown();
}

// A communicator that shrink(), grow() and join() make: created, then
// committed to by all its members (comm/death_watch.hpp), or thrown away by
// all; a member that fails publishes why under its "failed" key, so the
// others fail at once rather than at the deadline.
std::shared_ptr<Communicator> Communicator::set_up(const CommOptions& options,
                                                   std::chrono::steady_clock::time_point deadline) {
  std::shared_ptr<Communicator> made;
  std::string why;
  try {
    made = create(options);
    why = comm::commit(*options.store, options.name, options.rank, options.world_size, deadline);
  } catch (const Error& e) {
    comm::publish_failure(*options.store, options.name,
                          "rank " + std::to_string(options.rank) + " of " + options.name + ": " + e.what());
    throw;
  }
  if (!why.empty()) KIZUNA_THROW(ErrorCode::Aborted, options.name, " did not hold: ", why);
  return made;
}

}  // namespace kizuna
