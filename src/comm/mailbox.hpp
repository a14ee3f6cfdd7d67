// comm/mailbox.hpp: the small all-reduce (and the barrier) of ranks that
// share a node, as one cache line or a few: every rank writes its input
// into its mailbox, reads every peer's, and folds them all in rank order.
//
// Every rank owns a region the others map (an internal symmetric
// allocation, comm/symmetric.hpp) holding two mailboxes, used in turn by
// the communicator's mailbox calls (their own count, m = 1, 2, ...):
//
//   [line: m, seq, count, collective, dtype, op | payload, up to capacity() bytes]
//
// The owner writes the call and its payload, then publishes m (release); a
// peer that reads m (acquire) reads the rest. Two mailboxes suffice with no
// acknowledgement: a rank in call m has read every peer's mailbox of call
// m - 1, so every peer has finished call m - 2, the last reader of the
// mailbox call m writes. Every rank folds the same inputs in the same order
// (rank 0's first), so every rank ends with the same bits.
//
// Against a one-shot through the slots this skips the messages' framing,
// a slot per peer, the executor's steps and a schedule: a 2-rank call is
// one line written and one read (docs/symmetric-memory.md#mailboxes-the-small-all-reduce).
//
// Mismatches: a peer in the same mailbox call with another sequence,
// collective, count, type or operation is a Mismatch. A peer that takes another path for the
// same call (a larger all-reduce, another collective) announces the call
// in its status line (announce()); a rank waiting for that peer's mailbox
// sees it there and fails with Mismatch instead of waiting until its
// deadline.
//
// Waiting spins, yields, then sleeps on the rank's doorbell
// (comm/node_wait.hpp, as for symmetric memory; with MailboxSetup::light
// the doorbell asks for light rings, and a call posts without a fence to
// peers whose doorbells do the same); it watches the awaited
// peer's connection (its death is PeerLost, its abort notice that error),
// the communicator's abort and the deadline, like the executor.
// One thread at a time calls it (the one running the communicator's calls).
#pragma once

#include <kizuna/types.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "algo/schedule.hpp"
#include "comm/executor.hpp"
#include "comm/history.hpp"
#include "comm/node_wait.hpp"
#include "transport/link.hpp"

namespace kizuna::comm {

struct MailboxSetup : NodeWait {
  std::vector<unsigned char*> regions;  // by rank, region_bytes() each
};

class Mailbox {
 public:
  using Clock = std::chrono::steady_clock;

  // The largest payload a mailbox holds.
  static constexpr std::size_t capacity() { return kCapacity; }
  // The bytes of each rank's region.
  static std::size_t region_bytes();

  explicit Mailbox(MailboxSetup setup);

  struct Call {
    algo::Collective what = algo::Collective::AllReduce;  // or Barrier, of no elements
    const void* input = nullptr;
    void* output = nullptr;  // may be input
    std::size_t count = 0;   // count * size_of(dtype) <= capacity()
    DataType dtype = DataType::Float32;
    ReduceOp op = ReduceOp::Sum;
    std::uint64_t seq = 0;
  };

  // Posts this rank's input, then waits for every peer's and folds them
  // into the output. Returns false, the call left half-done, when the peers
  // are not all there within `patience` (no sleeping then): run() again
  // with the same call finishes it. Throws Mismatch, PeerLost, Aborted, or
  // Timeout at the deadline.
  bool run(const Call& call, Clock::time_point deadline, const RunLabel& label, Clock::duration patience);

  // A collective taking another path: recorded where a peer waiting for
  // this rank's mailbox in the same call can see it (a store to this
  // rank's own line).
  void announce(std::uint64_t seq, std::uint32_t what, std::uint64_t count);

  // After run() failed: the peer whose death or abort notice ended it
  // (-1: none), and that notice, to pass on unchanged.
  int failed_peer() const { return failed_peer_; }
  const transport::AbortNotice* cause() const { return cause_ ? &*cause_ : nullptr; }

 private:
  static constexpr std::size_t kCapacity = 1024;
  struct Box;
  struct Status;

  Box& box(int rank, std::uint64_t m) const;
  Status& status(int rank) const;
  // Whether `peer` has posted mailbox call m_; Mismatch when it posted
  // another call as m_, or announced this call's sequence on another path.
  bool arrived(int peer, const Call& call, const RunLabel& label) const;
  // Throws when `peer` is dead, has failed or announced call `seq` on
  // another path, or when the communicator was aborted.
  void check_peer(int peer, std::uint64_t seq, const RunLabel& label);
  Doorbell doorbell(int rank) const;
  void fold(const Call& call) const;

  MailboxSetup setup_;
  std::uint64_t m_ = 0;         // this rank's last mailbox call
  bool posted_ = false;         // run() posted call m_ and has not finished it
  int next_peer_ = 0;           // the first peer not yet seen in call m_
  int failed_peer_ = -1;
  std::optional<transport::AbortNotice> cause_;
};

}  // namespace kizuna::comm
