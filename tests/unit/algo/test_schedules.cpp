// Every schedule, proved on the simulator against the serial reference:
// worlds 1..33 (powers of two and not), counts 0, 1, < world, prime and many
// slices, in place and out of place, every root position; then every dtype x
// op for the reducing collectives.
#include <catch2/catch.hpp>

#include <cstring>
#include <set>

#include "simulate_collective.hpp"

using namespace kizuna;
using namespace kizuna::test;
using algo::Algorithm;
using algo::Collective;

namespace {
constexpr Collective kCollectives[] = {Collective::AllReduce, Collective::AllGather,
                                       Collective::ReduceScatter, Collective::Broadcast,
                                       Collective::Reduce, Collective::Barrier};
}

TEST_CASE("every schedule is correct on the simulator for worlds 1..33", "[schedule]") {
  const int world = GENERATE(range(1, 34));
  for (Collective coll : kCollectives) {
    for (Algorithm algo : {Algorithm::Ring, Algorithm::Tree, Algorithm::OneShot, Algorithm::TwoShot,
                           Algorithm::Doubling}) {
      std::vector<std::uint64_t> counts{0, 1, 13, 1009};
      if (world > 2) counts.push_back(world - 1);
      for (std::uint64_t count : counts) {
        for (bool in_place : {false, true}) {
          for (auto [dtype, op] : {std::pair{DataType::Int32, ReduceOp::Sum},
                                   std::pair{DataType::Float16, ReduceOp::Avg}}) {
            SimCase c;
            c.collective = coll;
            c.algorithm = algo;
            c.world = world;
            c.count = count;
            c.dtype = dtype;
            c.op = op;
            c.in_place = in_place;
            c.root = (world * 2) / 3;  // not always rank 0
            c.slice_bytes = count > 100 ? 256 : 16;  // many slices per chunk
            const std::string wrong = simulate_and_check(c);
            if (!wrong.empty()) FAIL(describe(c) << ": " << wrong);
          }
        }
      }
    }
  }
}

TEST_CASE("broadcast and reduce that confirm their one-way edges stay correct, and no rank only sends", "[schedule]") {
  const int world = GENERATE(range(1, 34));
  for (Collective coll : {Collective::Broadcast, Collective::Reduce}) {
    for (Algorithm algo : {Algorithm::Ring, Algorithm::Tree}) {
      for (std::uint64_t count : {0, 1, 13, 1009}) {
        SimCase c;
        c.collective = coll;
        c.algorithm = algo;
        c.world = world;
        c.count = count;
        c.dtype = DataType::Int32;
        c.root = (world * 2) / 3;
        c.slice_bytes = 16;
        c.confirm = true;
        const std::string wrong = simulate_and_check(c);
        if (!wrong.empty()) FAIL(describe(c) << ": " << wrong);
        if (world == 1 || count == 0) continue;
        const std::vector<algo::RankSchedule> schedules = schedules_of(c);
        for (int r = 0; r < world; ++r) {
          std::set<int> sent, received;
          for (const algo::Step& step : schedules[r].steps) {
            if (step.sends()) sent.insert(step.send_peer);
            if (step.receives()) received.insert(step.recv_peer);
          }
          INFO(describe(c) << ", rank " << r);
          CHECK(sent == received);  // every edge goes both ways
        }
      }
    }
  }
}

TEST_CASE("every dtype x op for the reducing collectives", "[schedule]") {
  const int world = GENERATE(1, 2, 3, 4, 5, 7, 8);
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
      for (auto [coll, algo] : {std::pair{Collective::AllReduce, Algorithm::Ring},
                                std::pair{Collective::AllReduce, Algorithm::Tree},
                                std::pair{Collective::AllReduce, Algorithm::OneShot},
                                std::pair{Collective::AllReduce, Algorithm::TwoShot},
                                std::pair{Collective::AllReduce, Algorithm::Doubling},
                                std::pair{Collective::ReduceScatter, Algorithm::Ring},
                                std::pair{Collective::Reduce, Algorithm::Ring},
                                std::pair{Collective::Reduce, Algorithm::Tree}}) {
        for (std::uint64_t count : {7u, 300u}) {
          SimCase c;
          c.collective = coll;
          c.algorithm = algo;
          c.world = world;
          c.count = count;
          c.dtype = dtype;
          c.op = op;
          c.root = world - 1;
          c.slice_bytes = 64;
          const std::string wrong = simulate_and_check(c);
          if (!wrong.empty()) FAIL(describe(c) << ": " << wrong);
        }
      }
    }
  }
}

TEST_CASE("large buffers with realistic slices", "[schedule]") {
  for (int world : {2, 3, 4, 8}) {
    for (Collective coll : kCollectives) {
      for (Algorithm algo : {Algorithm::Ring, Algorithm::Tree, Algorithm::TwoShot, Algorithm::Doubling}) {
        SimCase c;
        c.collective = coll;
        c.algorithm = algo;
        c.world = world;
        c.count = 1'000'003;  // prime: uneven chunks and a short last slice
        c.dtype = DataType::Float32;
        c.op = ReduceOp::Sum;
        c.slice_bytes = 512 << 10;
        c.root = 1 % world;
        const std::string wrong = simulate_and_check(c);
        if (!wrong.empty()) FAIL(describe(c) << ": " << wrong);
      }
    }
  }
}

TEST_CASE("schedule requests are validated", "[schedule]") {
  algo::ScheduleRequest req;
  req.world_size = 0;
  CHECK_THROWS_AS(algo::make_schedule(req), Error);
  req.world_size = 4;
  req.rank = 4;
  CHECK_THROWS_AS(algo::make_schedule(req), Error);
  req.rank = 0;
  req.collective = Collective::Broadcast;
  req.root = -1;
  CHECK_THROWS_WITH(algo::make_schedule(req), Catch::Contains("root -1"));
}

TEST_CASE("all-gather and reduce-scatter with rank blocks a stride apart use only their blocks", "[schedule]") {
  // A device call's part (comm/device_parts.hpp): `count` elements of each
  // rank's share, the blocks `stride` apart. Every element between the
  // blocks must keep its value; the blocks must hold the serial result.
  constexpr std::int32_t kUntouched = -7;
  for (int world : {1, 2, 3, 5}) {
    for (std::uint64_t count : {1, 13, 1009}) {
      const std::uint64_t stride = count + 37;
      const std::uint64_t span = stride * (world - 1) + count;
      for (Collective coll : {Collective::AllGather, Collective::ReduceScatter}) {
        CAPTURE(world, count, algo::name(coll));
        SimCase c;
        c.collective = coll;
        c.world = world;
        c.count = count;
        c.dtype = DataType::Int32;
        c.slice_bytes = 256;
        c.block_stride = stride;
        const std::vector<algo::RankSchedule> schedules = schedules_of(c);
        const bool gather = coll == Collective::AllGather;
        std::vector<std::vector<std::int32_t>> in(world), out(world);
        std::vector<algo::SimRank> bufs(world);
        auto value = [](int r, std::uint64_t q, std::uint64_t i) { return std::int32_t(r * 100000 + q * 1000 + i); };
        for (int r = 0; r < world; ++r) {
          in[r].assign(gather ? count : span, kUntouched);
          out[r].assign(gather ? span : count, kUntouched);
          for (std::uint64_t q = 0; q < (gather ? 1u : std::uint64_t(world)); ++q)
            for (std::uint64_t i = 0; i < count; ++i) in[r][q * stride + i] = value(r, q, i);
          REQUIRE(schedules[r].input_count == in[r].size());
          REQUIRE(schedules[r].output_count == out[r].size());
          bufs[r] = {reinterpret_cast<unsigned char*>(in[r].data()), reinterpret_cast<unsigned char*>(out[r].data())};
        }
        algo::simulate(schedules, DataType::Int32, ReduceOp::Sum, bufs);
        for (int r = 0; r < world; ++r) {
          CAPTURE(r);
          for (std::uint64_t x = 0; x < out[r].size(); ++x) {
            const std::uint64_t q = x / stride, i = x % stride;
            std::int32_t expected = kUntouched;
            if (!gather) {
              expected = 0;
              for (int p = 0; p < world; ++p) expected += value(p, std::uint64_t(r), x);
            } else if (i < count) {
              expected = value(int(q), 0, i);
            }
            if (out[r][x] != expected) FAIL("output element " << x << ": " << out[r][x] << ", expected " << expected);
          }
        }
      }
    }
  }
  algo::ScheduleRequest overlapping;
  overlapping.collective = Collective::AllGather;
  overlapping.world_size = 2;
  overlapping.count = 10;
  overlapping.block_stride = 9;
  CHECK_THROWS_WITH(algo::make_schedule(overlapping), Catch::Contains("would overlap"));
}

TEST_CASE("ring all-reduce moves 2(N-1)/N of the buffer per rank", "[schedule]") {
  algo::ScheduleRequest req;
  req.collective = Collective::AllReduce;
  req.world_size = 4;
  req.rank = 1;
  req.count = 4096;
  req.slice_bytes = 1 << 20;
  const algo::RankSchedule s = algo::make_schedule(req);
  std::uint64_t sent = 0;
  for (const auto& step : s.steps)
    if (step.sends()) {
      sent += step.count;
      CHECK(step.send_peer == 2);
    }
  CHECK(sent == 2 * 3 * 4096 / 4);
  CHECK(s.steps.size() == 2 * 4 - 1);
}

TEST_CASE("hierarchical all-reduce is correct for many node layouts", "[schedule]") {
  std::vector<std::vector<int>> layouts{
      {0, 0, 1, 1}, {0, 0, 0, 1, 1}, {0, 1, 1, 1}, {0, 1, 0, 1}, {1, 0, 1, 0, 2, 2, 2},
      {0, 0, 1, 2, 2, 3}, {5, 5, 5, 5, 9, 9, 9, 9}, {0, 1, 2, 0, 1, 2, 0, 1, 2}};
  for (int world = 2; world <= 17; world += 3) {
    std::vector<int> round_robin(world), blocks(world);
    for (int r = 0; r < world; ++r) round_robin[r] = r % 3, blocks[r] = r / 4;
    layouts.push_back(round_robin);
    layouts.push_back(blocks);
  }
  for (const auto& nodes : layouts) {
    const int world = static_cast<int>(nodes.size());
    for (Algorithm algo : {Algorithm::Ring, Algorithm::Tree, Algorithm::TwoShot, Algorithm::Doubling}) {
      for (std::uint64_t count : {0ull, 1ull, 13ull, 1009ull, 300007ull}) {
        for (bool in_place : {false, true}) {
          SimCase c;
          c.collective = Collective::AllReduce;
          c.algorithm = algo;
          c.world = world;
          c.count = count;
          c.dtype = count > 1000 ? DataType::Float32 : DataType::Float16;
          c.op = count > 1000 ? ReduceOp::Sum : ReduceOp::Avg;
          c.in_place = in_place;
          c.slice_bytes = count > 100000 ? 64 << 10 : 32;
          c.node_of = nodes;
          const std::string wrong = simulate_and_check(c);
          if (!wrong.empty()) FAIL(describe(c) << ": " << wrong);
        }
      }
    }
  }
}

TEST_CASE("a node map makes all-reduce hierarchical only when it helps", "[schedule]") {
  algo::ScheduleRequest req;
  req.world_size = 4;
  req.count = 100;
  req.node_of = {0, 0, 1, 1};
  CHECK(algo::is_hierarchical(req));
  CHECK(algo::make_schedule(req).hierarchical);
  req.node_of = {0, 0, 0, 0};  // one node
  CHECK_FALSE(algo::is_hierarchical(req));
  req.node_of = {0, 1, 2, 3};  // one rank per node: nothing to gain
  CHECK_FALSE(algo::is_hierarchical(req));
  req.node_of = {0, 0, 1};
  CHECK_THROWS_WITH(algo::make_schedule(req), Catch::Contains("node map of 3 ranks"));
}

TEST_CASE("one-shot all-reduce sends one message to every peer and reduces in rank order", "[schedule]") {
  algo::ScheduleRequest req;
  req.world_size = 5;
  req.rank = 2;
  req.count = 8;
  req.algorithm = Algorithm::OneShot;
  const algo::RankSchedule s = algo::make_schedule(req);
  std::vector<int> sent_to, reduced_from;
  for (const auto& step : s.steps) {
    if (step.sends()) sent_to.push_back(step.send_peer);
    if (step.receives()) reduced_from.push_back(step.recv_peer);
    if (step.op == algo::StepOp::LocalReduce) reduced_from.push_back(2);
  }
  CHECK(sent_to.size() == 4);
  CHECK(reduced_from == std::vector<int>{0, 1, 2, 3, 4});
}

TEST_CASE("doubling all-reduce swaps with one partner per round in log2 N rounds", "[schedule]") {
  // What a rank sends ("s") and receives ("r"), to and from whom, in order.
  const auto messages = [](int world, int rank) {
    algo::ScheduleRequest req;
    req.world_size = world;
    req.rank = rank;
    req.count = 16;
    req.algorithm = Algorithm::Doubling;
    const algo::RankSchedule s = algo::make_schedule(req);
    CHECK(s.algorithm == Algorithm::Doubling);
    std::string out;
    for (const auto& step : s.steps) {
      if (step.sends()) out += " s" + std::to_string(step.send_peer);
      if (step.receives()) out += " r" + std::to_string(step.recv_peer);
    }
    return out;
  };
  CHECK(messages(2, 0) == " s1 r1");
  CHECK(messages(8, 5) == " s4 r4 s7 r7 s1 r1");
  // 6 ranks: 4 take part in the rounds; ranks 0..3 pair up, 1 and 3 folding
  // in and standing for 0 and 2 among 1, 3, 4, 5.
  CHECK(messages(6, 0) == " s1 r1");
  CHECK(messages(6, 1) == " r0 s3 r3 s4 r4 s0");
  CHECK(messages(6, 5) == " s4 r4 s3 r3");
}

TEST_CASE("doubling and one-shot all-reduce give every rank the same bits when floats round", "[schedule]") {
  // Inputs whose sums round differently in different orders: each rank
  // must still end with exactly what every other rank has.
  for (Algorithm algo : {Algorithm::Doubling, Algorithm::OneShot}) {
    for (int world : {2, 3, 5, 6, 7, 8, 12}) {
      const std::uint64_t count = 37;
      std::vector<algo::RankSchedule> schedules;
      std::vector<std::vector<float>> in(world), out(world, std::vector<float>(count));
      std::vector<algo::SimRank> bufs(world);
      for (int r = 0; r < world; ++r) {
        algo::ScheduleRequest req;
        req.algorithm = algo;
        req.world_size = world;
        req.rank = r;
        req.count = count;
        schedules.push_back(algo::make_schedule(req));
        for (std::uint64_t i = 0; i < count; ++i)
          in[r].push_back(1.0f / static_cast<float>(3 + r * 7 + i) * (r % 2 ? 1e4f : 1e-3f));
        bufs[r] = {reinterpret_cast<unsigned char*>(in[r].data()),
                   reinterpret_cast<unsigned char*>(out[r].data())};
      }
      algo::simulate(schedules, DataType::Float32, ReduceOp::Sum, bufs);
      for (int r = 1; r < world; ++r) {
        INFO(algo::name(algo) << ", world " << world << ", rank " << r);
        CHECK(std::memcmp(out[r].data(), out[0].data(), count * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("two-shot all-reduce moves 2(N-1)/N of the buffer per rank in two rounds of direct messages", "[schedule]") {
  algo::ScheduleRequest req;
  req.world_size = 4;
  req.rank = 1;
  req.count = 4096;  // chunks of 1024
  req.slice_bytes = 1 << 20;
  req.algorithm = Algorithm::TwoShot;
  const algo::RankSchedule s = algo::make_schedule(req);
  CHECK(s.algorithm == Algorithm::TwoShot);
  std::vector<algo::StepOp> ops;
  std::vector<int> sent_to, received_from;
  std::uint64_t sent = 0;
  for (const auto& step : s.steps) {
    ops.push_back(step.op);
    if (step.sends()) sent_to.push_back(step.send_peer), sent += step.count;
    if (step.receives()) received_from.push_back(step.recv_peer);
  }
  using algo::StepOp;
  // round 1: chunk q to rank q; fold the peers' pieces of chunk 1; round 2:
  // chunk 1 to everyone, everyone's chunk into place.
  CHECK(ops == std::vector<StepOp>{StepOp::Send, StepOp::Send, StepOp::Send, StepOp::RecvReduce,
                                   StepOp::RecvReduce, StepOp::RecvReduce, StepOp::Send, StepOp::Send,
                                   StepOp::Send, StepOp::Recv, StepOp::Recv, StepOp::Recv});
  CHECK(sent_to == std::vector<int>{2, 3, 0, 2, 3, 0});
  CHECK(received_from == std::vector<int>{0, 3, 2, 0, 3, 2});
  CHECK(sent == 2 * 3 * 4096 / 4);
  CHECK(s.steps[0].src_offset == 2 * 1024);  // chunk 2 of the input to rank 2
  CHECK(s.steps[3].src == algo::Buffer::Input);  // the first fold starts from our own input
  CHECK(s.steps[4].src == algo::Buffer::Output);
  CHECK(s.steps[3].dst_offset == 1024);
}

TEST_CASE("two-shot sends each folded slice of its chunk to everyone before folding the next", "[schedule]") {
  algo::ScheduleRequest req;
  req.world_size = 4;
  req.rank = 1;
  req.count = 4096;  // chunks of 1024 elements, two slices each
  req.elem_size = 4;
  req.slice_bytes = 512 * 4;
  req.algorithm = Algorithm::TwoShot;
  const algo::RankSchedule s = algo::make_schedule(req);
  using algo::StepOp;
  std::vector<StepOp> ops;
  for (const auto& step : s.steps) ops.push_back(step.op);
  const std::vector<StepOp> fold_and_send{StepOp::RecvReduce, StepOp::RecvReduce, StepOp::RecvReduce,
                                          StepOp::Send,       StepOp::Send,       StepOp::Send};
  std::vector<StepOp> expected(6, StepOp::Send);  // round 1: 3 chunks of 2 slices
  for (int slice = 0; slice < 2; ++slice) expected.insert(expected.end(), fold_and_send.begin(), fold_and_send.end());
  expected.insert(expected.end(), 6, StepOp::Recv);
  CHECK(ops == expected);
  // Slice 0 of chunk 1 (elements 1024..1535) is folded from ranks 0, 3, 2
  // and leaves for ranks 2, 3, 0 before slice 1 is touched.
  for (int i = 6; i < 12; ++i) CHECK(s.steps[i].dst_offset == 1024);
  for (int i = 12; i < 18; ++i) CHECK(s.steps[i].dst_offset == 1536);
  CHECK(s.steps[6].recv_peer == 0);
  CHECK(s.steps[7].recv_peer == 3);
  CHECK(s.steps[8].recv_peer == 2);
  CHECK(s.steps[9].send_peer == 2);
  CHECK(s.steps[11].send_peer == 0);
}
