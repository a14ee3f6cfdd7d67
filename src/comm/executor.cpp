#include "comm/executor.hpp"

#include <poll.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include "comm/call.hpp"
#include "core/check.hpp"
#include "core/coarse_clock.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"
#include "transport/shm/shm_link.hpp"

namespace kizuna::comm {

using algo::Buffer;
using algo::StepOp;

std::string RunLabel::str() const {
  std::ostringstream out;
  out << what;
  if (peer >= 0) out << " " << peer;
  if (seq) out << " #" << seq;
  if (!algorithm.empty()) out << " (" << algorithm << ")";
  out << " on rank " << rank;
  if (comm) out << " of " << *comm;
  out << suffix;
  return out.str();
}

Executor::Executor(std::vector<transport::Link*> links, int rank)
    : links_(std::move(links)),
      rank_(rank),
      send_index_(links_.size()),
      recv_index_(links_.size()),
      last_seq_from_(links_.size()),
      last_time_from_(links_.size()) {
  for (transport::Link* link : links_) polled_by_syscall_.push_back(link != nullptr && !link->uses_doorbell());
}

std::string Executor::last_heard(int peer) const {
  if (peer < 0 || peer >= static_cast<int>(last_seq_from_.size())) return "";
  if (last_seq_from_[peer] == 0) return "; nothing has come from rank " + std::to_string(peer) + " yet";
  const double ago = std::chrono::duration<double>(Clock::now() - last_time_from_[peer]).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", ago);
  const std::uint64_t seq = last_seq_from_[peer];
  const std::string which = seq >= (1ull << 62) ? "a point-to-point or check message" : "#" + std::to_string(seq);
  return "; rank " + std::to_string(peer) + "'s last message here was in " + which + ", " + buf + " s ago";
}

void Executor::post_send(int peer, const unsigned char* data, std::size_t bytes) {
  transport::Link* link = links_[peer];
  KIZUNA_CHECK(link != nullptr, "no link from rank ", rank_, " to rank ", peer);
  const std::uint64_t number = link->post_send(data, bytes, {tag_.seq, send_index_[peer]++, tag_.code});
  pending_.push_back({link, number, data, data + bytes});
  // Set it going now, not at the next wait: the peer waits for it, while
  // what this rank does next (posting its receive) can wait.
  try {
    link->progress();
  } catch (const Error& e) {
    link_failed(link, e);
  }
}

bool Executor::wait_for_sends_over(const unsigned char* begin, const unsigned char* end) {
  for (const PendingSend& p : pending_) {
    if (p.begin < end && begin < p.end && p.link->sent_count() < p.number) {
      transport::Link* link = p.link;
      const std::uint64_t number = p.number;
      if (!wait_until([&] { return link->sent_count() >= number; }, link->peer())) return false;
    }
  }
  // Forget sends that have completed, once there are enough to matter: a
  // long schedule's list stays short, a small call's costs nothing here
  // (wait_all_sends() empties it at the end).
  if (pending_.size() >= kForgetSendsFrom)
    std::erase_if(pending_, [](const PendingSend& p) { return p.link->sent_count() >= p.number; });
  return true;
}

bool Executor::wait_all_sends() {
  for (const PendingSend& p : pending_) {
    transport::Link* link = p.link;
    const std::uint64_t number = p.number;
    if (link->sent_count() < number && !wait_until([&] { return link->sent_count() >= number; }, link->peer()))
      return false;
  }
  pending_.clear();
  return true;
}

bool Executor::progress_busy() {
  bool moved = false;
  polled_syscall_ = false;
  for (std::size_t r = 0; r < links_.size(); ++r) {
    transport::Link* link = links_[r];
    if (link == nullptr || (link != recv_link_ && link->send_idle())) continue;
    polled_syscall_ |= polled_by_syscall_[r];
    try {
      moved |= link->progress();
    } catch (const Error& e) {
      link_failed(link, e);
    }
  }
  return moved;
}

void Executor::link_failed(transport::Link* link, const Error& e) {
  failed_peer_ = link->peer();
  if (const transport::AbortNotice* notice = link->received_abort()) cause_ = *notice;
  if (const std::optional<std::uint32_t> theirs = link->mismatched_call())
    KIZUNA_THROW(e.code(), label_->str(), ", step ", step_ + 1, " of ", steps_, ": ", e.what(), ": rank ",
                 link->peer(), " is in ", describe_message_code(*theirs, tag_.code),
                 ": the ranks are not making the same calls");
  KIZUNA_THROW(e.code(), label_->str(), ", step ", step_ + 1, " of ", steps_, ": ", e.what());
}

void Executor::check_peers() {
  for (transport::Link* link : links_) {
    if (link == nullptr || !link->uses_doorbell()) continue;
    try {
      link->check_peer();
    } catch (const Error& e) {
      link_failed(link, e);
    }
  }
}

void Executor::timed_out(Clock::time_point now, int awaiting) const {
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - started_).count();
  if (awaiting >= 0)
    KIZUNA_THROW(ErrorCode::Timeout, "timed out after ", waited, " ms waiting for rank ", awaiting, " in ",
                 label_->str(), ", step ", step_ + 1, " of ", steps_, last_heard(awaiting));
  KIZUNA_THROW(ErrorCode::Timeout, "timed out after ", waited, " ms in ", label_->str(), ", step ", step_ + 1,
               " of ", steps_);
}

void Executor::sleep_a_while(Clock::time_point now) {
  std::vector<pollfd> fds;
  bool shm_busy = false;
  for (transport::Link* link : links_) {
    if (link == nullptr) continue;
    if (link->uses_doorbell()) {
      shm_busy |= link == recv_link_ || !link->send_idle();
      continue;
    }
    const short events = link->wait_events();
    if (events != 0 && link->wait_fd() >= 0) fds.push_back({link->wait_fd(), events, 0});
  }
  const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now).count();
  if (!fds.empty()) {
    // Sockets and shared memory both busy: poll briefly and look again.
    const int timeout_ms = static_cast<int>(std::min<long long>(left_ms + 1, shm_busy ? 1 : 100));
    if (::poll(fds.data(), fds.size(), timeout_ms) == 0 && !shm_busy) {
      KIZUNA_LOG(Debug) << label_->str() << ": no progress for " << timeout_ms << " ms at step " << step_ + 1
                        << " of " << steps_;
    }
  } else if (shm_busy && doorbell_ != nullptr) {
    check_peers();
    const auto nap = std::chrono::microseconds(std::min<long long>(left_ms + 1, 50) * 1000);
    transport::shm::doorbell_sleep(doorbell_, [this] { return progress_busy(); }, nap);
  }
}

template <typename Done>
bool Executor::wait_until(Done&& done, int awaiting) {
  Clock::time_point spin_until, yield_until, next_yield;
  if (live_) live_->awaiting.store(awaiting, std::memory_order_relaxed);
  bool announced = false;
  bool yielding = false;  // past the spin: look at the clock on every round
  bool slept = false;     // since anything moved: the spin and the yields are over
  // The clock costs tens of nanoseconds here (a virtual machine's): while
  // spinning, look at it only every kClockEvery idle rounds.
  constexpr int kClockEvery = 16;
  constexpr auto kSpinYieldEvery = std::chrono::microseconds(5);
  int idle = 0;
  int first_look = kClockEvery;  // the idle round of the first look, once known
  for (;;) {
    const bool moved = progress_busy();
    if (done()) return true;
    if (moved) {
      idle = 0;
      first_look = kClockEvery;
      yielding = slept = false;
      continue;
    }
    // A rank that does not spin (more ranks than cores) and polls a socket
    // looks, and so yields, from its first idle round: each round costs it
    // a system call (a microsecond or so) of the core its peer may be
    // waiting for, where the clock costs next to nothing.
    if (idle == 0 && spin_.count() == 0 && polled_syscall_) first_look = 1;
    // A peer that is there answers within these first rounds: most calls
    // never look at the clock.
    if (++idle % first_look != 0 && !yielding) continue;
    const auto now = Clock::now();
    if (idle == first_look && !slept) {
      spin_until = now + spin_;
      yield_until = spin_until + yield_;
      next_yield = now + kSpinYieldEvery;
      if (patience_ != kHoldOn && yield_at_ == Clock::time_point::max()) yield_at_ = now + patience_;
    }
    if (now >= deadline_) timed_out(now, awaiting);
    // A caller that must not be held (see start()) yields instead of sleeping.
    if (now >= yield_at_) return false;
    if (now < spin_until) {
      // A peer that shares this core (the scheduler put both ranks on one
      // for a while) runs only when this rank lets it: offer the core now
      // and then, so that each hop costs kSpinYieldEvery, not the whole spin.
      if (now >= next_yield) {
        std::this_thread::yield();
        next_yield = now + kSpinYieldEvery;
      }
      continue;
    }
    // Then offer the core between every two looks, as Open MPI does when
    // oversubscribed: with more ranks than cores the peer this rank waits
    // for is often waiting for the core, and a sleep here would cost a
    // wake-up on the critical path of every hop.
    if (now < yield_until || !yielding) {
      yielding = true;
      std::this_thread::yield();
      continue;
    }
    // Nothing moves: sleep until a busy link can, or the deadline.
    if (patience_ != kHoldOn) return false;
    if (live_ && !announced) {
      live_->asleep_since(now);
      announced = true;
    }
    sleep_a_while(now);
    idle = 0;
    yielding = false;
    slept = true;
  }
}

bool Executor::start(const algo::RankSchedule& s, const ExecBuffers& b, DataType dtype, ReduceOp op,
                     CallTag tag, Clock::time_point deadline, const RunLabel& label,
                     Clock::duration patience) {
  schedule_ = &s;
  buffers_ = b;
  dtype_ = dtype;
  op_ = op;
  tag_ = tag;
  deadline_ = deadline;
  started_ = core::coarse_now();
  steps_ = s.steps.size();
  step_ = 0;
  recv_posted_ = false;
  draining_ = false;
  failed_peer_ = -1;
  cause_.reset();
  std::fill(send_index_.begin(), send_index_.end(), 0);
  std::fill(recv_index_.begin(), recv_index_.end(), 0);
  pending_.clear();
  if (live_) {
    live_->seq.store(tag.seq, std::memory_order_relaxed);
    live_->steps.store(static_cast<std::uint32_t>(steps_), std::memory_order_relaxed);
    live_->waiting_since_us.store(0, std::memory_order_relaxed);
  }
  return resume(label, patience);
}

bool Executor::resume(const RunLabel& label, Clock::duration patience) {
  label_ = &label;
  patience_ = patience;
  yield_at_ = Clock::time_point::max();
  return advance();
}

bool Executor::advance() {
  for (; !draining_ && step_ < steps_; ++step_) {
    if (live_) live_->step.store(static_cast<std::uint32_t>(step_), std::memory_order_relaxed);
    if (!run_step(schedule_->steps[step_])) return false;
  }
  if (!draining_) {
    draining_ = true;
    step_ = steps_ ? steps_ - 1 : 0;  // errors while draining name the last step
  }
  return wait_all_sends();
}

bool Executor::run_step(const algo::Step& step) {
  const algo::RankSchedule& s = *schedule_;
  const ExecBuffers& b = buffers_;
  const std::size_t bytes = step.count * s.request.elem_size;
  switch (step.op) {
    case StepOp::Send:
      post_send(step.send_peer, address(s, b, step.src, step.src_offset), bytes);
      return true;
    case StepOp::LocalReduce: {
      unsigned char* dst = address(s, b, step.dst, step.dst_offset);
      if (!wait_for_region(dst, dst + bytes)) return false;
      core::reduce(dst, address(s, b, step.src, step.src_offset), step.count, dtype_, op_);
      return true;
    }
    case StepOp::Copy: {
      unsigned char* dst = address(s, b, step.dst, step.dst_offset);
      const unsigned char* src = address(s, b, step.src, step.src_offset);
      if (bytes && dst != src) {
        if (!wait_for_region(dst, dst + bytes)) return false;
        std::memcpy(dst, src, bytes);
      }
      return true;
    }
    case StepOp::Recv:
    case StepOp::RecvCopySend:
    case StepOp::RecvReduce:
    case StepOp::RecvReduceSend: {
      unsigned char* dst = address(s, b, step.dst, step.dst_offset);
      transport::Link* link = links_[step.recv_peer];
      KIZUNA_CHECK(link != nullptr, "no link from rank ", rank_, " to rank ", step.recv_peer);
      if (!recv_posted_) {
        if (!wait_for_region(dst, dst + bytes)) return false;
        transport::RecvSink sink;
        sink.dst = dst;
        sink.bytes = bytes;
        sink.dtype = dtype_;
        sink.op = op_;
        if (step.op == StepOp::RecvReduce || step.op == StepOp::RecvReduceSend)
          sink.src = address(s, b, step.src, step.src_offset);
        link->post_recv(sink, {tag_.seq, recv_index_[step.recv_peer]++, tag_.code});
        recv_link_ = link;
        recv_posted_ = true;
      }
      if (!wait_until([link] { return link->recv_done(); }, step.recv_peer)) return false;
      recv_posted_ = false;
      recv_link_ = nullptr;
      last_seq_from_[step.recv_peer] = tag_.seq;
      last_time_from_[step.recv_peer] = core::coarse_now();
      if (live_) live_->waiting_since_us.store(0, std::memory_order_relaxed);
      if (step.sends()) post_send(step.send_peer, dst, bytes);
      return true;
    }
  }
  return true;
}

}  // namespace kizuna::comm
