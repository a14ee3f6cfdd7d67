// The CUDA executor's step table, checked without a GPU: encoding round
// trips, the decoder refuses bad tables, and kernels::run_step (the
// interpreter's per-step logic, __host__ __device__) executes whole
// schedules exactly like the simulator, for worlds 1..9.
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>

#include <cstring>
#include <deque>

#include "collective_reference.hpp"
#include "comm/device_steps.hpp"
#include "rank_schedules.hpp"

using namespace kizuna;
using namespace kizuna::test;
using algo::Algorithm;
using algo::Collective;

namespace {

std::vector<algo::RankSchedule> schedules_for(Collective c, Algorithm a, int world, std::uint64_t count,
                                              std::size_t elem) {
  return rank_schedules(c, a, world, count, elem, 64);
}

bool same(const algo::Step& a, const algo::Step& b) {
  return a.op == b.op && a.src == b.src && a.dst == b.dst && a.recv_peer == b.recv_peer &&
         a.send_peer == b.send_peer && a.src_offset == b.src_offset && a.dst_offset == b.dst_offset &&
         a.count == b.count;
}

// Executes every rank's encoded table with kernels::run_step, passing
// messages through FIFOs as the simulator does.
template <typename Codec, typename Op>
void run_tables(const std::vector<algo::RankSchedule>& schedules,
                std::vector<std::vector<unsigned char>>& inputs, std::vector<std::vector<unsigned char>>& outputs) {
  using S = typename Codec::Storage;
  const int n = static_cast<int>(schedules.size());
  std::vector<std::vector<kernels::DeviceStep>> tables;
  std::vector<std::vector<S>> scratch(n);
  for (int r = 0; r < n; ++r) {
    tables.push_back(comm::encode_steps(schedules[r]));
    scratch[r].resize(schedules[r].scratch_count);
  }
  std::vector<std::deque<std::vector<S>>> fifo(n * n);
  std::vector<std::size_t> pc(n, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      while (pc[r] < tables[r].size()) {
        const kernels::DeviceStep& s = tables[r][pc[r]];
        std::vector<S> in, out;
        if (kernels::step_receives(s.op)) {
          auto& q = fifo[s.recv_peer * n + r];
          if (q.empty()) break;
          in = std::move(q.front());
          q.pop_front();
          REQUIRE(in.size() == s.count);
        }
        if (kernels::step_sends(s.op)) out.resize(s.count);
        kernels::StepBuffers<S> b{{reinterpret_cast<S*>(inputs[r].data()), reinterpret_cast<S*>(outputs[r].data()),
                                   scratch[r].data()}};
        kernels::run_step<Codec, Op>(s, b, in.data(), out.data(), 0, s.count);
        if (kernels::step_sends(s.op)) fifo[r * n + s.send_peer].push_back(std::move(out));
        ++pc[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < n; ++r) REQUIRE(pc[r] == tables[r].size());
}

template <typename Codec, typename Op>
void compare_with_simulator(DataType dtype, ReduceOp rop) {
  const CollectiveReference ref(dtype, rop);
  const std::size_t elem = ref.elem();
  for (int world = 1; world <= 9; ++world) {
    for (Collective c : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
                         Collective::Broadcast, Collective::Reduce}) {
      for (Algorithm a : {Algorithm::Ring, Algorithm::Tree, Algorithm::OneShot, Algorithm::TwoShot, Algorithm::Doubling}) {
        for (std::uint64_t count : {0ull, 1ull, 37ull, 300ull}) {
          CAPTURE(world, algo::name(c), algo::name(a), count);
          const auto schedules = schedules_for(c, a, world, count, elem);
          Simulated s = simulate_ranks(ref, schedules, dtype, rop);
          run_tables<Codec, Op>(schedules, s.in, s.out);
          for (int r = 0; r < world; ++r) {
            CAPTURE(r);
            REQUIRE(s.out[r] == s.sim_out[r]);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("step tables round-trip through encode and decode", "[device_steps]") {
  for (int world : {1, 2, 3, 5, 8}) {
    for (Collective c : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
                         Collective::Broadcast, Collective::Reduce, Collective::Barrier}) {
      for (Algorithm a : {Algorithm::Ring, Algorithm::Tree, Algorithm::OneShot, Algorithm::TwoShot, Algorithm::Doubling}) {
        for (const auto& s : schedules_for(c, a, world, 1001, 4)) {
          const auto table = comm::encode_steps(s);
          const auto bytes = reinterpret_cast<const unsigned char*>(table.data());
          const auto back = comm::decode_steps(bytes, table.size() * sizeof(kernels::DeviceStep), world,
                                               s.input_count, s.output_count, s.scratch_count);
          REQUIRE(back.size() == s.steps.size());
          for (std::size_t i = 0; i < back.size(); ++i) REQUIRE(same(back[i], s.steps[i]));
        }
      }
    }
  }
}

TEST_CASE("the step-table decoder refuses what a schedule cannot contain", "[device_steps]") {
  const auto s = schedules_for(Collective::AllReduce, Algorithm::Ring, 4, 100, 4)[1];
  auto table = comm::encode_steps(s);
  auto decode = [&](const std::vector<kernels::DeviceStep>& t, std::size_t extra = 0) {
    return comm::decode_steps(reinterpret_cast<const unsigned char*>(t.data()),
                              t.size() * sizeof(kernels::DeviceStep) - extra, 4, 100, 100, 0);
  };
  CHECK_NOTHROW(decode(table));
  CHECK_THROWS_WITH(decode(table, 1), Catch::Contains("not a whole number"));
  auto bad = table;
  bad[0].op = static_cast<kernels::DeviceOp>(9);
  CHECK_THROWS_WITH(decode(bad), Catch::Contains("unknown operation 9"));
  std::size_t recv = 0;
  while (!kernels::step_receives(table[recv].op)) ++recv;
  bad = table;
  bad[recv].recv_peer = 4;
  CHECK_THROWS_WITH(decode(bad), Catch::Contains("receives from rank 4"));
  bad = table;
  bad[0].src_offset = ~0ull - 1;
  CHECK_THROWS_WITH(decode(bad), Catch::Contains("outside its buffer"));
  bad = table;
  bad[recv].dst = kernels::DeviceBuffer::Scratch;  // this rank has no scratch
  CHECK_THROWS_WITH(decode(bad), Catch::Contains("outside its buffer"));
}

TEST_CASE("run_step executes every schedule exactly like the simulator", "[device_steps]") {
  using namespace kizuna::kernels;
  compare_with_simulator<Plain<float>, SumOp>(DataType::Float32, ReduceOp::Sum);
  compare_with_simulator<Half, MaxOp>(DataType::Float16, ReduceOp::Max);
  compare_with_simulator<BFloat, MinOp>(DataType::BFloat16, ReduceOp::Min);
  compare_with_simulator<Plain<std::uint32_t>, ProdOp>(DataType::Int32, ReduceOp::Prod);
}

// Found by tests/fuzz/fuzz_device_steps.cpp: the decoder checks only the
// ranges a step uses, so run_step must not address the other side (forming
// a pointer far outside the buffer is undefined behaviour even unread).
TEST_CASE("a step's unused buffer side may hold any offset", "[device_steps]") {
  using namespace kizuna::kernels;
  DeviceStep table[2] = {};
  table[0].op = DeviceOp::Recv;
  table[0].recv_peer = 1;
  table[0].send_peer = -1;
  table[0].src_offset = ~0ull - 3;  // unused by Recv
  table[0].dst = DeviceBuffer::Output;
  table[0].count = 4;
  table[1].op = DeviceOp::Send;
  table[1].send_peer = 1;
  table[1].recv_peer = -1;
  table[1].dst_offset = ~0ull;  // unused by Send
  table[1].count = 4;
  const auto steps = comm::decode_steps(reinterpret_cast<const unsigned char*>(table), sizeof table, 2, 4, 4, 0);
  REQUIRE(steps.size() == 2);
  std::uint32_t input[4] = {1, 2, 3, 4}, output[4] = {}, in[4] = {5, 6, 7, 8}, out[4] = {};
  StepBuffers<std::uint32_t> b{{input, output, nullptr}};
  run_step<Plain<std::uint32_t>, SumOp>(table[0], b, in, out, 0, 4);
  CHECK(std::memcmp(output, in, sizeof in) == 0);
  run_step<Plain<std::uint32_t>, SumOp>(table[1], b, in, out, 0, 4);
  CHECK(std::memcmp(out, input, sizeof input) == 0);
}
