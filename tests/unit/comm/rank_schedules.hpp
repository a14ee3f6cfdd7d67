// rank_schedules.hpp: for the tests that run schedules some other way than
// the executor (device step tables, the FIFO walk): every rank's schedule
// of one collective, and the simulator's result for inputs from a
// CollectiveReference, to compare theirs with.
#pragma once

#include <algorithm>
#include <vector>

#include "algo/schedule.hpp"
#include "algo/simulator.hpp"
#include "collective_reference.hpp"

namespace kizuna::test {

// Rank 0..world-1's schedules, the root (of rooted collectives) in the middle.
inline std::vector<algo::RankSchedule> rank_schedules(algo::Collective c, algo::Algorithm a, int world,
                                                      std::uint64_t count, std::size_t elem,
                                                      std::uint64_t slice_bytes, std::uint64_t block_stride = 0) {
  std::vector<algo::RankSchedule> out;
  for (int r = 0; r < world; ++r) {
    algo::ScheduleRequest req;
    req.collective = c;
    req.algorithm = a;
    req.world_size = world;
    req.rank = r;
    req.root = world / 2;
    req.count = count;
    req.elem_size = elem;
    req.slice_bytes = slice_bytes;
    req.block_stride = block_stride;
    out.push_back(algo::make_schedule(req));
  }
  return out;
}

// Every rank's input from `ref` and its output zeroed (one element at
// least, so that a buffer is never null), and copies of both that the
// simulator has run the schedules on (in place: the output is the input).
struct Simulated {
  std::vector<std::vector<unsigned char>> in, out, sim_in, sim_out;
};

inline Simulated simulate_ranks(const CollectiveReference& ref, const std::vector<algo::RankSchedule>& schedules,
                                DataType dtype, ReduceOp op, bool in_place = false) {
  const int world = static_cast<int>(schedules.size());
  Simulated s{std::vector<std::vector<unsigned char>>(world), std::vector<std::vector<unsigned char>>(world), {}, {}};
  std::vector<algo::SimRank> sim(world);
  for (int r = 0; r < world; ++r) {
    s.in[r] = ref.input_buffer(r, std::max<std::uint64_t>(schedules[r].input_count, 1));
    s.out[r].assign(std::max<std::uint64_t>(schedules[r].output_count, 1) * ref.elem(), 0);
  }
  s.sim_in = s.in;
  s.sim_out = s.out;
  for (int r = 0; r < world; ++r) sim[r] = {s.sim_in[r].data(), in_place ? s.sim_in[r].data() : s.sim_out[r].data()};
  algo::simulate(schedules, dtype, op, sim);
  return s;
}

}  // namespace kizuna::test
