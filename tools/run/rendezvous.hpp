// run/rendezvous.hpp: the store of a kizuna-run job, and what the launchers
// of its nodes say to each other through it.
//
// Node 0's Rendezvous hosts the TcpStoreServer, for the launchers and for
// every worker of the job (they get KIZUNA_STORE=host:port): on 127.0.0.1 at
// a port the OS picks when there is one node and no --master-port, else on
// every interface at --master-port (29500 by default). With several nodes
// every launcher, node 0's included, is also a client of that store, and
// the launchers use these keys (workers' keys live under run<id>/round<k>/):
//
//   kizuna-run/run               the run id, chosen by node 0
//   kizuna-run/claim/<K>         a counter: node rank K taken twice is an error
//   kizuna-run/config/<K>        "nnodes=2 nproc-per-node=4 max-restarts=0"
//   kizuna-run/verdict           node 0's "ok", or what disagrees
//   kizuna-run/checked/<K>       node K knows the outcome of the agreement
//                                (node 0 waits for it, at most kLeaveTimeout,
//                                before it exits on a disagreement)
//   kizuna-run/round<k>/master-port  MASTER_PORT of round k's workers, chosen
//                                by node 0 once round k-1's workers are gone
//   kizuna-run/round<k>/failed   the first failure of round k (any node)
//   kizuna-run/round<k>/done/<K> node K's workers of round k all exited 0
//   kizuna-run/over              a launcher gave up (or was stopped): why
//   kizuna-run/left/<K>          node K has seen the end and leaves
//
// Blocking: every wait polls the store every kPollInterval and calls `idle`
// in between, which waits on kizuna-run's signals and throws Interrupted when
// one asks to stop; each wait has a deadline (--timeout) and throws
// kizuna::Error(Timeout) naming what it waited for. A store that goes away
// (node 0's launcher died) is kizuna::Error(PeerLost) from any call.
//
// MASTER_PORT is not the store's port: kizuna's store does not speak
// torch's TCPStore protocol, and torch's env:// rendezvous starts a TCPStore
// of its own on rank 0 at MASTER_ADDR:MASTER_PORT (with
// TORCHELASTIC_USE_AGENT_STORE=False, which kizuna-run sets). So node 0
// reserves a second, free port for each round (master_port()), which rank 0
// (on node 0) may bind; the workers find kizuna's store through
// KIZUNA_STORE, which Store::from_env() reads before MASTER_ADDR/MASTER_PORT.
//
// Ownership: owns the server and the port reservation (node 0) and the
// client. Threading: one thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "options.hpp"

namespace kizuna {
class TcpStore;
class TcpStoreServer;
}  // namespace kizuna

namespace kizuna::run {

// Thrown by an `idle` callback when kizuna-run receives SIGINT, SIGTERM or SIGHUP.
struct Interrupted {
  int signal;
};

class Rendezvous {
 public:
  static constexpr std::chrono::milliseconds kPollInterval{100};
  // How long node 0 waits for the others to read "over" before it exits and
  // takes the store with it.
  static constexpr std::chrono::milliseconds kLeaveTimeout{5'000};

  using Idle = std::function<void(std::chrono::milliseconds)>;

  // Node 0: starts the server (throws SystemError when the port is taken).
  // Other nodes: connects to node 0's, retrying until --timeout.
  Rendezvous(const RunOptions& options, Idle idle);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  const std::string& run_id() const { return run_id_; }
  int port() const { return port_; }
  // "host:port" ("[v6]:port") for KIZUNA_STORE.
  std::string store_address() const;
  // "run<id>/round<k>", KIZUNA_STORE_PREFIX of round k's workers.
  std::string round_prefix(int round) const;

  bool multi_node() const { return options_.nnodes > 1; }

  // MASTER_PORT of round k's workers: a port on node 0 that nobody listens
  // on, for a store the program's rank 0 starts itself (torch's env://
  // TCPStore). Node 0 reserves a fresh one per round (see reserve_port in
  // rendezvous.cpp), so that a worker of the round before, still trying to
  // reach its store, never joins the new one; the other nodes wait for it
  // (at most --timeout), which also keeps their workers of round k from
  // starting before node 0's of round k-1 are gone. Throws
  // kizuna::Error(Aborted) when the job is over meanwhile. Call with the
  // rounds in order; a second call for the same round returns its port.
  int master_port(int round);

  // The agreement before any worker starts: every node has the same nnodes,
  // nproc-per-node and max-restarts, and every node rank is taken once.
  // Throws kizuna::Error(Mismatch) naming the node and both values, or
  // Timeout naming the nodes that never came.
  void agree();

  // Round k failed: records the first failure the job saw (later ones keep it).
  void report_failure(int round, const std::string& what);
  // Round k's failure as first reported, if any (never blocks).
  std::optional<std::string> failure(int round);
  // The job is over (a launcher gave up or was stopped); first reason wins.
  void announce_over(const std::string& why);
  std::optional<std::string> over();
  // This node's workers of round k all succeeded; are all nodes' done?
  void mark_done(int round);
  bool all_done(int round);
  // The end: other nodes say they leave; node 0 waits (at most `timeout`)
  // until they have, so that none loses the store while still reading it.
  void leave(std::chrono::milliseconds timeout);

 private:
  std::string config_text() const;
  void poll_until(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline,
                  const std::function<std::string()>& what);

  RunOptions options_;
  Idle idle_;
  std::string run_id_;
  int port_ = -1;
  int master_port_round_ = -1;  // the round master_port_ belongs to
  int master_port_ = -1;
  int reservation_fd_ = -1;     // node 0: the socket that holds master_port_
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> client_;
};

}  // namespace kizuna::run
