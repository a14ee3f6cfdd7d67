// kernels/fifo_program.cuh: one rank's step table run over FIFO channels in
// memory that every rank maps (CUDA IPC on the GPU), for the CPU and the
// GPU alike.
//
// The CUDA IPC path runs a collective as one thread block per rank, all
// ranks at once, each walking its own step table (step_table.cuh) and
// passing messages through FIFOs instead of sockets. The protocol and the
// walk are here, as __host__ __device__ code over a `Sync` policy (how a
// block's threads meet and how flags are read and written), so the CPU
// unit tests run the very same code with one host thread per rank against
// the simulator; only the Sync policy and the kernel wrapper are GPU-only
// (fifo_kernel.cu).
//
// Channels. The directed channel s -> r has `slots` slots of `slot_bytes`
// and a `ready` word per slot in r's memory, and one `tail` word in s's
// (kernels/fifo_layout.hpp): each end waits on its own memory. A message of
// n elements travels as ceil(n / slot elements) chunks, each in the next
// slot; the sender fills the slot, then stores its chunk number (1, 2, ...,
// counted over the channel's whole life) in `ready` with release semantics;
// the receiver waits for that number (acquire), uses the chunk in place and
// then stores how many chunks it has released in `tail`, which the sender
// reads before reusing a slot. Both ends keep their chunk counts across
// calls in FifoCounters. An empty message sends nothing: both ends skip it,
// because both walk the same schedule.
//
// Batches. Where a message has several chunks left and the FIFO has room
// for them in consecutive slots (no wrap), one round moves up to
// fifo_batch_chunks() of them: the block fills them all, then thread 0
// makes them visible with one system-wide fence and stores their ready
// words (Sync::publish). A receiver likewise takes every consecutive chunk
// already published, up to the same bound, in one round and one credit.
// A fence to system scope waits for the block's writes to reach the peer,
// and a round costs two block barriers and thread 0's decision; batching
// pays both once per batch instead of once per slot. The bound is half the
// FIFO (rounded up), so that while the receiver works on one batch the
// sender fills the other half: the pipeline a slot at a time gave stays.
//
// The walk mirrors comm/executor.cpp: a Send step only queues the send,
// queued sends move chunk by chunk whenever their channel has room, and a
// step that writes a region a queued send still reads waits for that send
// first. The queue has room for every send of the table (the caller's
// `pending` array), so, as on the CPU, a Send step never waits, and every
// schedule the CPU executor runs deadlock-free runs here too, with any FIFO
// depth. (A bounded queue deadlocks a long ring: every rank stuck at a Send
// with its queue full, none reaching the receive that would drain it.) A receive with a send (RecvReduceSend,
// RecvCopySend) receives the whole message into its destination and then
// queues the send of that region.
//
// Each round, thread 0 finishes the last action (publishes the chunks,
// releases the slots, advances the walk) and decides the next one; all
// threads then run its elements; a barrier separates the rounds, so the
// block's writes to the slots come before thread 0 publishes them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/step_table.cuh"

namespace kizuna::kernels {

inline constexpr int kFifoMaxRanks = 64;

// A ready or credit word holding this says its writer aborted: a walk that
// reads it stops (Stopped) at once instead of at its deadline. No count of
// chunks reaches it.
inline constexpr std::uint64_t kFifoPoison = ~std::uint64_t{0};

// The directed channel from one rank to another, as the process at hand
// addresses it.
struct FifoChannel {
  unsigned char* data = nullptr;  // slots x slot_bytes, in the receiver's memory
  std::uint64_t* ready = nullptr; // [slots], in the receiver's memory
  std::uint64_t* tail = nullptr;  // released chunks, in the sender's memory
};

// Chunk counts of a rank's channels, kept across calls.
struct FifoCounters {
  std::uint64_t sent[kFifoMaxRanks];      // chunks published to each peer
  std::uint64_t received[kFifoMaxRanks];  // chunks released from each peer
};

// A queued send: a region of the rank's buffers, published chunk by chunk.
struct FifoSend {
  const void* src;       // the region's first element
  std::uint64_t count;   // elements
  std::uint64_t done;    // elements published
  int peer;
};

// What one rank's walk needs. `in[p]` is the channel p -> rank, `out[p]`
// rank -> p; both arrays have `world` entries (the rank's own unused).
// `pending` has room for one entry per step of the table.
struct FifoProgram {
  const DeviceStep* steps = nullptr;
  std::uint32_t step_count = 0;
  int rank = 0;
  int world = 1;
  std::uint32_t slots = 0;
  std::uint32_t slot_bytes = 0;  // a multiple of 16
  const FifoChannel* in = nullptr;
  const FifoChannel* out = nullptr;
  FifoCounters* counters = nullptr;
  FifoSend* pending = nullptr;
};

// These cross to the GPU (kernel parameters, device memory) as bytes.
static_assert(std::is_trivially_copyable_v<FifoChannel>);
static_assert(std::is_trivially_copyable_v<FifoCounters>);
static_assert(std::is_trivially_copyable_v<FifoSend>);
static_assert(std::is_trivially_copyable_v<FifoProgram>);

enum class FifoStatus : std::uint32_t { Running = 0, Done = 1, Stopped = 2 };

// The walk's state and the action of the round, shared by the block's
// threads (__shared__ on the GPU).
template <typename S>
struct FifoState {
  enum class Action : std::uint8_t { None, SendChunk, RecvChunk, Local, Finished, Stopped };
  // The walk (thread 0's).
  std::uint32_t step;
  std::uint64_t step_done;  // elements of the current receive step received
  // Queued sends: program.pending[first, end), in call order; the finished
  // ones (done == count) are skipped, and `first` moves past them.
  std::uint32_t first;
  std::uint32_t end;
  // The round's action, for every thread.
  Action action;
  DeviceStep work;  // run over elements [0, n) with in/out
  const S* in;
  S* out;
  std::uint64_t n;
  int peer;              // SendChunk, RecvChunk
  std::uint32_t chunks;  // SendChunk, RecvChunk: slots the round moves
  std::uint32_t sending; // SendChunk: its index in program.pending
};

// The most chunks one round moves over a channel: half the FIFO, rounded
// up (see "Batches" above).
KIZUNA_HD std::uint32_t fifo_batch_chunks(std::uint32_t slots) { return slots / 2 + slots % 2; }

namespace fifo_detail {

template <typename S>
KIZUNA_HD S* address(const StepBuffers<S>& b, DeviceBuffer which, std::uint64_t offset) {
  return b.buffer[static_cast<int>(which)] + offset;
}

template <typename S>
KIZUNA_HD bool overlaps(const S* a, std::uint64_t an, const S* b, std::uint64_t bn) {
  return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

// True when a queued send still reads some of [p, p + n).
template <typename S>
KIZUNA_HD bool region_busy(const FifoProgram& prog, const FifoState<S>& st, const S* p, std::uint64_t n) {
  for (std::uint32_t i = st.first; i < st.end; ++i) {
    const FifoSend& s = prog.pending[i];
    if (overlaps(static_cast<const S*>(s.src) + s.done, s.count - s.done, p, n)) return true;
  }
  return false;
}

template <typename S>
KIZUNA_HD void queue_send(const FifoProgram& prog, FifoState<S>& st, const S* src, std::uint64_t count, int peer) {
  prog.pending[st.end++] = FifoSend{src, count, 0, peer};
}

KIZUNA_HD std::uint64_t slot_elems(const FifoProgram& p, std::uint64_t elem) { return p.slot_bytes / elem; }

KIZUNA_HD std::uint64_t least(std::uint64_t a, std::uint64_t b) { return a < b ? a : b; }

// Thread 0: the next action, waiting (through sync.keep_waiting()) while
// nothing can move.
template <typename S, typename Sync>
KIZUNA_HD void decide(const FifoProgram& p, const StepBuffers<S>& b, FifoState<S>& st, Sync& sync) {
  using Action = typename FifoState<S>::Action;
  const std::uint64_t chunk = slot_elems(p, sizeof(S));
  for (bool moved = false;; moved = false) {
    // Queued sends, the first to each peer only (a channel is in order).
    bool peer_seen[kFifoMaxRanks] = {};
    for (std::uint32_t i = st.first; i < st.end; ++i) {
      const FifoSend& s = p.pending[i];
      if (s.done == s.count || peer_seen[s.peer]) continue;
      peer_seen[s.peer] = true;
      const std::uint64_t sent = p.counters->sent[s.peer];
      const FifoChannel& ch = p.out[s.peer];
      const std::uint64_t released = sync.load_acquire(ch.tail);
      if (released == kFifoPoison) {
        st.action = Action::Stopped;
        return;
      }
      if (sent - released >= p.slots) continue;  // no room yet
      // Free slots from the next one to the FIFO's end, chunks left.
      const std::uint64_t at = sent % p.slots;
      const std::uint64_t left = s.count - s.done;
      const std::uint64_t room = p.slots - (sent - released);
      const std::uint64_t chunks =
          least(least(room, p.slots - at), least(fifo_batch_chunks(p.slots), (left + chunk - 1) / chunk));
      st.action = Action::SendChunk;
      st.work = DeviceStep{};
      st.work.op = DeviceOp::Send;
      st.in = nullptr;
      st.out = reinterpret_cast<S*>(ch.data + at * p.slot_bytes);
      st.n = least(left, chunks * chunk);
      st.chunks = static_cast<std::uint32_t>(chunks);
      st.peer = s.peer;
      st.sending = i;
      return;
    }
    // The current step.
    while (st.step < p.step_count) {
      const DeviceStep& s = p.steps[st.step];
      if (s.count == 0) {  // nothing to move, and no message: the peer skips it too
        ++st.step;
        moved = true;
        continue;
      }
      if (s.op == DeviceOp::Send) {
        queue_send(p, st, static_cast<const S*>(address(b, s.src, s.src_offset)), s.count, s.send_peer);
        ++st.step;
        moved = true;
        continue;
      }
      S* dst = address(b, s.dst, s.dst_offset);
      // A copy onto itself (in place: an all-gather's own block, a
      // reduce-scatter's) moves nothing; waiting for the sends that read
      // it would wait for the peers' receives that come after it.
      if (s.op == DeviceOp::Copy && address(b, s.src, s.src_offset) == dst) {
        ++st.step;
        moved = true;
        continue;
      }
      if (region_busy(p, st, dst, s.count)) break;
      if (s.op == DeviceOp::Copy || s.op == DeviceOp::LocalReduce) {
        st.action = Action::Local;
        st.work = s;
        st.in = nullptr;
        st.out = nullptr;
        st.n = s.count;
        return;
      }
      // A receive: its next chunks, those published in consecutive slots.
      const std::uint64_t got = p.counters->received[s.recv_peer];
      const FifoChannel& ch = p.in[s.recv_peer];
      const std::uint64_t at = got % p.slots;
      const std::uint64_t left = s.count - st.step_done;
      const std::uint64_t most = least(least(p.slots - at, fifo_batch_chunks(p.slots)), (left + chunk - 1) / chunk);
      std::uint64_t chunks = 0;
      for (; chunks < most; ++chunks) {
        const std::uint64_t published = sync.load_acquire(ch.ready + at + chunks);
        if (published == kFifoPoison) {
          st.action = Action::Stopped;
          return;
        }
        if (published != got + chunks + 1) break;
      }
      if (chunks == 0) break;
      const std::uint64_t n = least(left, chunks * chunk);
      st.action = Action::RecvChunk;
      st.work = s;
      st.work.op = s.op == DeviceOp::RecvReduceSend ? DeviceOp::RecvReduce
                   : s.op == DeviceOp::RecvCopySend ? DeviceOp::Recv
                                                    : s.op;
      st.work.src_offset += st.step_done;
      st.work.dst_offset += st.step_done;
      st.work.count = n;
      st.in = reinterpret_cast<const S*>(ch.data + at * p.slot_bytes);
      st.out = nullptr;
      st.n = n;
      st.chunks = static_cast<std::uint32_t>(chunks);
      st.peer = s.recv_peer;
      return;
    }
    if (st.step == p.step_count && st.first == st.end) {
      st.action = Action::Finished;
      return;
    }
    if (!moved && !sync.keep_waiting()) {
      st.action = Action::Stopped;
      return;
    }
  }
}

// Thread 0, after every thread has run the action's elements.
template <typename S, typename Sync>
KIZUNA_HD void finish(const FifoProgram& p, const StepBuffers<S>& b, FifoState<S>& st, Sync& sync) {
  using Action = typename FifoState<S>::Action;
  switch (st.action) {
    case Action::SendChunk: {
      FifoSend& s = p.pending[st.sending];
      std::uint64_t& sent = p.counters->sent[st.peer];
      const FifoChannel& ch = p.out[st.peer];
      sync.publish(ch.ready + sent % p.slots, sent + 1, st.chunks);
      sent += st.chunks;
      s.done += st.n;
      while (st.first < st.end && p.pending[st.first].done == p.pending[st.first].count) ++st.first;
      break;
    }
    case Action::RecvChunk: {
      std::uint64_t& got = p.counters->received[st.peer];
      got += st.chunks;
      sync.store_release(p.in[st.peer].tail, got);
      st.step_done += st.n;
      const DeviceStep& s = p.steps[st.step];
      if (st.step_done == s.count) {
        if (step_sends(s.op)) queue_send(p, st, static_cast<const S*>(address(b, s.dst, s.dst_offset)), s.count, s.send_peer);
        st.step_done = 0;
        ++st.step;
      }
      break;
    }
    case Action::Local: ++st.step; break;
    default: break;
  }
}

}  // namespace fifo_detail

// Runs the program to its end (Done) or until sync.keep_waiting() gives up
// (Stopped: the channels are then in an unknown state). Every thread of the
// block calls it with the same `st` (shared); the Sync policy provides:
//   int thread(), threads()            this thread's index, the block's size
//   void barrier()                     all threads meet; memory is ordered
//   std::uint64_t load_acquire(const std::uint64_t*)   (system scope)
//   void store_release(std::uint64_t*, std::uint64_t)  (system scope)
//   void publish(std::uint64_t* w, std::uint64_t v, std::uint32_t k)
//                                      w[i] = v + i for i < k, each store
//                                      a release of every write before it
//                                      (one fence for all, system scope)
//   bool keep_waiting()                thread 0, when nothing can move:
//                                      false to stop (deadline, abort)
//   void progressed()                  thread 0, each time something can
//                                      move: the deadline is a time
//                                      without progress, counted anew
template <typename Codec, typename Op, typename Sync>
KIZUNA_HD FifoStatus run_fifo_program(const FifoProgram& p, const StepBuffers<typename Codec::Storage>& b,
                                      FifoState<typename Codec::Storage>& st, Sync& sync) {
  using S = typename Codec::Storage;
  using Action = typename FifoState<S>::Action;
  // Elements per 16 bytes: a pack, one vector load or store.
  constexpr std::uint64_t kGroup = 16 / sizeof(S) > 0 ? 16 / sizeof(S) : 1;
  // Packs a thread moves per turn, all loaded before any is stored: one
  // load in flight per thread leaves a block at a few GB/s, latency-bound.
  constexpr int kUnroll = 4;
  if (sync.thread() == 0) {
    st.step = 0;
    st.step_done = 0;
    st.first = 0;
    st.end = 0;
    st.action = Action::None;
  }
  for (;;) {
    if (sync.thread() == 0) {
      fifo_detail::finish(p, b, st, sync);
      fifo_detail::decide(p, b, st, sync);
      sync.progressed();
    }
    sync.barrier();
    const Action action = st.action;
    if (action == Action::Finished) return FifoStatus::Done;
    if (action == Action::Stopped) return FifoStatus::Stopped;
    const std::uint64_t n = st.n;
    const std::uint64_t threads = static_cast<std::uint64_t>(sync.threads());
    const std::uint64_t me = static_cast<std::uint64_t>(sync.thread());
    StepStreams<S> streams;
    if (action == Action::SendChunk) {
      const FifoSend& s = p.pending[st.sending];
      streams = {static_cast<const S*>(s.src) + s.done, nullptr, st.out, nullptr};
    } else {
      streams = step_streams(st.work, b, st.in, st.out);
    }
    if (packs_aligned(streams)) {
      // Whole packs, threads side by side (coalesced), then the tail.
      const std::uint64_t groups = n / kGroup;
      for (std::uint64_t g = me; g < groups; g += threads * kUnroll)
        run_packs<Codec, Op, kUnroll>(streams, g, threads, groups);
      for (std::uint64_t i = groups * kGroup + me; i < n; i += threads) run_streams<Codec, Op>(streams, i, i + 1);
    } else {
      const std::uint64_t stride = threads * kGroup;
      for (std::uint64_t i = me * kGroup; i < n; i += stride)
        run_streams<Codec, Op>(streams, i, i + kGroup < n ? i + kGroup : n);
    }
    sync.barrier();
  }
}

}  // namespace kizuna::kernels
