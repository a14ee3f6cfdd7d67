#include "comm/history.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/coarse_clock.hpp"

namespace kizuna::comm {
namespace {

double ms_between(History::Clock::time_point a, History::Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

std::uint64_t History::queued(std::uint64_t seq, std::string_view kind, DataType dtype,
                              std::uint64_t count, int peer) {
  std::lock_guard lock(mutex_);
  const std::uint64_t id = next_id_++;
  Record& r = ring_[id % kSize];
  r = Record{};
  r.seq = seq;
  r.kind = kind;
  r.dtype = dtype;
  r.count = count;
  r.peer = peer;
  r.queued = core::coarse_now();
  ids_[id % kSize] = id;
  return id;
}

History::Record* History::find(std::uint64_t id) {
  return ids_[id % kSize] == id ? &ring_[id % kSize] : nullptr;
}

void History::started(std::uint64_t id, std::string_view algorithm, std::uint32_t steps) {
  std::lock_guard lock(mutex_);
  if (Record* r = find(id)) {
    r->state = State::Running;
    r->algorithm = algorithm;
    r->steps = steps;
    r->started = core::coarse_now();
  }
}

void History::ended(std::uint64_t id, bool ok) {
  std::lock_guard lock(mutex_);
  if (Record* r = find(id)) {
    r->state = ok ? State::Done : State::Failed;
    r->ended = core::coarse_now();
    if (ok && r->seq > last_completed_seq_) last_completed_seq_ = r->seq;
  }
}

std::uint64_t History::last_completed_seq() const {
  std::lock_guard lock(mutex_);
  return last_completed_seq_;
}

std::string History::report(const LiveProgress& live, const std::string& header, std::size_t limit) const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  out << header;
  const auto now = Clock::now();
  const std::size_t keep = std::min(limit, kSize);
  const std::uint64_t first = next_id_ > keep ? next_id_ - keep : 1;
  char buf[64];
  for (std::uint64_t id = first; id < next_id_; ++id) {
    if (ids_[id % kSize] != id) continue;
    const Record& r = ring_[id % kSize];
    out << "\n  ";
    if (r.seq) out << "#" << r.seq << " ";
    out << r.kind;
    if (r.peer >= 0) out << (r.seq ? " root " : " ") << r.peer;
    out << " " << name(r.dtype) << " x" << r.count;
    if (!r.algorithm.empty()) out << " (" << r.algorithm << ")";
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
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  const Record* running = nullptr;
  for (std::uint64_t id = next_id_ > kSize ? next_id_ - kSize : 1; id < next_id_; ++id)
    if (ids_[id % kSize] == id && ring_[id % kSize].state == State::Running) running = &ring_[id % kSize];
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
  out << "last_done=" << last_completed_seq_;
  return out.str();
}

}  // namespace kizuna::comm
