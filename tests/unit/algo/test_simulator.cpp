// The simulator itself: it must catch broken schedules, not only run good ones.
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>

#include <vector>

#include "algo/simulator.hpp"

using namespace kizuna;
using namespace kizuna::algo;

namespace {
RankSchedule with_steps(std::vector<Step> steps, std::uint64_t count) {
  RankSchedule s;
  s.input_count = s.output_count = count;
  s.steps = std::move(steps);
  return s;
}
Step recv(int from, std::uint64_t count) { return {StepOp::Recv, Buffer::Output, Buffer::Output, from, -1, 0, 0, count}; }
Step send(int to, std::uint64_t count) { return {StepOp::Send, Buffer::Input, Buffer::Input, -1, to, 0, 0, count}; }
}  // namespace

TEST_CASE("a recv with no matching send is reported as a deadlock naming the ranks", "[simulator]") {
  // rank 0 and rank 1 both wait for the other first
  std::vector<RankSchedule> s{with_steps({recv(1, 4), send(1, 4)}, 4), with_steps({recv(0, 4), send(0, 4)}, 4)};
  std::vector<float> a(4), b(4), c(4), d(4);
  std::vector<SimRank> bufs{{reinterpret_cast<unsigned char*>(a.data()), reinterpret_cast<unsigned char*>(b.data())},
                            {reinterpret_cast<unsigned char*>(c.data()), reinterpret_cast<unsigned char*>(d.data())}};
  try {
    simulate(s, DataType::Float32, ReduceOp::Sum, bufs);
    FAIL("no deadlock reported");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("deadlock") != std::string::npos);
    CHECK(what.find("rank 0 at step 0/2: recv from 1") != std::string::npos);
    CHECK(what.find("rank 1 at step 0/2: recv from 0") != std::string::npos);
  }
}

TEST_CASE("a message of the wrong size is reported", "[simulator]") {
  std::vector<RankSchedule> s{with_steps({send(1, 3)}, 4), with_steps({recv(0, 4)}, 4)};
  std::vector<float> a(4), b(4), c(4), d(4);
  std::vector<SimRank> bufs{{reinterpret_cast<unsigned char*>(a.data()), reinterpret_cast<unsigned char*>(b.data())},
                            {reinterpret_cast<unsigned char*>(c.data()), reinterpret_cast<unsigned char*>(d.data())}};
  CHECK_THROWS_WITH(simulate(s, DataType::Float32, ReduceOp::Sum, bufs),
                    Catch::Contains("received 3 elements from rank 0, expected 4"));
}

TEST_CASE("messages nobody receives are reported", "[simulator]") {
  std::vector<RankSchedule> s{with_steps({send(1, 1), send(1, 1)}, 4), with_steps({recv(0, 1)}, 4)};
  std::vector<float> a(4), b(4), c(4), d(4);
  std::vector<SimRank> bufs{{reinterpret_cast<unsigned char*>(a.data()), reinterpret_cast<unsigned char*>(b.data())},
                            {reinterpret_cast<unsigned char*>(c.data()), reinterpret_cast<unsigned char*>(d.data())}};
  CHECK_THROWS_WITH(simulate(s, DataType::Float32, ReduceOp::Sum, bufs),
                    Catch::Contains("rank 0 sent 1 message(s) to rank 1 that were never received"));
}

TEST_CASE("steps outside their buffer are reported", "[simulator]") {
  std::vector<RankSchedule> s{with_steps({send(1, 8)}, 4), with_steps({recv(0, 8)}, 4)};
  std::vector<float> a(8), b(8), c(8), d(8);
  std::vector<SimRank> bufs{{reinterpret_cast<unsigned char*>(a.data()), reinterpret_cast<unsigned char*>(b.data())},
                            {reinterpret_cast<unsigned char*>(c.data()), reinterpret_cast<unsigned char*>(d.data())}};
  CHECK_THROWS_WITH(simulate(s, DataType::Float32, ReduceOp::Sum, bufs), Catch::Contains("outside its buffer"));
}
