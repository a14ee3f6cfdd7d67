#include "comm/mailbox.hpp"

#include <cstddef>
#include <cstring>

#include "algo/schedule.hpp"
#include "core/check.hpp"
#include "core/reduce.hpp"

namespace kizuna::comm {

// What a peer waiting for this rank reads besides its mailboxes: the call
// it announced on another path, and its doorbell (each on its own line:
// the first is written per call, the second read per call by every peer).
struct Mailbox::Status {
  alignas(64) std::atomic<std::uint64_t> announced;  // seq + 1 of the call; 0: none yet
  std::atomic<std::uint64_t> count;
  std::atomic<std::uint32_t> what;  // an algo::Collective
  alignas(64) std::atomic<std::uint32_t> doorbell;
  std::atomic<std::uint32_t> sleeping;
  std::atomic<std::uint32_t> light_ring;  // see comm/node_wait.hpp
};

struct Mailbox::Box {
  alignas(64) std::atomic<std::uint64_t> m;  // the mailbox call it holds; published last
  std::uint64_t seq;
  std::uint64_t count;
  std::uint8_t what;  // an algo::Collective: an all-reduce, or a barrier
  std::uint8_t dtype;
  std::uint8_t op;
  std::uint8_t unused[5];
  unsigned char payload[kCapacity];  // from byte 32: its first 32 bytes share m's line
};

// The payload bytes in a mailbox's first line, with its call.
constexpr std::size_t kPayloadInLine = 32;


std::size_t Mailbox::region_bytes() {
  static_assert(offsetof(Box, payload) == 32);
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
  return sizeof(Status) + 2 * sizeof(Box);
}

Mailbox::Mailbox(MailboxSetup setup) : setup_(std::move(setup)) {
  KIZUNA_CHECK(static_cast<int>(setup_.regions.size()) == setup_.world, "mailbox: ", setup_.regions.size(),
               " regions for ", setup_.world, " ranks");
  // Set once, before this rank first sleeps; a peer that reads it unset
  // fences, which is always safe.
  status(setup_.rank).light_ring.store(setup_.light ? 1 : 0, std::memory_order_relaxed);
}

inline Doorbell Mailbox::doorbell(int rank) const {
  Status& s = status(rank);
  return {s.doorbell, s.sleeping, &s.light_ring};
}

inline Mailbox::Status& Mailbox::status(int rank) const {
  return *reinterpret_cast<Status*>(setup_.regions[rank]);
}

inline Mailbox::Box& Mailbox::box(int rank, std::uint64_t m) const {
  return reinterpret_cast<Box*>(setup_.regions[rank] + sizeof(Status))[m % 2];
}

void Mailbox::announce(std::uint64_t seq, std::uint32_t what, std::uint64_t count) {
  Status& mine = status(setup_.rank);
  mine.what.store(what, std::memory_order_relaxed);
  mine.count.store(count, std::memory_order_relaxed);
  mine.announced.store(seq + 1, std::memory_order_release);
}

bool Mailbox::arrived(int peer, const Call& call, const RunLabel& label) const {
  const Box& b = box(peer, m_);
  const std::uint64_t m = b.m.load(std::memory_order_acquire);
  if (m == m_) {
    if (b.seq != call.seq || b.what != static_cast<std::uint8_t>(call.what) || b.count != call.count ||
        b.dtype != static_cast<std::uint8_t>(call.dtype) || b.op != static_cast<std::uint8_t>(call.op))
      KIZUNA_THROW(ErrorCode::Mismatch, label.str(), ": rank ", peer, " is in call #", b.seq, " (",
                   algo::name(static_cast<algo::Collective>(b.what)), " of ", b.count, " ",
                   name(static_cast<DataType>(b.dtype)), ", ", name(static_cast<ReduceOp>(b.op)),
                   ") where this rank is in #", call.seq, " (", algo::name(call.what), " of ", call.count, " ",
                   name(call.dtype), ", ", name(call.op), ")");
    return true;
  }
  if (m > m_)
    KIZUNA_THROW(ErrorCode::Mismatch, label.str(), ": rank ", peer, " has made ", m,
                 " calls through the mailboxes where this rank has made ", m_,
                 " (do the ranks set KIZUNA_MAILBOX_UPTO alike?)");
  return false;
}

void Mailbox::check_peer(int peer, std::uint64_t seq, const RunLabel& label) {
  check_not_aborted(setup_, label);
  // Another path for this call is a Mismatch, named by what it announced.
  const Status& s = status(peer);
  if (s.announced.load(std::memory_order_acquire) == seq + 1) {
    const auto what = static_cast<algo::Collective>(s.what.load(std::memory_order_relaxed));
    KIZUNA_THROW(ErrorCode::Mismatch, label.str(), ": rank ", peer, " is in call #", seq, " as ",
                 algo::name(what), " of ", s.count.load(std::memory_order_relaxed),
                 " elements, not through the mailboxes (another collective or size, or KIZUNA_MAILBOX_UPTO set "
                 "differently)");
  }
  if (!peer_closed(setup_, peer, failed_peer_, cause_)) return;
  // A peer that posted its box for this call and then closed has left
  // after its last call (its region stays mapped here): not a failure.
  if (box(peer, m_).m.load(std::memory_order_acquire) == m_) {
    failed_peer_ = -1;
    return;
  }
  KIZUNA_THROW(ErrorCode::PeerLost, "lost rank ", peer, ": its connection closed in ", label.str());
}

void Mailbox::fold(const Call& call) const {
  const int world = setup_.world;
  if (call.count == 0) return;  // a barrier
  core::reduce_into(call.output, box(0, m_).payload, box(1, m_).payload, call.count, call.dtype, call.op);
  for (int r = 2; r < world; ++r) core::reduce(call.output, box(r, m_).payload, call.count, call.dtype, call.op);
}

bool Mailbox::run(const Call& call, Clock::time_point deadline, const RunLabel& label, Clock::duration patience) {
  const int rank = setup_.rank, world = setup_.world;
  const std::size_t bytes = call.count * size_of(call.dtype);
  if (!posted_) {
    KIZUNA_CHECK(bytes <= kCapacity, "mailbox: ", bytes, " bytes do not fit in ", kCapacity);
    ++m_;
    Box& mine = box(rank, m_);
    mine.seq = call.seq;
    mine.count = call.count;
    mine.what = static_cast<std::uint8_t>(call.what);
    mine.dtype = static_cast<std::uint8_t>(call.dtype);
    mine.op = static_cast<std::uint8_t>(call.op);
    if (bytes > 0) std::memcpy(mine.payload, call.input, bytes);
    mine.m.store(m_, std::memory_order_release);
    posted_ = true;
    next_peer_ = 0;
    failed_peer_ = -1;
    cause_.reset();
    ring_sleepers(setup_, [&](int r) { return doorbell(r); });
  }
  for (; next_peer_ < world; ++next_peer_) {
    const int peer = next_peer_;
    if (peer == rank) continue;
    if (!wait_for_peer(
            setup_, doorbell(rank), peer, deadline, patience, label, [&] { return arrived(peer, call, label); },
            [&] { check_peer(peer, call.seq, label); }))
      return false;  // a caller that must not be held: a later run() goes on from this peer
    // Its payload's further lines, all at once rather than one by one as
    // the fold reaches them.
    const unsigned char* payload = box(peer, m_).payload;
    for (std::size_t at = kPayloadInLine; at < bytes; at += 64) __builtin_prefetch(payload + at);
  }
  // This rank's next mailbox, past its first line (which a peer already in
  // the next call polls): every peer has read it, as they have all posted
  // call m_ after finishing m_ - 1, so its lines can be taken for writing
  // now instead of one by one under the next call's stores.
  unsigned char* next = box(rank, m_ + 1).payload;
  for (std::size_t at = kPayloadInLine; at < bytes; at += 64) __builtin_prefetch(next + at, 1);
  fold(call);
  posted_ = false;
  return true;
}

}  // namespace kizuna::comm
