#include "comm/history.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <sstream>

#include "core/coarse_clock.hpp"

namespace kizuna::comm {
namespace {

double ms_between(History::Clock::time_point a, History::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

History::Clock::rep now_rep() { return core::coarse_now().time_since_epoch().count(); }
History::Clock::time_point at(History::Clock::rep r) { return History::Clock::time_point(History::Clock::duration(r)); }

// The last call a record says is done (0: none): its own when it ended
// well, the one before it when it holds several calls (all but its last
// are done).
std::uint64_t done_in(History::State state, std::uint64_t seq, std::uint64_t calls) {
  return state == History::State::Done ? seq : calls > 1 ? seq - 1 : 0;
}

// A seqlock's write of slot `s` as record `id`: readers that see any field
// `fill` stores see the id change (read() checks it after its loads).
template <class Slot, class Fill>
void seqlock_write(Slot& s, std::uint64_t id, Fill&& fill) {
  s.id.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  fill();
  s.id.store(id, std::memory_order_release);
}

}  // namespace

std::uint64_t History::queued(std::uint64_t seq, std::string_view kind, DataType dtype,
                              std::uint64_t count, int peer) {
  std::lock_guard lock(queued_lock_);
  return record(seq, kind, dtype, count, peer, "", 0, State::Queued, now_rep());
}

std::uint64_t History::running(std::uint64_t seq, std::string_view kind, DataType dtype, std::uint64_t count,
                               int peer, std::string_view algorithm, std::uint32_t steps, Clock::time_point now) {
  constexpr auto relaxed = std::memory_order_relaxed;
  std::lock_guard lock(queued_lock_);
  const std::uint64_t id = next_id_.load(relaxed) - 1;
  Slot& s = slots_[id % kSize];
  if (id != 0 && seq != 0 && s.id.load(relaxed) == id && s.state.load(relaxed) == State::Done &&
      s.seq.load(relaxed) + 1 == seq && s.kind.load(relaxed) == kind.data() &&
      s.algorithm.load(relaxed) == algorithm.data() && s.dtype.load(relaxed) == dtype &&
      s.count.load(relaxed) == count && s.peer.load(relaxed) == peer && s.steps.load(relaxed) == steps) {
    seqlock_write(s, id, [&] {
      s.seq.store(seq, relaxed);
      s.calls.store(s.calls.load(relaxed) + 1, relaxed);
      s.state.store(State::Running, relaxed);
      s.started.store(now.time_since_epoch().count(), relaxed);
      s.ended.store(0, relaxed);
    });
    return id;
  }
  return record(seq, kind, dtype, count, peer, algorithm, steps, State::Running, now.time_since_epoch().count());
}

std::uint64_t History::record(std::uint64_t seq, std::string_view kind, DataType dtype, std::uint64_t count,
                              int peer, std::string_view algorithm, std::uint32_t steps, State state,
                              Clock::rep now) {
  constexpr auto relaxed = std::memory_order_relaxed;
  const std::uint64_t id = next_id_.load(relaxed);
  next_id_.store(id + 1, relaxed);
  Slot& s = slots_[id % kSize];
  if (s.id.load(relaxed) != 0) {
    const std::uint64_t done = done_in(s.state.load(relaxed), s.seq.load(relaxed), s.calls.load(relaxed));
    if (done > evicted_done_.load(relaxed)) evicted_done_.store(done, relaxed);
  }
  seqlock_write(s, id, [&] {
    s.seq.store(seq, relaxed);
    s.kind.store(kind.data(), relaxed);
    s.algorithm.store(algorithm.data(), relaxed);
    s.dtype.store(dtype, relaxed);
    s.count.store(count, relaxed);
    s.peer.store(peer, relaxed);
    s.state.store(state, relaxed);
    s.queued.store(now, relaxed);
    s.started.store(state == State::Queued ? 0 : now, relaxed);
    s.ended.store(0, relaxed);
    s.steps.store(steps, relaxed);
    s.calls.store(1, relaxed);
  });
  return id;
}

History::Slot* History::find(std::uint64_t id) {
  Slot& s = slots_[id % kSize];
  return s.id.load(std::memory_order_relaxed) == id ? &s : nullptr;
}

// started() and ended() store their times before the state (release), and
// readers load the state first (acquire): a call shown running or done has
// its times.
void History::started(std::uint64_t id, std::string_view algorithm, std::uint32_t steps) {
  if (Slot* s = find(id)) {
    s->algorithm.store(algorithm.data(), std::memory_order_relaxed);
    s->steps.store(steps, std::memory_order_relaxed);
    s->started.store(now_rep(), std::memory_order_relaxed);
    s->state.store(State::Running, std::memory_order_release);
  }
}

void History::ended(std::uint64_t id, bool ok) { ended(id, ok, at(now_rep())); }

void History::ended(std::uint64_t id, bool ok, Clock::time_point when) {
  if (Slot* s = find(id)) {
    s->ended.store(when.time_since_epoch().count(), std::memory_order_relaxed);
    s->state.store(ok ? State::Done : State::Failed, std::memory_order_release);
  }
}

std::optional<History::Record> History::read(std::uint64_t id) const {
  const Slot& s = slots_[id % kSize];
  if (s.id.load(std::memory_order_acquire) != id) return std::nullopt;
  Record r;
  r.state = s.state.load(std::memory_order_acquire);
  r.seq = s.seq.load(std::memory_order_relaxed);
  r.kind = s.kind.load(std::memory_order_relaxed);
  r.algorithm = s.algorithm.load(std::memory_order_relaxed);
  r.dtype = s.dtype.load(std::memory_order_relaxed);
  r.count = s.count.load(std::memory_order_relaxed);
  r.peer = s.peer.load(std::memory_order_relaxed);
  r.queued = at(s.queued.load(std::memory_order_relaxed));
  r.started = at(s.started.load(std::memory_order_relaxed));
  r.ended = at(s.ended.load(std::memory_order_relaxed));
  r.steps = s.steps.load(std::memory_order_relaxed);
  r.calls = s.calls.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.id.load(std::memory_order_relaxed) != id) return std::nullopt;
  return r;
}

std::uint64_t History::last_completed_seq() const {
  std::uint64_t last = evicted_done_.load(std::memory_order_relaxed);
  const std::uint64_t next = next_id_.load(std::memory_order_acquire);
  for (std::uint64_t id = next > kSize ? next - kSize : 1; id < next; ++id)
    if (const std::optional<Record> r = read(id)) last = std::max(last, done_in(r->state, r->seq, r->calls));
  return last;
}

std::string History::report(const LiveProgress& live, const std::string& header, std::size_t limit) const {
  std::ostringstream out;
  out << header;
  const auto now = Clock::now();
  const std::size_t keep = std::min(limit, kSize);
  const std::uint64_t next = next_id_.load(std::memory_order_acquire);
  const std::uint64_t first = next > keep ? next - keep : 1;
  char buf[64];
  for (std::uint64_t id = first; id < next; ++id) {
    const std::optional<Record> record = read(id);
    if (!record) continue;
    const Record& r = *record;
    out << "\n  ";
    if (r.seq && r.calls > 1) out << "#" << r.seq - r.calls + 1 << "..";
    if (r.seq) out << "#" << r.seq << " ";
    out << r.kind;
    if (r.peer >= 0) out << (r.seq ? " root " : " ") << r.peer;
    out << " " << name(r.dtype) << " x" << r.count;
    if (!r.algorithm.empty()) out << " (" << r.algorithm << ")";
    if (r.calls > 1) out << ", " << r.calls << " calls, the last";
    switch (r.state) {
      case State::Queued:
        std::snprintf(buf, sizeof buf, "%.1f", ms_between(r.queued, now) / 1000);
        out << ": queued " << buf << " s ago";
        break;
      case State::Done:
      case State::Failed:
        std::snprintf(buf, sizeof buf, "%.3f", ms_between(r.started, r.ended));
        out << (r.state == State::Done ? ": done in " : ": FAILED after ") << buf << " ms";
        break;
      case State::Running: {
        out << ": running, step " << live.step.load() + 1 << " of " << live.steps.load();
        const int awaiting = live.awaiting.load();
        const std::int64_t since = live.waiting_since_us.load();
        if (awaiting >= 0 && since > 0) {
          const std::int64_t now_us =
              std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
          std::snprintf(buf, sizeof buf, "%.1f", (now_us - since) / 1e6);
          out << ", waiting for rank " << awaiting << " for " << buf << " s";
        }
        break;
      }
    }
  }
  return out.str();
}

std::string History::status_fields(const LiveProgress& live) const {
  std::ostringstream out;
  std::optional<Record> running;
  const std::uint64_t next = next_id_.load(std::memory_order_acquire);
  for (std::uint64_t id = next > kSize ? next - kSize : 1; id < next; ++id)
    if (std::optional<Record> r = read(id); r && r->state == State::Running) running = r;
  if (running) {
    out << "call=" << running->kind;
    if (running->seq) out << " seq=" << running->seq;
    if (!running->algorithm.empty()) out << " algo=" << running->algorithm;
    out << " step=" << live.step.load() + 1 << "/" << live.steps.load();
    const int awaiting = live.awaiting.load();
    const std::int64_t since = live.waiting_since_us.load();
    if (awaiting >= 0 && since > 0) {
      const std::int64_t now_us =
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch()).count();
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f", (now_us - since) / 1e6);
      out << " waiting_for=" << awaiting << " waited_s=" << buf;
    }
    out << " ";
  }
  out << "last_done=" << last_completed_seq();
  return out.str();
}

}  // namespace kizuna::comm
