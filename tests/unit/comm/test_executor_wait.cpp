// comm/executor.hpp: how a waiting executor paces its polling. A rank that
// does not spin (spin 0: more ranks than cores) and polls a socket (a
// system call a round) looks at the clock, and so yields, from its first
// round that finds nothing; a spinning rank, or one that polls only
// memory, polls a few rounds before its first look. Observed through a
// fake link that never delivers and counts its polls, with no patience:
// start() gives up at the first look at the clock.
#include <catch2/catch.hpp>

#include <chrono>

#include "comm/executor.hpp"

using namespace kizuna;
using namespace kizuna::comm;

namespace {

// A link whose message never comes; counts progress() calls. `doorbell`:
// it stands for a shared-memory link (polled in memory), else a socket.
class SilentLink final : public transport::Link {
 public:
  SilentLink(int peer, bool doorbell) : Link(peer), doorbell_(doorbell) {}
  std::uint64_t post_send(const void*, std::size_t, const transport::MessageTag&) override { return ++posted_; }
  std::uint64_t sent_count() const override { return posted_; }
  void post_recv(const transport::RecvSink&, const transport::MessageTag&) override {}
  bool recv_done() const override { return false; }
  bool progress() override {
    ++polls;
    return false;
  }
  int wait_fd() const override { return -1; }
  short wait_events() const override { return 0; }
  bool uses_doorbell() const override { return doorbell_; }
  void send_abort(const transport::AbortNotice&, std::chrono::milliseconds) override {}
  void interrupt() override {}

  int polls = 0;

 private:
  bool doorbell_;
};

// Polls made before an executor with no patience, waiting for one message
// from rank 1, gives up.
int polls_before_first_look(bool doorbell, std::chrono::microseconds spin) {
  SilentLink link(1, doorbell);
  Executor executor({nullptr, &link}, 0);
  executor.set_wait(spin, std::chrono::microseconds(1000));
  algo::RankSchedule schedule;
  schedule.request.elem_size = 4;
  schedule.input_count = schedule.output_count = 1;
  algo::Step recv;
  recv.op = algo::StepOp::Recv;
  recv.recv_peer = 1;
  recv.dst = algo::Buffer::Output;
  recv.count = 1;
  schedule.steps.push_back(recv);
  float in = 1, out = 0;
  const std::string comm = "test";
  const RunLabel label{"all_reduce", 1, "test", -1, 0, &comm, ""};
  const bool done = executor.start(schedule, {&in, &out, nullptr}, DataType::Float32, ReduceOp::Sum, {1, 0},
                                   Executor::Clock::now() + std::chrono::seconds(60), label,
                                   Executor::Clock::duration::zero());
  REQUIRE_FALSE(done);
  return link.polls;
}

}  // namespace

TEST_CASE("executor: without a spin, a wait on a socket looks at once", "[executor]") {
  CHECK(polls_before_first_look(false, std::chrono::microseconds(0)) == 1);
}

TEST_CASE("executor: a spinning wait, or one on memory, polls a few rounds first", "[executor]") {
  CHECK(polls_before_first_look(false, std::chrono::microseconds(200)) > 1);
  CHECK(polls_before_first_look(true, std::chrono::microseconds(0)) > 1);
  CHECK(polls_before_first_look(true, std::chrono::microseconds(200)) > 1);
}
