// comm/executor.hpp: runs one rank's schedule over its links (the CPU
// executor).
//
// Steps run in order. Sends are posted and not waited for; a step that
// receives posts the receive and drives every busy link's progress until the
// message is in, spinning briefly and then sleeping in poll(). Before a step
// writes a region that an earlier send is still reading (the tree's
// broadcast overwriting what it reduced and sent up, say), it waits for that
// send. At the end it waits for every send, so the caller may reuse the
// buffers as soon as run() returns.
//
// Failures are kizuna::Error naming the collective, its sequence number, the
// step and the rank involved: Timeout ("... waiting for rank 3 for 30000 ms
// in all_reduce #17 (ring, step 5 of 14)"), PeerLost, Mismatch. failed_peer()
// then says which link failed, if one did.
//
// Used by one thread at a time.
#pragma once

#include <kizuna/types.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algo/schedule.hpp"
#include "comm/history.hpp"
#include "transport/link.hpp"
#include "transport/shm/layout.hpp"

namespace kizuna::comm {

// What is running, for error messages; formatted only when one is needed
// ("all_reduce #17 (ring) on rank 2 of kizuna/comm0").
struct RunLabel {
  std::string_view what;       // "all_reduce", "send to rank", ...
  std::uint64_t seq = 0;       // shown as "#seq" when non-zero
  std::string_view algorithm;  // shown in parentheses when non-empty
  int peer = -1;               // shown after `what` when >= 0
  int rank = 0;
  const std::string* comm = nullptr;
  std::string_view suffix;     // appended as is
  std::string str() const;
};

// What every message of a call carries besides its index: the call's
// sequence number and its code (comm/call.hpp's message_code; 0 for
// point-to-point messages and the check's exchange).
struct CallTag {
  std::uint64_t seq = 0;
  std::uint32_t code = 0;
};

struct ExecBuffers {
  const void* input = nullptr;
  void* output = nullptr;
  void* scratch = nullptr;
};

class Executor {
 public:
  using Clock = std::chrono::steady_clock;

  // links[r] is the link to rank r (nullptr for self and unconnected ranks).
  Executor(std::vector<transport::Link*> links, int rank);

  // How long start() or resume() may wait for peers before it yields;
  // kHoldOn: until the schedule is done.
  static constexpr Clock::duration kHoldOn = Clock::duration::max();

  void run(const algo::RankSchedule& schedule, const ExecBuffers& buffers, DataType dtype,
           ReduceOp op, CallTag tag, Clock::time_point deadline, const RunLabel& label) {
    start(schedule, buffers, dtype, op, tag, deadline, label, kHoldOn);
  }

  // The same, for a caller that must not be held long: when it has waited
  // `patience` for peers (counted from its first look at the clock, which a
  // call whose peers are there never takes), or it would have to sleep,
  // start() returns false and leaves the schedule part-run; resume() goes
  // on from there (with the same schedule object and label contents, which
  // must stay alive until it returns true). Nothing else may run in between.
  bool start(const algo::RankSchedule& schedule, const ExecBuffers& buffers, DataType dtype, ReduceOp op,
             CallTag tag, Clock::time_point deadline, const RunLabel& label, Clock::duration patience);
  bool resume(const RunLabel& label, Clock::duration patience);

  int failed_peer() const { return failed_peer_; }
  // The collective of the last message received from `peer` (0: none yet).
  std::uint64_t last_seq_from(int peer) const { return last_seq_from_.at(peer); }
  // When the failure is a peer's abort notice: the notice (its origin and
  // root cause), to be passed on unchanged.
  const transport::AbortNotice* cause() const { return cause_ ? &*cause_ : nullptr; }

  // Waiting: spin on progress() for `spin`, then keep looking but yield the
  // core between looks for `yield`, then sleep (poll() on sockets, the
  // doorbell for shared memory). With `spin` 0 a wait that polls a socket
  // yields from its first round that finds nothing.
  void set_wait(std::chrono::microseconds spin, std::chrono::microseconds yield) {
    spin_ = spin;
    yield_ = yield;
  }
  // Where run() publishes its progress (for the stuck-rank report).
  void set_live(LiveProgress* live) { live_ = live; }
  // This rank's shared-memory doorbell, when some links use shared memory.
  void set_doorbell(transport::shm::SegmentHeader* doorbell) { doorbell_ = doorbell; }

 private:
  struct PendingSend {
    transport::Link* link;
    std::uint64_t number;
    const unsigned char* begin;
    const unsigned char* end;
  };

  static unsigned char* address(const algo::RankSchedule& s, const ExecBuffers& b, algo::Buffer which,
                                std::uint64_t offset) {
    const std::size_t at = offset * s.request.elem_size;
    switch (which) {
      case algo::Buffer::Input: return static_cast<unsigned char*>(const_cast<void*>(b.input)) + at;
      case algo::Buffer::Output: return static_cast<unsigned char*>(b.output) + at;
      case algo::Buffer::Scratch: return static_cast<unsigned char*>(b.scratch) + at;
    }
    return nullptr;
  }
  // Runs the steps from step_ on; false when it must yield (see start()).
  bool advance();
  bool run_step(const algo::Step& step);
  void post_send(int peer, const unsigned char* data, std::size_t bytes);
  // Rethrows a link's error `e` naming the call, its step and, for a
  // message of another call, what that call is.
  [[noreturn]] void link_failed(transport::Link* link, const Error& e);
  // These return false when they must yield, having changed nothing.
  // wait_for_region: before a step writes [begin, end), waits for the
  // sends still reading it (most steps of a small call have none in flight).
  bool wait_for_region(const unsigned char* begin, const unsigned char* end) {
    return pending_.empty() || wait_for_sends_over(begin, end);
  }
  bool wait_for_sends_over(const unsigned char* begin, const unsigned char* end);
  bool wait_all_sends();
  // ", rank 3's last message here was in #16, 12.3 s ago" (or that none came).
  std::string last_heard(int peer) const;

  // Progresses busy links until done() holds (true) or it must yield
  // (false); `awaiting` names the peer whose message or progress we wait
  // for (-1: any), for the error message.
  template <typename Done>
  bool wait_until(Done&& done, int awaiting);
  // The Timeout of a wait for `awaiting` (-1: any) at `now`.
  [[noreturn, gnu::cold]] void timed_out(Clock::time_point now, int awaiting) const;
  // Nothing moves: sleeps until a busy link can (poll() on sockets, the
  // doorbell for shared memory), briefly, or until the deadline.
  void sleep_a_while(Clock::time_point now);
  // progress() on every busy link; true if anything moved.
  bool progress_busy();
  // check_peer() on every shared-memory link (before sleeping).
  void check_peers();

  std::vector<transport::Link*> links_;
  // Per link: polling it is a system call (a socket), not a look at memory.
  std::vector<bool> polled_by_syscall_;
  bool polled_syscall_ = false;  // the last progress_busy() made one
  int rank_;
  std::vector<std::uint32_t> send_index_, recv_index_;
  // The collective of the last message received from each peer, and when.
  std::vector<std::uint64_t> last_seq_from_;
  std::vector<Clock::time_point> last_time_from_;
  LiveProgress* live_ = nullptr;
  std::vector<PendingSend> pending_;
  static constexpr std::size_t kForgetSendsFrom = 16;  // completed ones are dropped from this many
  transport::Link* recv_link_ = nullptr;
  std::chrono::microseconds spin_{20};
  std::chrono::microseconds yield_{50};
  transport::shm::SegmentHeader* doorbell_ = nullptr;
  int failed_peer_ = -1;
  std::optional<transport::AbortNotice> cause_;

  // What is running, and where it is.
  const algo::RankSchedule* schedule_ = nullptr;
  ExecBuffers buffers_;
  DataType dtype_ = DataType::Float32;
  ReduceOp op_ = ReduceOp::Sum;
  CallTag tag_;
  bool recv_posted_ = false;  // the receive of step_ is posted
  bool draining_ = false;     // every step has run; only sends are left
  Clock::duration patience_ = kHoldOn;
  Clock::time_point yield_at_ = Clock::time_point::max();  // set at the first look at the clock
  const RunLabel* label_ = nullptr;  // for error messages
  std::size_t step_ = 0;
  std::size_t steps_ = 0;
  Clock::time_point deadline_;
  Clock::time_point started_;
};

}  // namespace kizuna::comm
