#include "comm/symmetric.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "comm/bootstrap.hpp"
#include "comm/placement_probe.hpp"
#include "core/check.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"
#include "core/stream_copy.hpp"
#include "transport/shm/segment.hpp"

namespace kizuna::comm {

using transport::shm::Region;
using transport::shm::RegionCall;
using transport::shm::RegionHeader;

// One allocation: every rank's region, this rank's own included (by rank).
struct SymmetricMemory::Allocation {
  std::uint64_t number = 0;
  std::uint64_t bytes = 0;
  std::vector<Region> regions;
};

namespace {

// The folds of phase 1 go block by block, so that the block being summed
// stays in the first-level caches while every rank's part is added to it.
constexpr std::size_t kFoldBlockBytes = 32 << 10;
// The probe of SymmetricMemory::Stores::Auto: the meeting after which
// every rank's CPU is known, and how long a pair may bounce the ball.
constexpr std::uint32_t kProbeMeetings = 1;
constexpr auto kProbeFor = std::chrono::microseconds(500);
// A staged call's RegionCall says so with this allocation number.
constexpr std::uint64_t kStagedCall = ~std::uint64_t{0};

// A name remove_stale_segments() recognises, distinct per allocation.
std::string region_name(std::uint64_t comm_id, std::uint64_t number, int rank,
                        std::chrono::steady_clock::time_point deadline) {
  const auto wall = std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline - std::chrono::steady_clock::now());
  return transport::shm::segment_name(static_cast<int>(::getpid()), comm_id + (number + 1) * 0x9e3779b97f4a7c15ull,
                                      rank, wall);
}

std::string text(const Bytes& b) { return std::string(b.begin(), b.end()); }

// memcpy, or core::stream_copy (past the caches) when `streaming`.
void copy_bytes(void* to, const void* from, std::size_t bytes, bool streaming) {
  if (streaming) core::stream_copy(to, from, bytes);
  else std::memcpy(to, from, bytes);
}

// Phase 1 of both all-reduces: folds bytes [begin, end) of the world's
// sources into `out`, rank order from this rank (`source(k)` is the base
// of rank + k's, k = 0 this rank's own), kFoldBlockBytes at a time, so
// that the block being summed stays in the first-level cache while every
// source is added to it. With `aside`, a block is folded there and
// streamed to `out`, no line of which is read. `then(at, folded, bytes)`
// sees each folded block.
template <class Source, class Then>
void fold_in_blocks(std::size_t begin, std::size_t end, int world, const Source& source, unsigned char* out,
                    unsigned char* aside, DataType dtype, ReduceOp op, const Then& then) {
  const std::size_t elem = size_of(dtype);
  const std::size_t block = kFoldBlockBytes / elem * elem;
  for (std::size_t at = begin; at < end; at += block) {
    const std::size_t n = std::min(block, end - at);
    unsigned char* to = aside ? aside : out + at;
    core::reduce_into(to, source(0) + at, source(1) + at, n / elem, dtype, op);
    for (int k = 2; k < world; ++k) core::reduce(to, source(k) + at, n / elem, dtype, op);
    then(at, to, n);
    if (aside) core::stream_copy(out + at, to, n);
  }
}

// Rank r's call `c` against this rank's: Mismatch naming both, on the path
// `where` says, when the sequence, count, type or operation differ.
void check_same_call(int r, const RegionCall& c, const RegionCall& mine, const char* where, const RunLabel& label) {
  if (c.seq != mine.seq || c.count != mine.count || c.dtype != mine.dtype || c.op != mine.op)
    KIZUNA_THROW(ErrorCode::Mismatch, label.str(), ": rank ", r, " is in call #", c.seq, " (", c.count, " of ",
                 name(static_cast<DataType>(c.dtype)), ", ", name(static_cast<ReduceOp>(c.op)), ") ", where,
                 " where this rank is in #", mine.seq, " (", mine.count, " of ",
                 name(static_cast<DataType>(mine.dtype)), ", ", name(static_cast<ReduceOp>(mine.op)), ")");
}

// A peer whose last call here is another one took another route for this
// call (it met only for a placement probe, say): another call altogether.
void check_same_seq(int r, const RegionCall& c, const RegionCall& mine, const RunLabel& label) {
  if (c.seq != mine.seq)
    KIZUNA_THROW(ErrorCode::Mismatch, label.str(), ": rank ", r, " is not in call #", mine.seq,
                 " on symmetric memory (its last call here is #", c.seq,
                 "): it made another call, which took another route");
}

// SymmetricMemory::id_: numbers from 1, so that a hint never set names none.
std::atomic<std::uint64_t> next_memory_id{1};

}  // namespace

SymmetricMemory::SymmetricMemory(SymmetricSetup setup)
    : setup_(std::move(setup)), id_(next_memory_id.fetch_add(1, std::memory_order_relaxed)) {}

SymmetricMemory::~SymmetricMemory() = default;

std::shared_ptr<void> SymmetricMemory::allocate(std::size_t bytes, Clock::time_point deadline) {
  std::shared_ptr<Allocation> allocation = allocate_any(bytes, deadline, true);
  if (!allocation) return nullptr;
  void* data = allocation->regions[setup_.rank].data();
  return std::shared_ptr<void>(std::move(allocation), data);
}

std::vector<unsigned char*> SymmetricMemory::allocate_internal(std::size_t bytes, Clock::time_point deadline,
                                                               std::shared_ptr<void>& keep) {
  std::shared_ptr<Allocation> allocation = allocate_any(bytes, deadline, false);
  if (!allocation) return {};
  std::vector<unsigned char*> parts;
  for (const Region& r : allocation->regions) parts.push_back(r.data());
  keep = std::move(allocation);
  return parts;
}

std::shared_ptr<SymmetricMemory::Allocation> SymmetricMemory::allocate_any(std::size_t bytes,
                                                                           Clock::time_point deadline,
                                                                           bool for_user, bool able) {
  std::lock_guard serial(allocate_mutex_);
  const int rank = setup_.rank, world = setup_.world;
  const bool first = sync_.empty();
  const std::uint64_t number = next_number_++;
  const std::string key = setup_.prefix + "/symmetric/" + std::to_string(number) + "/";
  // Every rank joined by shared memory (its links say so), or none: a
  // rank that cannot take part says "-" and every rank sees it.
  for (int r = 0; r < world; ++r)
    if (r != rank && (setup_.links.at(r) == nullptr || !setup_.links[r]->uses_doorbell())) able = false;
  auto allocation = std::make_shared<Allocation>();
  allocation->number = number;
  allocation->bytes = bytes;
  allocation->regions.resize(world);
  std::vector<Region> sync(first ? world : 0);
  std::string mine = "-";
  if (able) {
    try {
      allocation->regions[rank] = Region::create(region_name(setup_.comm_id, number, rank, deadline), bytes,
                                                 setup_.comm_id, rank, number);
      mine = allocation->regions[rank].name();
      if (first) {
        sync[rank] = Region::create(region_name(setup_.comm_id, 0, rank, deadline), 0, setup_.comm_id, rank, 0);
        mine += " " + sync[rank].name();
      }
    } catch (const Error& e) {
      KIZUNA_LOG(Warn) << "rank " << rank << ": symmetric memory of " << bytes << " bytes: " << e.what();
      mine = "-";
    }
  }
  setup_.store->set(key + std::to_string(rank), mine);
  // The outcome is one key that every rank adopts: "1" once a rank has
  // seen every rank map everything, "0" once a rank has seen one fail, or
  // has given up waiting. So a rank that times out never lets go of memory
  // its peers keep, nor the other way round.
  auto decide = [&](bool success) {
    const Bytes mark{static_cast<std::uint8_t>(success ? '1' : '0')};
    return text(setup_.store->compare_set(key + "decision", {}, mark)) == "1";
  };
  bool kept = false;
  try {
    kept = decide(exchange(key, mine, first, *allocation, sync, deadline));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Timeout) throw;
    KIZUNA_LOG(Warn) << "rank " << rank << ": symmetric memory #" << number << ": " << e.what()
                     << "; ordinary memory instead, on every rank";
    kept = decide(false);
  }
  if (mine != "-") {
    allocation->regions[rank].unlink();
    if (first) sync[rank].unlink();
  }
  if (!kept) return nullptr;
  if (first) {
    sync_ = std::move(sync);
    ready_.store(true, std::memory_order_release);
  }
  if (!for_user) return allocation;
  {
    std::lock_guard lock(mutex_);
    for (auto it = by_address_.begin(); it != by_address_.end();)
      it = it->second.allocation.expired() ? by_address_.erase(it) : std::next(it);
    by_address_[reinterpret_cast<std::uintptr_t>(allocation->regions[rank].data())] = {allocation, allocation->bytes};
  }
  user_ready_.store(true, std::memory_order_release);
  return allocation;
}

bool SymmetricMemory::exchange(const std::string& key, const std::string& mine, bool first, Allocation& allocation,
                               std::vector<Region>& sync, Clock::time_point deadline) {
  const int rank = setup_.rank, world = setup_.world;
  const std::uint64_t number = allocation.number, bytes = allocation.bytes;
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back(key + std::to_string(r));
  // A death that shrink() or grow() publishes ends the wait at once.
  const std::string failed_key = setup_.prefix + "/failed";
  const std::vector<Bytes> names = get_watching(*setup_.store, keys, failed_key, deadline);
  bool mapped = mine != "-";
  for (int r = 0; r < world && mapped; ++r) {
    const std::string entry = text(names[r]);
    if (entry == "-") {
      mapped = false;
      break;
    }
    if (r == rank) continue;
    try {
      const std::size_t space = entry.find(' ');
      allocation.regions[r] = Region::map(entry.substr(0, space), bytes, setup_.comm_id, r, number);
      if (first) {
        if (space == std::string::npos)
          KIZUNA_THROW(ErrorCode::Mismatch, "rank ", r, "'s symmetric memory entry names no meeting region: ",
                       entry);
        sync[r] = Region::map(entry.substr(space + 1), 0, setup_.comm_id, r, 0);
      }
    } catch (const Error& e) {
      KIZUNA_LOG(Warn) << "rank " << rank << ": symmetric memory: " << e.what();
      mapped = false;
    }
  }
  // Whether everyone mapped everything: only then may the names go.
  setup_.store->set(key + "mapped/" + std::to_string(rank), mapped ? "1" : "0");
  std::vector<std::string> done;
  for (int r = 0; r < world; ++r) done.push_back(key + "mapped/" + std::to_string(r));
  bool all = true;
  for (const Bytes& b : get_watching(*setup_.store, done, failed_key, deadline)) all = all && text(b) == "1";
  return all;
}

SymmetricMemory::ByAddress::const_iterator SymmetricMemory::registered(std::uintptr_t at, std::size_t bytes) const {
  auto it = by_address_.upper_bound(at);
  if (it == by_address_.begin()) return by_address_.end();
  --it;
  const std::size_t held = it->second.bytes;
  return at - it->first <= held && bytes <= held - (at - it->first) ? it : by_address_.end();
}

SymmetricMemory::Found SymmetricMemory::find(const void* p, std::size_t bytes) const {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mutex_);
  const auto it = registered(at, bytes);
  if (it == by_address_.end()) return {};
  std::shared_ptr<Allocation> a = it->second.allocation.lock();
  if (!a) return {};
  return {std::move(a), at - it->first};
}

std::shared_ptr<const void> SymmetricMemory::pin(const void* p, std::size_t bytes) const {
  return find(p, bytes).allocation;
}

bool SymmetricMemory::holds(const void* p, std::size_t bytes) const {
  // The last two allocations this thread found held (an out-of-place
  // call's two buffers): the lock and the map slowed a small call on
  // symmetric memory by a fifth, docs/tuning.md#direct-calls. A hint is
  // good while its allocation lives; one let go is looked up anew.
  struct Hint {
    std::uint64_t memory = 0;
    std::uintptr_t base = 0;
    std::size_t bytes = 0;
    std::weak_ptr<Allocation> allocation;
  };
  thread_local Hint hints[2];
  thread_local unsigned next = 0;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  for (const Hint& h : hints)
    if (h.memory == id_ && at - h.base <= h.bytes && bytes <= h.bytes - (at - h.base) && !h.allocation.expired())
      return true;
  std::lock_guard lock(mutex_);
  const auto it = registered(at, bytes);
  if (it == by_address_.end() || it->second.allocation.expired()) return false;
  hints[next++ % 2] = {id_, it->first, it->second.bytes, it->second.allocation};
  return true;
}

std::shared_ptr<SymmetricMemory::Allocation> SymmetricMemory::by_number(std::uint64_t number) const {
  std::lock_guard lock(mutex_);
  for (const auto& [address, registered] : by_address_)
    if (auto a = registered.allocation.lock(); a && a->number == number) return a;
  return nullptr;
}

void SymmetricMemory::arrive(std::uint64_t phase) {
  sync_[setup_.rank].header()->arrived.store(phase, std::memory_order_release);
  ring_sleepers(setup_, [&](int r) { return doorbell(r); });
}

Doorbell SymmetricMemory::doorbell(int rank) const {
  RegionHeader* h = sync_[rank].header();
  return {h->doorbell, h->sleeping};
}

void SymmetricMemory::check_peer(int peer, std::uint64_t phase, const RunLabel& label) {
  check_not_aborted(setup_, label);
  if (!peer_closed(setup_, peer, failed_peer_, cause_)) return;
  // A peer that reached the meeting and then closed has left after its
  // last call: not a failure.
  if (sync_[peer].header()->arrived.load(std::memory_order_acquire) >= phase) {
    failed_peer_ = -1;
    return;
  }
  KIZUNA_THROW(ErrorCode::PeerLost, "lost rank ", peer, ": its connection closed in ", label.str());
}

void SymmetricMemory::wait_for_all(std::uint64_t phase, Clock::time_point deadline, const RunLabel& label) {
  for (int peer = 0; peer < setup_.world; ++peer) {
    if (peer == setup_.rank) continue;
    const auto& arrived = sync_[peer].header()->arrived;
    wait_for_peer(
        setup_, doorbell(setup_.rank), peer, deadline, Executor::kHoldOn, label,
        [&] { return arrived.load(std::memory_order_acquire) >= phase; }, [&] { check_peer(peer, phase, label); });
  }
}

void SymmetricMemory::check_staged_calls(const RegionCall& mine, const RunLabel& label) const {
  for (int r = 0; r < setup_.world; ++r) {
    const RegionCall c = sync_[r].header()->call;
    check_same_seq(r, c, mine, label);
    if (c.input_region != kStagedCall)
      KIZUNA_THROW(ErrorCode::Mismatch, label.str(), ": rank ", r, " is in call #", c.seq,
                   " on symmetric memory with buffers of that kind, where this rank's buffers are private and staged");
    check_same_call(r, c, mine, "through the staging memory", label);
  }
}

void SymmetricMemory::check_calls(const RegionCall& mine, const RunLabel& label,
                                  std::vector<const unsigned char*>& inputs,
                                  std::vector<const unsigned char*>& outputs,
                                  std::vector<std::shared_ptr<Allocation>>& keep) {
  const std::uint64_t bytes = mine.count * size_of(static_cast<DataType>(mine.dtype));
  for (int r = 0; r < setup_.world; ++r) {
    const RegionCall c = sync_[r].header()->call;
    check_same_seq(r, c, mine, label);
    if (c.input_region == kStagedCall)
      KIZUNA_THROW(ErrorCode::Mismatch, label.str(), ": rank ", r, " is in call #", c.seq,
                   " with private buffers, staged, where this rank's buffers are symmetric memory");
    check_same_call(r, c, mine, "on symmetric memory", label);
    auto in = by_number(c.input_region), out = by_number(c.output_region);
    if (!in || !out || c.input_offset > in->bytes || bytes > in->bytes - c.input_offset ||
        c.output_offset > out->bytes || bytes > out->bytes - c.output_offset)
      KIZUNA_THROW(ErrorCode::Mismatch, label.str(), ": rank ", r, "'s buffers (allocations #", c.input_region,
                   " at ", c.input_offset, " and #", c.output_region, " at ", c.output_offset,
                   ") are not inside symmetric memory this rank holds");
    inputs[r] = in->regions[r].data() + c.input_offset;
    outputs[r] = out->regions[r].data() + c.output_offset;
    keep.push_back(std::move(in));
    keep.push_back(std::move(out));
  }
}

void SymmetricMemory::count_towards_probe(std::uint64_t bytes, bool as_call) {
  if (probe_due_) calls_since_probe_ = bytes_since_probe_ = 0;
  if (as_call) ++calls_since_probe_;
  bytes_since_probe_ += bytes;
  probe_due_ = probes_ == 0 || calls_since_probe_ >= setup_.probe_every_calls ||
               bytes_since_probe_ >= setup_.probe_every_bytes;
}

auto SymmetricMemory::open_call(std::uint64_t seq, std::uint32_t steps, std::uint64_t bytes,
                                Clock::time_point deadline, const RunLabel& label) {
  count_towards_probe(bytes, true);
  const std::uint64_t base = phase_;
  phase_ += steps;
  failed_peer_ = -1;
  cause_.reset();
  // The meetings are the call's steps, as the stuck-rank report shows
  // them.
  if (setup_.live) setup_.live->begin(seq, steps);
  return [this, base, step = std::uint32_t{0}, deadline, &label]() mutable {
    if (setup_.live) setup_.live->step.store(step, std::memory_order_relaxed);
    ++step;
    arrive(base + step);
    wait_for_all(base + step, deadline, label);
  };
}

namespace {
std::atomic<SymmetricMemory::ProbeJudge> probe_judge{nullptr};
}  // namespace

void SymmetricMemory::judge_probes_for_tests(ProbeJudge judge) { probe_judge.store(judge); }

template <class Meet>
void SymmetricMemory::probe_placement(Meet&& meet, Clock::time_point deadline, const RunLabel& label) {
  // Every rank says which CPU it is on, and ranks on different CPUs bounce
  // the ball in pairs. Each rank decides for its own stores, if it is left
  // to (Auto), from its own pair's round trips.
  const int rank = setup_.rank, world = setup_.world;
  RegionHeader* me = sync_[rank].header();
  me->cpu.store(::sched_getcpu(), std::memory_order_relaxed);
  // Two slots, by probe, because rank 0 may reach the next probe, and
  // write its verdict, before a slow peer has read this one's (though not
  // the probe after: its meeting waits for that peer).
  const std::size_t slot = (probes_ + 1) % 2;
  if (rank == 0) me->told[slot].store(static_cast<std::int32_t>(own_), std::memory_order_relaxed);
  // The meeting: every rank's CPU known, and rank 0's verdict.
  meet();
  const std::int32_t told = sync_[0].header()->told[slot].load(std::memory_order_relaxed);
  agreed_ = told == static_cast<std::int32_t>(Placement::Near)  ? Placement::Near
            : told == static_cast<std::int32_t>(Placement::Far) ? Placement::Far
                                                                 : Placement::Unknown;
  std::vector<int> cpus(world);
  for (int r = 0; r < world; ++r) cpus[r] = sync_[r].header()->cpu.load(std::memory_order_relaxed);
  const int partner = pair_across_cpus(cpus)[rank];
  ++probes_;
  const ProbeJudge judge = probe_judge.load(std::memory_order_relaxed);
  if (judge) own_ = judge(rank, probes_);
  if (partner < 0) {
    if (stores_ == Stores::Auto) {
      KIZUNA_LOG(Trace) << label.str() << ": placement probe: no rank to pair with on a CPU other than "
                        << cpus[rank];
    }
    return;
  }
  const Clock::time_point start = Clock::now();
  const Bounced b = bounce(me->ball, sync_[partner].header()->ball, rank < partner, probes_,
                           std::min(deadline, start + kProbeFor));
  const Placement where = judge ? own_ : placement_of(b);
  if (where != Placement::Unknown) own_ = where;
  if (stores_ != Stores::Auto) return;
  const auto took = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  const bool stream = where == Placement::Unknown ? streaming_ : where == Placement::Far;
  std::ostringstream what;
  what << label.str() << ": placement probe: " << b.round_trips << " round trips with rank " << partner << " (CPUs "
       << cpus[rank] << " and " << cpus[partner] << ")";
  if (b.round_trips > 0) what << ", the fastest " << b.fastest.count() << " ns";
  what << ", in " << took << " us";
  what << ": " << (where == Placement::Near ? "near" : where == Placement::Far ? "far" : "no verdict")
       << "; writing for the peers with " << (stream ? "streaming" : "ordinary") << " stores";
  if (stream != streaming_) {
    KIZUNA_LOG(Debug) << what.str();
  } else {
    KIZUNA_LOG(Trace) << what.str();
  }
  streaming_ = stream;
  if (placement_out_ != nullptr && where != Placement::Unknown)
    placement_out_->store(where == Placement::Far, std::memory_order_relaxed);
}

void SymmetricMemory::before_slot_call(std::uint64_t bytes, std::uint64_t seq, Clock::time_point deadline,
                                       const RunLabel& label) {
  if (!ready_.load(std::memory_order_acquire)) return;  // no meeting regions, on any rank
  if (probe_due_) {
    RunLabel probing = label;
    probing.algorithm = "placement probe";
    auto meet = open_call(seq, kProbeMeetings, bytes, deadline, probing);
    probe_placement(meet, deadline, probing);
    return;
  }
  count_towards_probe(bytes, false);
}

unsigned char* SymmetricMemory::fold_aside() {
  if (folded_.size() < kFoldBlockBytes) folded_.resize(kFoldBlockBytes);
  return folded_.data();
}

void SymmetricMemory::copy_for_peers(void* to, const void* from, std::size_t bytes) const {
  copy_bytes(to, from, bytes, streaming_);
}

bool SymmetricMemory::all_reduce(const Call& call, Clock::time_point deadline, const RunLabel& label) {
  const std::size_t elem = size_of(call.dtype);
  const std::size_t bytes = call.count * elem;
  if (!any()) return false;
  const auto* in_begin = static_cast<const unsigned char*>(call.input);
  auto* out_begin = static_cast<unsigned char*>(call.output);
  if (in_begin != out_begin && in_begin < out_begin + bytes && out_begin < in_begin + bytes) return false;
  Found in = find(call.input, bytes), out = find(call.output, bytes);
  if (!in.allocation || !out.allocation) return false;

  const int rank = setup_.rank, world = setup_.world;
  RegionHeader* me = sync_[rank].header();
  me->call = RegionCall{call.seq,
                        call.count,
                        static_cast<std::uint32_t>(call.dtype),
                        static_cast<std::uint32_t>(call.op),
                        in.allocation->number,
                        out.allocation->number,
                        in.offset,
                        out.offset};
  const bool probe = probes();
  auto meet = open_call(call.seq, symmetric_meetings(), bytes, deadline, label);
  // Meeting 1: every rank's input is ready, and its call known.
  meet();
  std::vector<const unsigned char*> inputs(world), outputs(world);
  std::vector<std::shared_ptr<Allocation>> keep;
  check_calls(me->call, label, inputs, outputs, keep);
  if (probe) probe_placement(meet, deadline, label);

  // Rank q's chunk: elements [lo(q), lo(q + 1)).
  const std::size_t per = call.count / world, extra = call.count % world;
  auto lo = [&](int q) { return (q * per + std::min<std::size_t>(q, extra)) * elem; };
  // Phase 1: fold chunk `rank` of every input into this rank's output,
  // this rank's own first (in place, the output is that input).
  // Streaming, a block is folded where it stays in the first-level cache
  // and streamed to the output, where the peers read it: while the probe
  // says so, and for a large call, whose output would not stay in the
  // caches anyway.
  const bool stream = streaming_ || streams_output(bytes, in_begin == out_begin);
  fold_in_blocks(
      lo(rank), lo(rank + 1), world, [&](int k) { return inputs[(rank + k) % world]; }, out_begin,
      stream ? fold_aside() : nullptr, call.dtype, call.op, [](std::size_t, const unsigned char*, std::size_t) {});
  // Meeting 2: every chunk reduced.
  meet();
  // Phase 2: the peers' reduced chunks, out of their outputs (into this
  // rank's, where they read them as inputs next call).
  for (int k = 1; k < world; ++k) {
    const int q = (rank + k) % world;
    copy_bytes(out_begin + lo(q), outputs[q] + lo(q), lo(q + 1) - lo(q), stream);
  }
  // Meeting 3: nobody reads this rank's buffers any more.
  meet();
  return true;
}

bool SymmetricMemory::allocate_staging(std::size_t bytes, Stores stores, bool stream_until_probed,
                                       Clock::time_point deadline) {
  staging_ = allocate_any(bytes, deadline, false, bytes > 0);
  stores_ = stores;
  streaming_ = stores == Stores::Stream || (stores == Stores::Auto && stream_until_probed);
  return staging_ != nullptr;
}

std::uint32_t SymmetricMemory::symmetric_meetings() const { return 3 + (probes() ? kProbeMeetings : 0); }

std::uint32_t SymmetricMemory::staged_meetings(std::size_t bytes, std::size_t elem) const {
  const std::size_t half = staging_ ? staging_->bytes / 2 / elem * elem : 0;
  if (half == 0) return 0;
  const std::size_t rounds = std::max<std::size_t>(1, (bytes + half - 1) / half);
  return static_cast<std::uint32_t>(std::min<std::size_t>(UINT32_MAX, 2 * rounds + (probes() ? kProbeMeetings : 0)));
}

void SymmetricMemory::all_reduce_staged(const Call& call, Clock::time_point deadline, const RunLabel& label) {
  const std::size_t elem = size_of(call.dtype);
  const std::uint32_t steps = staged_meetings(call.count * elem, elem);
  KIZUNA_CHECK(steps > 0 && steps < UINT32_MAX, label.str(), ": no staging memory, or too many rounds");
  const int rank = setup_.rank, world = setup_.world;
  // A round takes what half a staging area holds; rounds alternate halves.
  const std::size_t half = staging_->bytes / 2 / elem * elem;
  const std::size_t round_count = half / elem;
  const bool probe = probes();
  const std::size_t rounds = (steps - (probe ? kProbeMeetings : 0)) / 2;
  RegionHeader* me = sync_[rank].header();
  me->call = RegionCall{call.seq, call.count, static_cast<std::uint32_t>(call.dtype),
                        static_cast<std::uint32_t>(call.op), kStagedCall, kStagedCall, 0, 0};
  auto meet = open_call(call.seq, steps, call.count * elem, deadline, label);
  // A large output, which would not stay in the caches anyway, is written
  // past them (its own chunk folded aside, then the peers' reduced
  // chunks): no line of it is read first.
  const bool stream_output = streams_output(call.count * elem, call.input == call.output);
  unsigned char* const aside = stream_output ? fold_aside() : nullptr;
  const auto* in = static_cast<const unsigned char*>(call.input);
  auto* out = static_cast<unsigned char*>(call.output);
  for (std::size_t done = 0, r = 0; r < rounds; ++r, done += round_count) {
    const std::size_t count = std::min(round_count, call.count - std::min(call.count, done));
    const std::size_t h = (staged_rounds_++ % 2) * half;
    auto area = [&](int q) { return staging_->regions[q].data() + h; };
    // Rank q's chunk of the round: bytes [lo(q), lo(q + 1)) from its start.
    const std::size_t per = count / world, extra = count % world;
    auto lo = [&](int q) { return (q * per + std::min<std::size_t>(q, extra)) * elem; };
    const unsigned char* src = in + done * elem;
    unsigned char* dst = out + done * elem;
    // The chunks the peers fold, into this rank's half (its own chunk is
    // folded straight from its input).
    for (int k = 1; k < world; ++k) {
      const int q = (rank + k) % world;
      copy_for_peers(area(rank) + lo(q), src + lo(q), lo(q + 1) - lo(q));
    }
    // Meeting 1: every rank's part staged (the first: and its call known).
    meet();
    if (r == 0) {
      check_staged_calls(me->call, label);
      if (probe) probe_placement(meet, deadline, label);
    }
    // This rank's chunk: its input's share and every peer's, into its
    // output and, for the peers to copy, into its half.
    fold_in_blocks(
        lo(rank), lo(rank + 1), world,
        [&](int k) -> const unsigned char* { return k == 0 ? src : area((rank + k) % world); }, dst,
        aside, call.dtype, call.op,
        [&](std::size_t at, const unsigned char* folded, std::size_t n) { copy_for_peers(area(rank) + at, folded, n); });
    // Meeting 2: every chunk reduced.
    meet();
    for (int k = 1; k < world; ++k) {
      const int q = (rank + k) % world;
      copy_bytes(dst + lo(q), area(q) + lo(q), lo(q + 1) - lo(q), stream_output);
    }
  }
}

}  // namespace kizuna::comm
