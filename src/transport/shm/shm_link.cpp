#include "transport/shm/shm_link.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <deque>
#include <exception>

#include "core/asymmetric_fence.hpp"
#include "core/check.hpp"
#include "core/futex.hpp"
#include "core/reduce.hpp"
#include "core/stream_copy.hpp"

namespace kizuna::transport::shm {
namespace {

// How often an idle link looks at its control connection (a recvmsg, about
// a microsecond here: in a spin of tens of nanoseconds per look, every 256th
// look cost a 4-byte all-reduce 10% on average). Before sleeping the
// executor looks at every link's anyway (check_peer).
constexpr std::uint32_t kControlEvery = 4096;

// Rings `owner`'s doorbell if it sleeps. Pairs with doorbell_sleep: our
// channel update is ordered before this read of `sleeping`, its write of
// `sleeping` before its channel check, by a fence on each side or, where
// `light` (this process takes part in asymmetric fences) and the owner
// has set light_ring, by the owner's heavy fence alone.
void ring(SegmentHeader* owner, bool light) {
  if (light && owner->light_ring.load(std::memory_order_relaxed))
    core::light_fence();
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
  if (owner->sleeping.load(std::memory_order_relaxed)) {
    owner->doorbell.fetch_add(1, std::memory_order_relaxed);
    core::futex_wake(owner->doorbell, INT_MAX, core::FutexScope::Shared);
  }
}

// Messages up to this size have their payload prefetched while the
// receiver waits (2 ranks, 4 B .. 1 KiB, alternated: 64 B 0.75 -> 0.64 us
// per all-reduce, 256 B 0.81 -> 0.72; beyond it, the receiver's reads
// contend with the sender's writes: 1 KiB 1.0 -> 1.1 us).
constexpr std::size_t kPrefetchBytes = 512;

// Slot payloads from this size go out with streaming stores while the
// communicator says so (make_shm_link's `stream_stores`); smaller ones,
// where a message's latency counts more than its rate, never do.
constexpr std::size_t kStreamFrom = 16 << 10;

class ShmLink final : public Link {
 public:
  ShmLink(int peer, const Segment& mine, std::uint32_t peer_slot, const Segment& theirs,
          std::uint32_t my_slot, std::unique_ptr<Link> control, const std::atomic<bool>* stream_stores)
      : Link(peer),
        in_(mine.channel(peer_slot)),
        out_(theirs.channel(my_slot)),
        mine_(mine.header()),
        theirs_(theirs.header()),
        geometry_(mine.geometry()),
        peer_geometry_(theirs.geometry()),
        control_(std::move(control)),
        stream_stores_(stream_stores),
        light_(core::asymmetric_fence_available()) {
    // The slot counters start where the channel's tail is (0 in a fresh
    // segment; a test starts elsewhere to cross the wrap, which a
    // power-of-two slot count keeps in step). A slot's first number must
    // not be 0, which its flag holds before anything is published.
    in_tail_ = in_->tail.load(std::memory_order_relaxed);
    out_head_ = out_tail_cache_ = out_->tail.load(std::memory_order_relaxed);
    for (std::uint32_t s = 0; s < geometry_.slots; ++s) in_slots_.push_back(mine.slot(peer_slot, s));
    for (std::uint32_t s = 0; s < peer_geometry_.slots; ++s) out_slots_.push_back(theirs.slot(my_slot, s));
    warm_outbound();
    // The control connection carries no data: a receive that nothing
    // matches turns its end-of-file or an abort notice into an error.
    control_->post_recv({nullptr, nullptr, 0, DataType::UInt8, ReduceOp::Sum}, {~0ull, ~0u});
  }

  std::uint64_t post_send(const void* data, std::size_t bytes, const MessageTag& tag) override {
    check_open();
    if (gone_) {
      closed_.store(true);
      std::rethrow_exception(gone_);
    }
    sendq_.push_back({static_cast<const unsigned char*>(data), bytes, tag, 0, false});
    ++posted_;
    // A message that fits one slot goes out now, not at the caller's next
    // progress(): its receiver is most likely already waiting for it.
    if (sendq_.size() == 1 && bytes <= peer_geometry_.slot_bytes) progress_send();
    return posted_;
  }

  std::uint64_t sent_count() const override { return sent_; }

  void post_recv(const RecvSink& sink, const MessageTag& tag) override {
    check_open();
    sink_ = sink;
    expect_ = tag;
    received_ = 0;
    recv_active_ = true;
    recv_complete_ = false;
    started_ = false;
    if (gone_) check_control();  // only what the peer left in the ring can come
  }

  bool recv_done() const override { return recv_complete_; }

  bool progress() override {
    check_open();
    const bool moved = progress_send() | progress_recv();
    if (!moved && ++idle_ % kControlEvery == 0) check_control();
    return moved;
  }

  int wait_fd() const override { return -1; }
  short wait_events() const override { return 0; }
  bool uses_doorbell() const override { return true; }
  void check_peer() override { check_control(); }
  bool peer_closed() override {
    if (closed_.load()) return true;
    try {
      poll_control();
    } catch (const Error&) {
      return true;  // the peer's abort notice: it has failed
    }
    return gone_ != nullptr;
  }

  void send_abort(const AbortNotice& notice, std::chrono::milliseconds grace) override {
    closed_.store(true);
    control_->send_abort(notice, grace);
    ring(theirs_, false);
  }

  void interrupt() override {
    closed_.store(true);
    control_->interrupt();
    ring(mine_, false);
  }

 private:
  struct Pending {
    const unsigned char* data;
    std::size_t bytes;
    MessageTag tag;
    std::size_t done;  // payload bytes published
    bool started;      // at least one slot published (an empty message needs one)
  };

  // Touches, for writing, every page of the slots this link writes into
  // (the peer's segment), and reads the channel's tail: the first access
  // to a page from this process is slow (see Segment::create), so it is
  // paid here rather than by a collective. Only this link writes these
  // slots, and an atomic add of zero changes nothing a reader could see.
  void warm_outbound() {
    constexpr std::uintptr_t kPage = 4096;
    const std::size_t stride = sizeof(SlotHeader) + peer_geometry_.slot_bytes;
    for (unsigned char* slot : out_slots_) {
      const auto begin = reinterpret_cast<std::uintptr_t>(slot);
      for (std::uintptr_t a = (begin + kPage - 1) / kPage * kPage; a < begin + stride; a += kPage)
        std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(a)).fetch_add(0, std::memory_order_relaxed);
      std::atomic_ref<std::uint64_t>(reinterpret_cast<SlotHeader*>(slot)->seq).fetch_add(0, std::memory_order_relaxed);
    }
    (void)out_->tail.load(std::memory_order_relaxed);
  }

  // Progresses the control connection. An abort notice on it becomes this
  // link's error (and its notice this link's). Its end-of-file means the
  // peer has gone, which is an error only when this link still needs the
  // peer: a receive the ring cannot satisfy, or a send. A peer that leaves
  // after its last collective is no failure of ranks still finishing theirs.
  void check_control() {
    poll_control();
    if (!gone_) return;
    // What the peer published before leaving is visible now: read it first.
    progress_recv();
    if ((recv_active_ && !recv_complete_) || !sendq_.empty()) {
      closed_.store(true);
      std::rethrow_exception(gone_);
    }
  }

  // Progresses the control connection (its receive is always posted) and
  // keeps what it says: an abort notice becomes this link's, closes it and
  // is rethrown; its end-of-file is kept in gone_.
  void poll_control() {
    if (gone_) return;
    try {
      control_->progress();
    } catch (const Error&) {
      if (const AbortNotice* notice = control_->received_abort()) {
        received_abort_ = *notice;
        closed_.store(true);
        throw;
      }
      gone_ = std::current_exception();
    }
  }

  void check_open() {
    if (closed_.load(std::memory_order_relaxed)) {
      check_control();  // reports the peer's notice or end-of-file if there is one
      KIZUNA_THROW(ErrorCode::Aborted, "the link to rank ", peer_, " is closed");
    }
  }

  bool progress_send() {
    if (sendq_.empty()) return false;
    const std::uint32_t slots = peer_geometry_.slots;
    const std::size_t slot_bytes = peer_geometry_.slot_bytes;
    std::uint32_t head = out_head_;
    std::uint32_t published = 0;
    while (!sendq_.empty()) {
      if (head - out_tail_cache_ == slots) {
        out_tail_cache_ = out_->tail.load(std::memory_order_acquire);
        if (head - out_tail_cache_ == slots) break;  // the peer has not caught up
      }
      Pending& p = sendq_.front();
      unsigned char* slot = out_slots_[head & (slots - 1)];  // slots: a power of two
      auto* h = reinterpret_cast<SlotHeader*>(slot);
      const std::size_t n = std::min(slot_bytes, p.bytes - p.done);
      h->seq = p.tag.seq;
      h->index = p.tag.index;
      h->call = p.tag.call;
      h->slot_bytes = static_cast<std::uint32_t>(n);
      h->message_bytes = p.bytes;
      h->offset = p.done;
      // An empty message (data may be null) publishes a header and no bytes.
      if (n >= kStreamFrom && stream_stores_ != nullptr && stream_stores_->load(std::memory_order_relaxed))
        core::stream_copy(slot + sizeof(SlotHeader), p.data + p.done, n);  // fenced: before `ready`
      else if (n > 0)
        std::memcpy(n <= kInlineBytes ? h->inline_data : slot + sizeof(SlotHeader), p.data + p.done, n);
      ++head;
      std::atomic_ref<std::uint32_t>(h->ready).store(head, std::memory_order_release);
      p.done += n;
      ++published;
      if (p.done == p.bytes) {
        sendq_.pop_front();
        ++sent_;
      }
      if (published == slots / 2) {  // wake a sleeping receiver for a long message
        ring(theirs_, light_);
        published = 0;
      }
    }
    const bool moved = head != out_head_;
    if (published) ring(theirs_, light_);
    out_head_ = head;
    return moved;
  }

  bool progress_recv() {
    if (!recv_active_ || recv_complete_) return false;
    const std::uint32_t slots = geometry_.slots;
    bool moved = false;
    for (;;) {
      const unsigned char* slot = in_slots_[in_tail_ & (slots - 1)];  // a power of two: no division
      auto* h = reinterpret_cast<SlotHeader*>(const_cast<unsigned char*>(slot));
      if (std::atomic_ref<std::uint32_t>(h->ready).load(std::memory_order_acquire) != in_tail_ + 1) {
        // A small message's payload lines are asked for while the header
        // is awaited, so that they travel with it rather than after it.
        if (!started_ && sink_.bytes > kInlineBytes && sink_.bytes <= kPrefetchBytes) {
          const std::size_t first = std::min<std::size_t>(sink_.bytes, geometry_.slot_bytes);
          for (std::size_t at = 0; at < first; at += 64) __builtin_prefetch(slot + sizeof(SlotHeader) + at);
        }
        break;
      }
      if (!started_) {
        check_message({h->seq, h->index, h->call}, h->message_bytes, expect_, sink_.bytes);
        started_ = true;
      }
      if (h->offset != received_)
        KIZUNA_THROW(ErrorCode::Internal, "shared memory from rank ", peer_, ": slot at offset ",
                     h->offset, " where ", received_, " was expected");
      const std::size_t n = h->slot_bytes;
      if (n > geometry_.slot_bytes || n > sink_.bytes - received_)
        KIZUNA_THROW(ErrorCode::Internal, "shared memory from rank ", peer_, ": a slot of ", n,
                     " bytes at offset ", received_, " of a ", sink_.bytes, "-byte message (slots hold ",
                     geometry_.slot_bytes, ")");
      // A sender splits a message into full slots, whole cache lines
      // (Geometry::valid): an empty slot in a message that has bytes left
      // would never end it, a split inside an element would drop its bytes.
      if (n == 0 && sink_.bytes > 0)
        KIZUNA_THROW(ErrorCode::Internal, "shared memory from rank ", peer_, ": an empty slot at offset ",
                     received_, " of a ", sink_.bytes, "-byte message");
      if (sink_.src != nullptr && (n & (size_of(sink_.dtype) - 1)) != 0)
        KIZUNA_THROW(ErrorCode::Internal, "shared memory from rank ", peer_, ": a slot of ", n,
                     " bytes to reduce, not a whole number of ", name(sink_.dtype), " elements");
      const unsigned char* payload = n <= kInlineBytes ? h->inline_data : slot + sizeof(SlotHeader);
      if (n) {
        auto* dst = static_cast<unsigned char*>(sink_.dst) + received_;
        if (sink_.src == nullptr)
          std::memcpy(dst, payload, n);
        else
          core::reduce_into(dst, static_cast<const unsigned char*>(sink_.src) + received_, payload,
                            n / size_of(sink_.dtype), sink_.dtype, sink_.op);
      }
      received_ += n;
      ++in_tail_;
      in_->tail.store(in_tail_, std::memory_order_release);
      moved = true;
      if (received_ == sink_.bytes) {
        recv_complete_ = true;
        break;
      }
    }
    // A spinning sender sees each freed slot at once; one that sleeps is
    // woken once for all of them.
    if (moved) ring(theirs_, light_);
    return moved;
  }

  ChannelControl* in_;
  ChannelControl* out_;
  SegmentHeader* mine_;
  SegmentHeader* theirs_;
  Geometry geometry_;
  Geometry peer_geometry_;
  std::vector<unsigned char*> in_slots_;
  std::vector<unsigned char*> out_slots_;
  std::unique_ptr<Link> control_;
  const std::atomic<bool>* stream_stores_;  // null: ordinary stores always
  const bool light_;  // this process takes part in asymmetric fences (see ring)
  std::atomic<bool> closed_{false};
  std::exception_ptr gone_;  // the control connection's end, once seen
  std::uint32_t idle_ = 0;

  std::deque<Pending> sendq_;
  std::uint64_t sent_ = 0;
  std::uint32_t out_head_ = 0;
  std::uint32_t out_tail_cache_ = 0;

  bool recv_active_ = false;
  bool recv_complete_ = false;
  bool started_ = false;
  RecvSink sink_;
  MessageTag expect_;
  std::size_t received_ = 0;
  std::uint32_t in_tail_ = 0;
};

}  // namespace

std::unique_ptr<Link> make_shm_link(int peer, const Segment& mine, std::uint32_t peer_slot,
                                    const Segment& theirs, std::uint32_t my_slot,
                                    std::unique_ptr<Link> control, const std::atomic<bool>* stream_stores) {
  return std::make_unique<ShmLink>(peer, mine, peer_slot, theirs, my_slot, std::move(control), stream_stores);
}

bool doorbell_sleep(SegmentHeader* owner, const std::function<bool()>& progress,
                    std::chrono::microseconds timeout) {
  owner->sleeping.store(1, std::memory_order_relaxed);
  if (!core::fence_before_sleep(&owner->light_ring)) timeout = std::min(timeout, std::chrono::microseconds(1000));
  // Acquire: a peer's ring (fence, then the add) read here must not leave
  // progress() reading the channel as it was before it.
  const std::uint32_t bell = owner->doorbell.load(std::memory_order_acquire);
  struct Awake {  // also when progress() throws: peers would ring for nothing
    SegmentHeader* owner;
    ~Awake() { owner->sleeping.store(0, std::memory_order_relaxed); }
  } awake{owner};
  const bool moved = progress();
  if (!moved) core::futex_wait_for(owner->doorbell, bell, timeout, core::FutexScope::Shared);
  return moved;
}

bool use_light_ring(SegmentHeader* owner) {
  if (!core::asymmetric_fence_available()) return false;
  owner->light_ring.store(1, std::memory_order_relaxed);
  return true;
}

}  // namespace kizuna::transport::shm
