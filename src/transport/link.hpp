// transport/link.hpp: one connection to one peer, as the executors see it.
//
// A Link carries ordered, reliable messages in both directions. It knows
// nothing of collectives: the executor posts sends and one receive at a time
// and drives progress() from its own thread; a Link never blocks and never
// spawns threads. That keeps the hot path free of thread hand-offs (which
// cost tens of microseconds each on this class of machine) and lets one
// loop progress every link at once.
//
// Sending: post_send() queues a message and returns its send number (1, 2,
// ...). The data must stay valid and unchanged until sent_count() reaches
// that number; sends complete in order.
//
// Receiving: post_recv() names where the next message goes (RecvSink: copy
// to dst, or dst = src op message) and what tag it must carry; recv_done()
// turns true once it has been delivered. A message whose tag or size differ
// is a Mismatch; a closed or reset connection is PeerLost naming the peer;
// an abort notice from the peer (it failed first) rethrows the peer's error.
//
// Waiting: when progress() moves nothing, the executor blocks in poll() on
// wait_fd()/wait_events() (or, for links without a file descriptor, spins
// and yields).
//
// Threading: a Link is used by one thread at a time (the communicator's
// executor); it is not thread-safe.
#pragma once

#include <kizuna/error.hpp>
#include <kizuna/types.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace kizuna::transport {

// Identifies a message within a communicator: the collective's sequence
// number, the message's index on this link within that collective, and a
// code for the call it belongs to (the communicator's; 0 for none), so that
// a message of another call is a Mismatch even where sequence, index and
// size agree.
struct MessageTag {
  std::uint64_t seq = 0;
  std::uint32_t index = 0;
  std::uint32_t call = 0;
  bool operator==(const MessageTag&) const = default;
};

// Where a received message goes: dst = message (src == nullptr), or
// dst = src op message (src may equal dst).
struct RecvSink {
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;
  DataType dtype = DataType::UInt8;
  ReduceOp op = ReduceOp::Sum;
};

// What a failing rank tells its peers, so that every rank fails with the
// original reason instead of a chain of "connection closed".
struct AbortNotice {
  int origin = -1;     // the rank that failed first
  int lost_rank = -1;  // the rank it lost, or -1
  ErrorCode code = ErrorCode::Aborted;
  std::string message;
};

// The error a notice stands for, as every rank that receives it raises it.
inline Error notice_error(const AbortNotice& notice) {
  return Error(notice.code, "rank " + std::to_string(notice.origin) + " failed: " + notice.message);
}

class Link {
 public:
  virtual ~Link() = default;

  int peer() const { return peer_; }

  virtual std::uint64_t post_send(const void* data, std::size_t bytes, const MessageTag& tag) = 0;
  virtual std::uint64_t sent_count() const = 0;
  bool send_idle() const { return sent_count() == posted_; }
  std::uint64_t posted_count() const { return posted_; }

  virtual void post_recv(const RecvSink& sink, const MessageTag& tag) = 0;
  virtual bool recv_done() const = 0;

  // Moves whatever can move without blocking; true if anything did.
  virtual bool progress() = 0;

  virtual int wait_fd() const = 0;
  virtual short wait_events() const = 0;
  // True for links that wake their owner through the shared-memory
  // doorbell instead of a descriptor (transport/shm).
  virtual bool uses_doorbell() const { return false; }
  // Doorbell links: look for the peer's death or abort notice now (the
  // executor calls it before sleeping). Throws like progress().
  virtual void check_peer() {}
  // Between calls (nothing posted): true when the peer's end has closed,
  // looked at without consuming anything, so a dead peer is seen while no
  // host collective runs (the communicator watches this way while device
  // calls are in flight). A peer that died with unread bytes on the way
  // is seen by the next receive instead.
  virtual bool peer_closed() { return false; }

  // Best effort, bounded by `grace`: flush pending sends, then deliver the
  // notice; if that cannot be done in time the connection is reset instead.
  virtual void send_abort(const AbortNotice& notice, std::chrono::milliseconds grace) = 0;

  // The notice this link received, once a receive has failed with it.
  const AbortNotice* received_abort() const { return received_abort_ ? &*received_abort_ : nullptr; }
  // The call code of the message that failed a receive with Mismatch when
  // that code was not the one expected, for the caller to name the call.
  std::optional<std::uint32_t> mismatched_call() const { return mismatched_call_; }

  // Stops the link for good: pending and later operations fail. Unlike the
  // rest of the interface, safe to call from any thread (abort() does).
  virtual void interrupt() = 0;

 protected:
  explicit Link(int peer) : peer_(peer) {}
  int peer_;
  std::uint64_t posted_ = 0;
  std::optional<AbortNotice> received_abort_;
  std::optional<std::uint32_t> mismatched_call_;

  // Throws Mismatch when `got` (a message of `got_bytes`) is not the
  // message `expected` (of `expected_bytes`), the same way on every link.
  void check_message(const MessageTag& got, std::uint64_t got_bytes, const MessageTag& expected,
                     std::uint64_t expected_bytes);
};

}  // namespace kizuna::transport
