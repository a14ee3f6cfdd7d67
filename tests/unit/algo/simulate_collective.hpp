// Runs one collective on the simulator with closed-form inputs and checks
// every rank's output against the serial reference. Returns "" on success,
// otherwise what went wrong (first wrong rank and index, got, expected).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "algo/schedule.hpp"
#include "algo/simulator.hpp"
#include "collective_reference.hpp"
#include "core/reduce.hpp"

namespace kizuna::test {

struct SimCase {
  algo::Collective collective = algo::Collective::AllReduce;
  algo::Algorithm algorithm = algo::Algorithm::Ring;
  int world = 1;
  std::uint64_t count = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  std::uint64_t slice_bytes = 64;
  bool in_place = false;
  int root = 0;
  std::vector<int> node_of;  // empty: one node
  bool confirm = false;      // broadcast and reduce confirm their one-way edges
  std::uint64_t block_stride = 0;  // all-gather's and reduce-scatter's rank blocks (0: side by side)
};

inline std::string describe(const SimCase& c) {
  std::ostringstream out;
  out << name(c.collective) << " " << algo::name(c.algorithm) << " world " << c.world << " count "
      << c.count << " " << name(c.dtype) << " " << name(c.op) << " slice " << c.slice_bytes
      << (c.in_place ? " in-place" : " out-of-place") << " root " << c.root << (c.confirm ? " confirmed" : "");
  if (!c.node_of.empty()) {
    out << " nodes";
    for (int n : c.node_of) out << " " << n;
  }
  return out.str();
}

// Every rank's schedule of the case.
inline std::vector<algo::RankSchedule> schedules_of(const SimCase& c) {
  std::vector<algo::RankSchedule> schedules;
  for (int r = 0; r < c.world; ++r) {
    algo::ScheduleRequest req;
    req.collective = c.collective;
    req.algorithm = c.algorithm;
    req.world_size = c.world;
    req.rank = r;
    req.root = c.root;
    req.count = c.count;
    req.elem_size = size_of(c.dtype);
    req.slice_bytes = c.slice_bytes;
    req.node_of = c.node_of;
    req.confirm = c.confirm;
    req.block_stride = c.block_stride;
    schedules.push_back(algo::make_schedule(req));
  }
  return schedules;
}

inline std::string simulate_and_check(const SimCase& c) {
  using algo::Collective;
  const CollectiveReference ref(c.dtype, c.op);
  const std::size_t elem = ref.elem();
  const int n = c.world;
  const std::vector<algo::RankSchedule> schedules = schedules_of(c);
  // Storage per rank, big enough for both buffers; in place they share it.
  std::vector<std::vector<unsigned char>> in_store(n), out_store(n);
  std::vector<algo::SimRank> bufs(n);
  const std::uint64_t count = c.count;
  for (int r = 0; r < n; ++r) {
    const auto& s = schedules[r];
    out_store[r].assign(std::max<std::uint64_t>(s.output_count, 1) * elem, 0xEE);
    std::vector<unsigned char> input;
    if (c.collective == Collective::ReduceScatter) input = ref.input_buffer(r, count * n);
    else if (c.collective != Collective::Barrier) input = ref.input_buffer(r, count);
    if (!c.in_place || c.collective == Collective::Barrier ||
        (c.collective == Collective::Reduce && r != c.root)) {
      in_store[r] = input;
      in_store[r].resize(std::max<std::size_t>(input.size(), 1));
      bufs[r] = {in_store[r].data(), out_store[r].data()};
      continue;
    }
    switch (c.collective) {
      case Collective::AllGather:  // input = output + rank * count
        std::copy(input.begin(), input.end(), out_store[r].begin() + r * count * elem);
        bufs[r] = {out_store[r].data() + r * count * elem, out_store[r].data()};
        break;
      case Collective::ReduceScatter:  // output = input + rank * count
        in_store[r] = input;
        in_store[r].resize(std::max<std::size_t>(input.size(), 1));
        bufs[r] = {in_store[r].data(), in_store[r].data() + r * count * elem};
        break;
      default:  // all-reduce, broadcast, reduce at the root: one buffer
        out_store[r] = input;
        out_store[r].resize(std::max<std::size_t>(input.size(), 1));
        bufs[r] = {out_store[r].data(), out_store[r].data()};
        break;
    }
  }
  try {
    algo::simulate(schedules, c.dtype, c.op, bufs);
  } catch (const Error& e) {
    return e.what();
  }
  for (int r = 0; r < n; ++r) {
    unsigned char* out = bufs[r].output;
    std::string wrong;
    switch (c.collective) {
      case Collective::AllReduce:
        if (c.op == ReduceOp::Avg) core::scale(out, count, c.dtype, n);
        wrong = ref.compare(out, count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, i, w); });
        break;
      case Collective::ReduceScatter:
        if (c.op == ReduceOp::Avg) core::scale(out, count, c.dtype, n);
        wrong = ref.compare(out, count,
                            [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, r * count + i, w); });
        break;
      case Collective::AllGather:
        wrong = ref.compare(out, count * n, [&](std::uint64_t i, unsigned char* w) {
          ref.input(static_cast<int>(i / std::max<std::uint64_t>(count, 1)), i % std::max<std::uint64_t>(count, 1), w);
        });
        break;
      case Collective::Broadcast:
        wrong = ref.compare(out, count, [&](std::uint64_t i, unsigned char* w) { ref.input(c.root, i, w); });
        break;
      case Collective::Reduce:
        if (r != c.root) break;
        if (c.op == ReduceOp::Avg) core::scale(out, count, c.dtype, n);
        wrong = ref.compare(out, count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, i, w); });
        break;
      case Collective::Barrier: break;
    }
    if (!wrong.empty()) return "rank " + std::to_string(r) + ": " + wrong;
  }
  return "";
}

}  // namespace kizuna::test
