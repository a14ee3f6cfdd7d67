// The mailboxes (comm/mailbox.hpp): small all-reduces of ranks on one node,
// threads as ranks. Results against the serial reference, the mailboxes'
// reuse across calls that take other paths, and what happens when ranks
// disagree or one goes away.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "comm/mailbox.hpp"

#include "collective_cases.hpp"
#include "collective_sweep.hpp"
#include "error_of.hpp"
#include "every_rank_failed.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

CommOptions shm_options(std::chrono::milliseconds timeout = std::chrono::milliseconds(0)) {
  CommOptions options;
  options.transport = Transport::Shm;
  options.timeout = timeout;
  return options;
}

// Two ranks all-reduce `first` and `second` floats: each rank's error.
std::vector<Error> counts(const CommOptions& options, std::size_t first, std::size_t second) {
  const auto comms = make_comms(2, options);
  std::vector<Error> errors(2, Error(ErrorCode::Internal, "no error"));
  run_ranks(2, [&](int r) {
    std::vector<float> values(std::max(first, second), 1.0f);
    errors[r] = error_of(comms[r]->all_reduce(values.data(), r == 0 ? first : second, DataType::Float32,
                                              ReduceOp::Sum));
  });
  return errors;
}

// A link to a peer whose connection closes when `closed` says so; the
// first time the mailbox looks, `on_look` runs first (what the peer does
// just before its process exits).
class ClosingLink final : public transport::Link {
 public:
  explicit ClosingLink(int peer) : Link(peer) {}
  std::uint64_t post_send(const void*, std::size_t, const transport::MessageTag&) override { return ++posted_; }
  std::uint64_t sent_count() const override { return posted_; }
  void post_recv(const transport::RecvSink&, const transport::MessageTag&) override {}
  bool recv_done() const override { return false; }
  bool progress() override { return false; }
  int wait_fd() const override { return -1; }
  short wait_events() const override { return 0; }
  bool uses_doorbell() const override { return true; }
  bool peer_closed() override {
    if (on_look) std::exchange(on_look, nullptr)();
    return closed;
  }
  void send_abort(const transport::AbortNotice&, std::chrono::milliseconds) override {}
  void interrupt() override {}

  bool closed = false;
  std::function<void()> on_look;
};

// Two ranks' mailboxes over plain memory, each watching the other through
// a ClosingLink.
struct MailboxPair {
  std::vector<std::vector<std::uint64_t>> memory;
  ClosingLink to_0{0}, to_1{1};
  std::vector<comm::Mailbox> boxes;

  MailboxPair() : memory(2, std::vector<std::uint64_t>(comm::Mailbox::region_bytes() / 8 + 8)) {
    std::vector<unsigned char*> regions;
    for (auto& m : memory) {
      // The lines the mailbox keeps atomics in start on 64-byte boundaries.
      auto at = reinterpret_cast<std::uintptr_t>(m.data());
      regions.push_back(reinterpret_cast<unsigned char*>((at + 63) / 64 * 64));
    }
    for (int r = 0; r < 2; ++r) {
      comm::MailboxSetup setup;
      setup.rank = r;
      setup.world = 2;
      setup.links = r == 0 ? std::vector<transport::Link*>{nullptr, &to_1} : std::vector<transport::Link*>{&to_0, nullptr};
      setup.regions = regions;
      boxes.emplace_back(setup);
    }
  }
};

comm::Mailbox::Call sum_call(const float* input, float* output, std::uint64_t seq) {
  comm::Mailbox::Call call;
  call.input = input;
  call.output = output;
  call.count = 1;
  call.seq = seq;
  return call;
}

}  // namespace

TEST_CASE("small all-reduces through the mailboxes match the serial reference, in place and out of place", "[comm][mailbox]") {
  const int world = GENERATE(2, 3, 4, 5);
  const auto comms = make_comms(world, shm_options());
  std::vector<Case> cases;
  for (DataType dtype : kAllDataTypes)
    for (ReduceOp rop : kAllReduceOps) {
      if (rop == ReduceOp::Avg && !is_floating(dtype)) continue;
      // The largest count is the mailbox's whole 1 KiB.
      for (std::uint64_t count : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{7}, 1024 / size_of(dtype)})
        for (bool in_place : {false, true}) cases.push_back({Op::AllReduce, dtype, rop, count, in_place});
    }
  sweep(comms, cases, "world " + std::to_string(world));
}

TEST_CASE("mailbox all-reduces between broadcasts and large all-reduces, several in flight, keep every result", "[comm][mailbox]") {
  // A rank that is root of a broadcast finishes it without waiting for
  // anyone, so it can run ahead to its next mailbox call: the two mailboxes
  // must still hold what a slower peer has not read yet.
  const int world = 3;
  const auto comms = make_comms(world, shm_options(std::chrono::milliseconds(60'000)));
  constexpr int kRounds = 400;
  std::vector<int> wrong(world, 0);
  run_ranks(world, [&](int r) {
    Communicator& comm = *comms[r];
    std::vector<double> large(20'000);
    for (int round = 0; round < kRounds; ++round) {
      double small_a[4], small_b[4], bcast[2];
      for (int i = 0; i < 4; ++i) {
        small_a[i] = round * 100 + r * 10 + i;
        small_b[i] = -small_a[i];
      }
      bcast[0] = bcast[1] = r == round % world ? round : -1;
      std::fill(large.begin(), large.end(), r + round);
      Work a = comm.all_reduce(small_a, 4, DataType::Float64, ReduceOp::Sum);
      Work b = comm.broadcast(bcast, 2, DataType::Float64, round % world);
      Work c = comm.all_reduce(small_b, 4, DataType::Float64, ReduceOp::Max);
      Work d = round % 8 == 0 ? comm.all_reduce(large.data(), large.size(), DataType::Float64, ReduceOp::Sum) : Work();
      a.wait();
      b.wait();
      c.wait();
      if (round % 8 == 0) d.wait();
      for (int i = 0; i < 4; ++i) {
        // Sum over ranks q of round*100 + q*10 + i; max over q of -(...) is q = 0's.
        if (small_a[i] != world * (round * 100.0 + i) + 10.0 * world * (world - 1) / 2) ++wrong[r];
        if (small_b[i] != -(round * 100.0 + i)) ++wrong[r];
      }
      if (bcast[0] != round || bcast[1] != round) ++wrong[r];
      if (round % 8 == 0 && large.back() != world * round + world * (world - 1) / 2) ++wrong[r];
    }
  });
  for (int r = 0; r < world; ++r) CHECK(wrong[r] == 0);
}

TEST_CASE("ranks whose small all-reduces differ in count fail at once with Mismatch, naming both calls", "[comm][mailbox]") {
  const auto started = std::chrono::steady_clock::now();
  const std::vector<Error> errors = counts(shm_options(std::chrono::milliseconds(60'000)), 100, 101);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
  check_every_rank_failed(errors, ErrorCode::Mismatch,
                          Catch::Contains("(mailbox)") && Catch::Contains("all_reduce of 100 float32") &&
                              Catch::Contains("all_reduce of 101 float32"));
}

TEST_CASE("a rank whose call takes another path fails its peer's mailbox wait with Mismatch well before the deadline", "[comm][mailbox]") {
  // Rank 0's 400 bytes go through the mailboxes, rank 1's 400 KB through
  // the slots: each waits where the other never writes. Rank 0 sees rank
  // 1's announcement and fails; its notice fails rank 1.
  const auto started = std::chrono::steady_clock::now();
  const std::vector<Error> errors = counts(shm_options(std::chrono::milliseconds(60'000)), 100, 100'000);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
  check_every_rank_failed(errors, ErrorCode::Mismatch, Catch::Contains("not through the mailboxes"));
}

TEST_CASE("a rank that aborts fails its peer's mailbox all-reduce well before the deadline", "[comm][mailbox]") {
  const auto comms = make_comms(2, shm_options(std::chrono::milliseconds(120'000)));
  float values[16] = {};
  const auto started = std::chrono::steady_clock::now();
  Work waiting = comms[0]->all_reduce(values, 16, DataType::Float32, ReduceOp::Sum);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comms[1]->abort("the test stops rank 1");
  const Error e = error_of(waiting);
  INFO(e.what());
  CHECK((e.code() == ErrorCode::PeerLost || e.code() == ErrorCode::Aborted));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(30));
}

TEST_CASE("mailbox_upto = 0, or a forced algorithm, runs small all-reduces through the slots", "[comm][mailbox]") {
  CommOptions options = shm_options(std::chrono::milliseconds(20'000));
  const bool forced = GENERATE(true, false);
  if (forced) options.algorithm = Algorithm::OneShot;
  else options.mailbox_upto = 0;
  const std::vector<Error> errors = counts(options, 100, 101);
  check_every_rank_failed(errors, ErrorCode::Mismatch, !Catch::Contains("mailbox"));
}

TEST_CASE("mailbox_upto is the largest all-reduce through the mailboxes, and over 1 KiB an InvalidArgument", "[comm][mailbox]") {
  CommOptions options = shm_options(std::chrono::milliseconds(20'000));
  options.mailbox_upto = 400;
  const std::vector<Error> errors = counts(options, 100, 101);  // 400 bytes and 404: one path each
  check_every_rank_failed(errors, ErrorCode::Mismatch);
  options.mailbox_upto = 1025;
  CHECK(error_of_call([&] { make_comms(2, options); }).code() == ErrorCode::InvalidArgument);
}

TEST_CASE("a barrier through the mailboxes waits for the last rank, and against an all-reduce is a Mismatch", "[comm][mailbox]") {
  const int world = GENERATE(2, 4);
  const auto comms = make_comms(world, shm_options(std::chrono::milliseconds(60'000)));
  std::vector<double> waited_ms(world);
  run_ranks(world, [&](int r) {
    for (int round = 0; round < 3; ++round) {
      if (r == round % world) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const auto start = std::chrono::steady_clock::now();
      comms[r]->barrier().wait();
      if (round == 2)
        waited_ms[r] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
  });
  // Round 2's late rank is rank 2 % world; every other rank waited for it.
  for (int r = 0; r < world; ++r)
    if (r != 2 % world) CHECK(waited_ms[r] > 50);

  std::vector<Error> errors(2, Error(ErrorCode::Internal, "no error"));
  const auto pair = make_comms(2, shm_options(std::chrono::milliseconds(60'000)));
  run_ranks(2, [&](int r) {
    float value = 1;
    errors[r] = error_of(r == 0 ? pair[r]->barrier() : pair[r]->all_reduce(&value, 1, DataType::Float32, ReduceOp::Sum));
  });
  check_every_rank_failed(errors, ErrorCode::Mismatch,
                          Catch::Contains("barrier of 0") && Catch::Contains("all_reduce of 1 float32"));
}

TEST_CASE("a peer that posts its mailbox and then closes has finished its call, and one that closes first is lost", "[comm][mailbox]") {
  // The peer posts between the wait's look at its mailbox and the look at
  // its connection: the process had nothing left to do and exited.
  MailboxPair pair;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  comm::RunLabel label;
  label.what = "all_reduce";
  const float one = 1, two = 2;
  float got0 = 0, got1 = 0;
  pair.to_1.on_look = [&] {
    REQUIRE(pair.boxes[1].run(sum_call(&two, &got1, 1), deadline, label, comm::Executor::kHoldOn));
    pair.to_1.closed = true;
  };
  CHECK(pair.boxes[0].run(sum_call(&one, &got0, 1), deadline, label, comm::Executor::kHoldOn));
  CHECK(got0 == 3);
  CHECK(got1 == 3);
  CHECK(pair.boxes[0].failed_peer() == -1);

  // The next call: rank 1 is gone without posting it.
  const Error e = error_of_call([&] { pair.boxes[0].run(sum_call(&one, &got0, 2), deadline, label, comm::Executor::kHoldOn); });
  CHECK(e.code() == ErrorCode::PeerLost);
  CHECK_THAT(e.what(), Catch::Contains("lost rank 1"));
  CHECK(pair.boxes[0].failed_peer() == 1);
}
