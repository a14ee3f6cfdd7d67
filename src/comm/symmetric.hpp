// comm/symmetric.hpp: symmetric memory (NCCL's registered user buffers,
// PyTorch's SymmetricMemory), and the all-reduce that runs on it.
//
// allocate() is collective over a communicator whose ranks all share one
// node through shared memory. Every rank creates a region of the same size
// (transport/shm/region.hpp), publishes its name in the store, maps every
// peer's, and unlinks its own once all have mapped it. If any rank cannot
// (a full /dev/shm, a pair joined by TCP, a size that differs) or one
// gives up waiting, allocate() returns nullptr on all of them alike: the
// outcome is one store key every rank adopts.
//
// all_reduce() on such memory reads the peers' buffers in place instead of
// passing messages through slots: reduce-scatter, each rank folding its
// chunk of every rank's input into its own output, then all-gather, each
// copying the peers' reduced chunks out of their outputs. Per rank of two
// that reads and writes 5 half-buffers of memory, against 7 for a ring that
// reads its peer's private buffer (Open MPI's CMA) and 9 for kizuna's slots
// (docs/symmetric-memory.md#why-the-bytes-each-rank-moves). Three meetings order it: all inputs ready, all
// chunks reduced, all copies done (after which a buffer may change again).
// At the first, each rank checks its peers' calls (sequence, count, type,
// operation) and fails with Mismatch where they differ.
//
// all_reduce_staged() runs the same algorithm on private buffers through a
// staging area every rank allocates at creation (allocate_staging()): in
// rounds of half the area, a rank copies the chunks its peers fold into
// its half (meeting 1), folds its own chunk from its input and the peers'
// halves into its output and its half (meeting 2), and copies the peers'
// reduced chunks out of their halves. Rounds alternate halves, so a third
// meeting is not needed: a rank writes a half again two rounds later,
// after every peer has passed the round between's first meeting, and so
// has finished reading it. Per rank of two it moves 8 half-buffers against
// the slots' 9, in two meetings per round where a ring waits on every
// slot, and what a round stages stays in the caches while it is read.
//
// What either path writes for its peers to read (the staging memory, an
// output's reduced chunks) goes out with ordinary stores, or with
// streaming ones when the ranks' cores sit in different cache domains:
// see Stores below.
//
// Waiting spins, yields, then sleeps on the rank's doorbell, like the
// executor (comm/node_wait.hpp, as for the mailboxes); it watches the
// awaited peer's connection (its death is PeerLost, its abort notice that
// error) and the communicator's abort, and ends in Timeout at the
// deadline. Every rank must make the same calls on symmetric memory: a
// rank that passes ordinary memory where its peers pass symmetric memory
// takes the staged path, and all fail with Mismatch at the first meeting,
// when the call is large enough for it; otherwise it goes through the
// slots and leaves them waiting until their deadline.
//
// The registry is thread-safe (allocations come from callers' threads,
// calls from the communicator's worker); all_reduce() runs on one thread
// at a time.
#pragma once

#include <kizuna/store.hpp>
#include <kizuna/types.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/executor.hpp"
#include "comm/history.hpp"
#include "comm/node_wait.hpp"
#include "comm/placement_probe.hpp"
#include "core/env.hpp"
#include "transport/link.hpp"
#include "transport/shm/region.hpp"

namespace kizuna::comm {

struct SymmetricSetup : NodeWait {
  Store* store = nullptr;
  std::string prefix;  // store keys go under prefix + "/symmetric/"
  std::uint64_t comm_id = 0;
  // The probe's cadence and the outputs' streaming stores, from the
  // communicator's tuning (docs/tuning.md#probe-cadence,
  // docs/tuning.md#streaming-stores).
  std::uint64_t probe_every_calls = 64;
  std::uint64_t probe_every_bytes = 32 << 20;
  std::uint64_t stream_output_from = 8 << 20;
  std::uint64_t stream_out_of_place_from = 2 << 20;
};

class SymmetricMemory {
 public:
  using Clock = std::chrono::steady_clock;

  explicit SymmetricMemory(SymmetricSetup setup);
  ~SymmetricMemory();

  // Collective: `bytes` (the same on every rank) of memory every rank can
  // read; this rank's part, or nullptr on every rank when one could not.
  // It stays mapped while the returned pointer or a call on it lives.
  std::shared_ptr<void> allocate(std::size_t bytes, Clock::time_point deadline);
  // Collective, like allocate(), for the communicator's own use (the
  // mailboxes of comm/mailbox.hpp): every rank's part, by rank, mapped
  // while `keep` lives and never found by pin(); empty on every rank when
  // one could not.
  std::vector<unsigned char*> allocate_internal(std::size_t bytes, Clock::time_point deadline,
                                                std::shared_ptr<void>& keep);

  // How all_reduce() and all_reduce_staged() write what peers read (the
  // staging memory, and a symmetric output's chunks): with ordinary stores,
  // left in this rank's caches (Cache); with streaming stores, past them
  // into memory (Stream, core/stream_copy.hpp), which peers in another
  // cache domain read faster; or as a probe says (Auto): at the first two
  // calls of the two, and every 64th after, or sooner once 32 MiB have gone
  // through them (every rank alike), every rank holds one more meeting and
  // bounces a cache line with a rank on another CPU
  // (comm/placement_probe.hpp), and streams while the CPUs are far apart.
  // Whatever it is, a large call's output (8 MiB, 2 MiB out of place) is
  // written with streaming stores.
  using Stores = core::StagedStores;
  // Collective, at creation: `bytes` of staging memory per rank for
  // all_reduce_staged(); false on every rank when one could not, or when
  // one asks for none (bytes 0). `stores` is this rank's own choice, for
  // both paths; under Auto, `stream_until_probed` is what it does until a
  // probe tells (the communicator: stream with more ranks than cores,
  // where a probe may find no two ranks running at once).
  bool allocate_staging(std::size_t bytes, Stores stores, bool stream_until_probed, Clock::time_point deadline);
  // Under Auto, every probe that tells also sets `*far` (true: far apart),
  // for the slots (transport/shm/shm_link.hpp); it must outlive this.
  void report_placement_to(std::atomic<bool>* far) { placement_out_ = far; }
  // Before a collective of `bytes` through the slots (every rank calls it
  // for the same calls, in order): holds the probe when one is due, else
  // counts the bytes towards the next (32 MiB; the slots' calls do not
  // count towards the 64 calls, so that runs of small ones never probe
  // after the first two).
  void before_slot_call(std::uint64_t bytes, std::uint64_t seq, Clock::time_point deadline, const RunLabel& label);
  // Whether before_slot_call holds a probe at the next call: that call
  // meets every peer, and may sleep until they come.
  bool slot_call_probes() const { return ready_.load(std::memory_order_acquire) && probe_due_; }
  bool staging() const { return staging_ != nullptr; }
  // Whether the next staged call writes with streaming stores (as the
  // last probe decided, under Auto).
  bool streaming() const { return streaming_; }
  // Where the CPUs are, as every rank agrees: rank 0's verdict from the
  // probe before last (whatever its Stores), which it hands to every rank
  // at the last probe's meeting. Unknown until rank 0 has one. It changes
  // only within a probe, which every rank holds at the same call, so
  // every rank reads the same value for the same call: a choice of path
  // may depend on it.
  Placement agreed_placement() const { return agreed_; }
  // For tests: every rank's verdict of each probe is judge(its rank, the
  // probe's number from 1) instead of its bounce's; nullptr restores the
  // bounce. Process-wide.
  using ProbeJudge = Placement (*)(int rank, std::uint64_t probe);
  static void judge_probes_for_tests(ProbeJudge judge);
  // How many meetings the next all_reduce_staged() holds for `bytes`, and
  // the next all_reduce() (their steps).
  std::uint32_t staged_meetings(std::size_t bytes, std::size_t elem) const;
  std::uint32_t symmetric_meetings() const;

  // Whether any allocation for the user has been made (cheap: for the hot
  // path).
  bool any() const { return user_ready_.load(std::memory_order_acquire); }
  // The allocation holding [p, p + bytes), kept mapped while the handle
  // lives (a queued call holds its buffers' so); null when none does.
  std::shared_ptr<const void> pin(const void* p, std::size_t bytes) const;
  // Whether an allocation holds [p, p + bytes), without keeping it mapped.
  // It is asked at every small call on symmetric memory (try_small), so it
  // first looks at the allocations this thread last found here, without
  // the lock: a job's calls keep to a few buffers.
  bool holds(const void* p, std::size_t bytes) const;

  struct Call {
    const void* input = nullptr;
    void* output = nullptr;
    std::size_t count = 0;
    DataType dtype = DataType::Float32;
    ReduceOp op = ReduceOp::Sum;
    std::uint64_t seq = 0;
  };
  // The all-reduce, when both buffers are symmetric (input == output, or
  // not overlapping): false, having done nothing, when they are not.
  bool all_reduce(const Call& call, Clock::time_point deadline, const RunLabel& label);
  // The all-reduce of private buffers (input == output, or not
  // overlapping) through the staging memory, which must be there.
  void all_reduce_staged(const Call& call, Clock::time_point deadline, const RunLabel& label);

  // After all_reduce() failed: the peer whose death or abort notice ended
  // it (-1: none), and that notice, to pass on unchanged.
  int failed_peer() const { return failed_peer_; }
  const transport::AbortNotice* cause() const { return cause_ ? &*cause_ : nullptr; }

 private:
  struct Allocation;
  struct Found {
    std::shared_ptr<Allocation> allocation;
    std::uint64_t offset = 0;
  };
  Found find(const void* p, std::size_t bytes) const;
  // allocate() and allocate_internal(): the allocation, registered for
  // pin() and the all-reduce when `for_user`; null on every rank when one
  // rank could not.
  // A rank that is not `able` (it asks for none) takes part and fails it.
  std::shared_ptr<Allocation> allocate_any(std::size_t bytes, Clock::time_point deadline, bool for_user,
                                           bool able = true);
  // allocate()'s rendezvous: the names, the mappings, then whether every
  // rank mapped everything. Throws Timeout at the deadline.
  bool exchange(const std::string& key, const std::string& mine, bool first, Allocation& allocation,
                std::vector<transport::shm::Region>& sync, Clock::time_point deadline);
  std::shared_ptr<Allocation> by_number(std::uint64_t number) const;
  // Advances this rank's phase and wakes sleeping peers.
  void arrive(std::uint64_t phase);
  Doorbell doorbell(int rank) const;
  // Until every peer has reached `phase`.
  void wait_for_all(std::uint64_t phase, Clock::time_point deadline, const RunLabel& label);
  // Throws when `peer` is dead or has failed (unless it reached `phase`
  // before it closed: it left after its last call) or when the
  // communicator was aborted.
  void check_peer(int peer, std::uint64_t phase, const RunLabel& label);
  // Every peer's call against this rank's; the peers' buffers.
  void check_calls(const transport::shm::RegionCall& mine, const RunLabel& label,
                   std::vector<const unsigned char*>& inputs, std::vector<const unsigned char*>& outputs,
                   std::vector<std::shared_ptr<Allocation>>& keep);
  // Every peer's call against this rank's, on the staged path.
  void check_staged_calls(const transport::shm::RegionCall& mine, const RunLabel& label) const;

  SymmetricSetup setup_;
  std::mutex allocate_mutex_;      // one allocation at a time
  std::uint64_t next_number_ = 1;  // allocation numbers, alike on every rank
  std::vector<transport::shm::Region> sync_;  // by rank: whose headers the meetings use
  std::atomic<bool> ready_{false};            // sync_ is set
  std::atomic<bool> user_ready_{false};       // and an allocate() has succeeded
  std::uint64_t phase_ = 0;
  std::shared_ptr<Allocation> staging_;  // null: no staged all-reduce
  std::uint64_t staged_rounds_ = 0;      // rounds run: which half is next
  // all_reduce() and all_reduce_staged() calls, and their bytes, since the
  // last probe; whether the next call probes.
  std::uint64_t calls_since_probe_ = 0;
  std::uint64_t bytes_since_probe_ = 0;
  bool probe_due_ = true;
  Stores stores_ = Stores::Cache;
  bool streaming_ = false;
  std::uint64_t probes_ = 0;  // probes held: each one's own ball values
  Placement own_ = Placement::Unknown;     // this rank's latest verdict that told
  Placement agreed_ = Placement::Unknown;  // see agreed_placement()
  std::atomic<bool>* placement_out_ = nullptr;
  std::vector<unsigned char> folded_;  // see fold_aside()
  // The block (kFoldBlockBytes) a fold goes into, in the first-level
  // cache, before it is streamed out.
  unsigned char* fold_aside();
  // Whether the next call probes: every rank does, whatever its Stores, so
  // that every rank holds the same meetings and has a partner; only Auto
  // acts on it.
  bool probes() const { return probe_due_; }
  // Counts `bytes` (and, `as_call`, one call) towards the next probe,
  // first starting the count afresh if this call is the one that probes.
  void count_towards_probe(std::uint64_t bytes, bool as_call);
  // Opens a call of `steps` meetings on `bytes`: counts it towards the
  // next probe (due after 64 calls, or sooner once 32 MiB have gone
  // through since the last, every rank alike), takes its
  // phases, clears the last failure, shows it to the stuck-rank report;
  // the function returned holds the next meeting each time it is called.
  auto open_call(std::uint64_t seq, std::uint32_t steps, std::uint64_t bytes, Clock::time_point deadline,
                 const RunLabel& label);
  // The probe: one meeting (`meet` holds it), then a bounce with this
  // rank's partner, if it has one, until `deadline` at the latest; under
  // Auto, sets streaming_ when the bounce tells.
  template <class Meet>
  void probe_placement(Meet&& meet, Clock::time_point deadline, const RunLabel& label);
  // Whether an all-reduce of `bytes` writes its output with streaming
  // stores (its own chunk, folded aside block by block, and the peers').
  bool streams_output(std::uint64_t bytes, bool in_place) const {
    return bytes >= (in_place ? setup_.stream_output_from : setup_.stream_out_of_place_from);
  }
  // memcpy, or core::stream_copy while streaming_: for what peers read.
  void copy_for_peers(void* to, const void* from, std::size_t bytes) const;
  int failed_peer_ = -1;
  std::optional<transport::AbortNotice> cause_;
  // This object's number, never another's (holds()'s hints name it: an
  // address may be reused).
  const std::uint64_t id_;
  mutable std::mutex mutex_;
  // The user's allocations by their address here, with their size: holds()
  // answers from it without taking a reference (docs/tuning.md#tuner: it is
  // asked on every small call on symmetric memory).
  struct Registered {
    std::weak_ptr<Allocation> allocation;
    std::size_t bytes = 0;
  };
  using ByAddress = std::map<std::uintptr_t, Registered>;
  ByAddress by_address_;
  // The entry whose allocation holds [at, at + bytes), live or not (end()
  // where none does); the caller holds mutex_.
  ByAddress::const_iterator registered(std::uintptr_t at, std::size_t bytes) const;
};

}  // namespace kizuna::comm
