// comm/p2p.hpp: point-to-point messages, apart from the collectives.
//
// Sends and receives between two ranks (MPI's, torch.distributed's
// isend/irecv) run on connections and a thread of their own, so they never
// wait behind the collective queue, nor it behind them: a posted receive
// holds back nothing, and the ranks of a batch of sends and receives may
// post them in any order without deadlock (docs/architecture.md#point-to-point).
//
// Matching follows MPI: a message carries a tag; a receive names a source
// rank (or kAnySource) and a tag. Messages from one rank with one tag are
// received in the order they were sent. A message is taken by the earliest
// posted receive that matches it, and a receive takes the earliest arrived
// message that matches it (from any source: the earliest of them all). A
// message that arrives first waits in memory until its receive is posted.
// Sizes must agree: a receive of another size fails with Mismatch, and the
// message is dropped.
//
// Connections: every rank listens from creation on (its port is in its
// bootstrap entry, comm/bootstrap.hpp); the first send to a rank opens a
// connection to it, which carries this rank's messages to that one only:
// {magic, communicator id, rank} once, then per message a header {tag,
// bytes} and the bytes. A connection that does not open so is closed.
//
// Completion: a send is done once its bytes are in the socket (its buffer
// may be reused), a receive once its bytes are in place. Every operation has
// a deadline: past it, it fails with Timeout ("... timed out after ..."). A
// connection that breaks fails the operations on it with PeerLost, and a
// peer that closed its end (its communicator ended) fails the receives that
// name it. Works finish on the engine's thread: their callbacks must not
// wait for other point-to-point operations.
//
// Threading: post(), fail_all() and shutdown() from any thread. The thread
// starts with the first operation.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kizuna::detail {
struct WorkState;
}

namespace kizuna::comm {

// A listening socket on port 0 of `host` (a numeric address): the
// descriptor and its port. Throws SystemError naming the address.
std::pair<int, int> open_p2p_listener(const std::string& host);

struct P2pOp {
  using Clock = std::chrono::steady_clock;
  bool send = false;
  unsigned char* data = nullptr;  // read by a send, written by a receive
  std::size_t bytes = 0;
  int peer = -1;                  // a receive: -1 for any source
  std::int64_t tag = 0;
  Clock::time_point deadline;
  std::shared_ptr<kizuna::detail::WorkState> work;  // finished once done; its source set first
};

class P2pEngine {
 public:
  struct Peer {
    std::string address;
    int port = 0;
  };

  // `listen_fd` (open_p2p_listener's) is the engine's from now on; `peers`
  // by rank; `name` and `rank` for messages.
  P2pEngine(int rank, std::string name, std::uint64_t comm_id, int listen_fd, std::vector<Peer> peers);
  ~P2pEngine();
  P2pEngine(const P2pEngine&) = delete;
  P2pEngine& operator=(const P2pEngine&) = delete;

  void post(P2pOp op);
  // Fails every pending operation with `error`, and every later one.
  void fail_all(std::exception_ptr error);
  // Fails the receives still pending, flushes the sends (each within its
  // deadline), and stops the thread. Later operations fail.
  void shutdown();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace kizuna::comm
