// tests/support/collective_cases.hpp: the cases the collective tests sweep,
// on host buffers and on device buffers alike: which collective, type,
// operator, count and placement; how a failure names one; and the element
// each rank's output must then hold (collective_reference.hpp's closed form).
//
// Conventions shared by every sweep: rooted collectives use the last rank
// as root; a reduce-scatter's or all-gather's `count` is per rank.
#pragma once

#include <kizuna/types.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "collective_reference.hpp"

namespace kizuna::test {

enum class Op { AllReduce, ReduceScatter, Reduce, AllGather, Broadcast };

inline const char* op_name(Op o) {
  switch (o) {
    case Op::AllReduce: return "all_reduce";
    case Op::ReduceScatter: return "reduce_scatter";
    case Op::Reduce: return "reduce";
    case Op::AllGather: return "all_gather";
    case Op::Broadcast: return "broadcast";
  }
  return "?";
}

struct Case {
  Op op;
  DataType dtype;
  ReduceOp rop;
  std::uint64_t count;
  bool in_place;

  // "all_reduce float32 sum count 13 in place"
  std::string str() const {
    std::ostringstream out;
    out << op_name(op) << " " << name(dtype) << " " << name(rop) << " count " << count << (in_place ? " in place" : "");
    return out.str();
  }
};

// For each of `dtypes`: the reductions with each of `rops` defined on the
// type (Avg on floating types only), all-gather and broadcast with Sum; at
// counts 0, 1, fewer than the ranks, 13 and 5003; in place and not.
inline std::vector<Case> standard_cases(int world, const std::vector<DataType>& dtypes,
                                        const std::vector<ReduceOp>& rops) {
  std::vector<Case> cases;
  const std::uint64_t counts[] = {0, 1, static_cast<std::uint64_t>(world > 1 ? world - 1 : 1), 13, 5003};
  for (DataType dtype : dtypes) {
    for (ReduceOp rop : rops) {
      if (rop == ReduceOp::Avg && !is_floating(dtype)) continue;
      for (std::uint64_t count : counts)
        for (bool in_place : {false, true})
          for (Op o : {Op::AllReduce, Op::ReduceScatter, Op::Reduce}) cases.push_back({o, dtype, rop, count, in_place});
    }
    for (std::uint64_t count : counts)
      for (bool in_place : {false, true})
        for (Op o : {Op::AllGather, Op::Broadcast}) cases.push_back({o, dtype, ReduceOp::Sum, count, in_place});
  }
  return cases;
}

// Element `i` of rank `rank`'s output (the root's, for a reduce) after
// collective `o` over `world` ranks, `count` elements per rank.
inline void expected_output(const CollectiveReference& ref, Op o, int world, int rank, std::uint64_t count,
                            std::uint64_t i, unsigned char* out) {
  switch (o) {
    case Op::AllReduce:
    case Op::Reduce: ref.reduced(world, i, out); break;
    case Op::ReduceScatter: ref.reduced(world, rank * count + i, out); break;
    case Op::AllGather: ref.input(static_cast<int>(i / count), i % count, out); break;
    case Op::Broadcast: ref.input(world - 1, i, out); break;
  }
}

}  // namespace kizuna::test
