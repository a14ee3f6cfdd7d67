// comm/history.hpp: the recent collectives of one communicator, for the
// stuck-rank report.
//
// Every call is recorded when queued, when it starts and when it ends; the
// one running also shows the step it has reached and the rank it waits for
// (read from the executor's live progress). On a timeout the communicator
// logs its record of the stuck call, and KIZUNA_DUMP_ON_SIGNAL=1 makes
// SIGUSR1 print every live communicator's history, so a hung job can be
// inspected without killing it.
//
// Times are recorded with the coarse clock (core/coarse_clock.hpp): to a
// few milliseconds, which is what a report of a stuck call needs.
//
// A small call run by its caller that repeats the newest record's (the
// same kind, type, count, peer and algorithm, the next sequence number,
// the one before done) is counted into that record rather than given one
// (running()): a loop of small all-reduces keeps one line,
//   #2..#20001 all_reduce float32 x2 (mailbox), 20000 calls, the last: done in 0.001 ms
// and the history still holds the 31 calls before the loop. (It is no
// faster: the comparisons cost about what the stores they spare do, 84
// instructions a call against 97 in callgrind.)
//
// Thread-safe. queued() and running() take a spin lock; started() and ended(), which a
// small collective runs right after publishing its messages, take none and
// no locked instruction at all: one would wait there for the published
// line to reach the peer polling it. So started()
// and ended() of a record must come from one thread at a time (the one
// running the call), after its queued(). Readers (the report, the signal
// dumper) take no lock either: they skip a record that queued() is
// rewriting meanwhile, and may see a call's start or end a moment late.
// (A record overwritten while its call runs, kSize calls being queued
// behind it, may take that call's end; it is a report, nothing acts on it.)
// `kind` and `algorithm` must be string literals (algo::name's are).
#pragma once

#include <kizuna/types.hpp>

#include "core/spin_lock.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kizuna::comm {

// What the executor is doing right now; written by the executor, read by
// anyone.
struct LiveProgress {
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::uint32_t> step{0};
  std::atomic<std::uint32_t> steps{0};
  std::atomic<int> awaiting{-1};
  std::atomic<std::int64_t> waiting_since_us{0};  // steady clock, 0: not waiting

  // Call `seq` begins, at step 1 of `count`.
  void begin(std::uint64_t s, std::uint32_t count) {
    seq.store(s, std::memory_order_relaxed);
    step.store(0, std::memory_order_relaxed);
    steps.store(count, std::memory_order_relaxed);
  }
  // The wait for `awaiting` has gone on long enough to sleep, from `now`.
  void asleep_since(std::chrono::steady_clock::time_point now) {
    waiting_since_us.store(std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count(),
                           std::memory_order_relaxed);
  }
  // Waiting for nobody.
  void done_waiting() {
    awaiting.store(-1, std::memory_order_relaxed);
    waiting_since_us.store(0, std::memory_order_relaxed);
  }
};

class History {
 public:
  static constexpr std::size_t kSize = 32;
  using Clock = std::chrono::steady_clock;
  enum class State : std::uint8_t { Queued, Running, Done, Failed };

  struct Record {
    std::uint64_t seq = 0;
    std::string_view kind;       // "all_reduce", "send", ...
    std::string_view algorithm;  // "" until started
    DataType dtype = DataType::Float32;
    std::uint64_t count = 0;
    int peer = -1;               // root or point-to-point peer
    State state = State::Queued;
    Clock::time_point queued, started, ended;
    std::uint32_t steps = 0;
    std::uint64_t calls = 1;     // seq - calls + 1 .. seq, all like this one; every one but the last done
  };

  // Returns an id for started/ended. `seq` is 0 for point-to-point calls.
  std::uint64_t queued(std::uint64_t seq, std::string_view kind, DataType dtype, std::uint64_t count, int peer);
  // queued() and started() at once, `now` (a coarse clock's reading), for
  // a call that starts as it is made (a small call run by its caller): one
  // lock and no look at the clock. Counted into the newest record when it
  // repeats its call (see above); the id is then that record's.
  std::uint64_t running(std::uint64_t seq, std::string_view kind, DataType dtype, std::uint64_t count, int peer,
                        std::string_view algorithm, std::uint32_t steps, Clock::time_point now);
  void started(std::uint64_t id, std::string_view algorithm, std::uint32_t steps);
  void ended(std::uint64_t id, bool ok);
  // ended() at `when`, for a caller that has just read the coarse clock.
  void ended(std::uint64_t id, bool ok, Clock::time_point when);

  // The last completed collective sequence number (0: none).
  std::uint64_t last_completed_seq() const;

  // One line per recorded call (the last `limit`), oldest first; the
  // running one with `live`.
  std::string report(const LiveProgress& live, const std::string& header, std::size_t limit = kSize) const;

  // The running call as space-separated key=value fields, for the
  // machine-read status line (kizuna-run's failure table):
  //   call=all_reduce seq=17 algo=ring step=3/6 waiting_for=3 waited_s=30.0 last_done=16
  // Values have no spaces; a field that does not apply is left out, and
  // with nothing running only last_done is given.
  std::string status_fields(const LiveProgress& live) const;

 private:
  // A Record, field by field in atomics, so that readers need no lock;
  // `id` is 0 while queued() rewrites the slot.
  struct Slot {
    std::atomic<std::uint64_t> id{0};
    std::atomic<std::uint64_t> seq{0};
    std::atomic<const char*> kind{""};
    std::atomic<const char*> algorithm{""};
    std::atomic<DataType> dtype{DataType::Float32};
    std::atomic<std::uint64_t> count{0};
    std::atomic<int> peer{-1};
    std::atomic<State> state{State::Queued};
    std::atomic<Clock::rep> queued{0}, started{0}, ended{0};
    std::atomic<std::uint32_t> steps{0};
    std::atomic<std::uint64_t> calls{1};
  };
  Slot* find(std::uint64_t id);
  // A new record in the next slot; the caller holds queued_lock_.
  std::uint64_t record(std::uint64_t seq, std::string_view kind, DataType dtype, std::uint64_t count, int peer,
                       std::string_view algorithm, std::uint32_t steps, State state, Clock::rep now);
  // Slot `id`'s record as it stands, or nothing if it is not there or is
  // being rewritten.
  std::optional<Record> read(std::uint64_t id) const;

  core::SpinLock queued_lock_;  // queued() against itself
  std::array<Slot, kSize> slots_{};
  std::atomic<std::uint64_t> next_id_{1};
  // The highest seq of the completed records that queued() has overwritten.
  std::atomic<std::uint64_t> evicted_done_{0};
};

}  // namespace kizuna::comm
