// comm/fingerprint.hpp: what KIZUNA_CHECK=1 compares across ranks before a
// collective: the call's kind, type, operator, root, count and sequence
// number, and whether it runs on symmetric memory, as 32 little-endian
// bytes.
#pragma once

#include <kizuna/types.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "algo/schedule.hpp"

namespace kizuna::comm {

struct Fingerprint {
  algo::Collective collective = algo::Collective::AllReduce;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  std::uint64_t count = 0;
  std::uint64_t seq = 0;
  bool symmetric = false;  // an all-reduce on symmetric memory's path (in place or staged)
  bool operator==(const Fingerprint&) const = default;
};

using FingerprintBytes = std::array<unsigned char, 32>;

FingerprintBytes encode(const Fingerprint& f);
Fingerprint decode(const unsigned char* bytes);

// "all_reduce(count 1024, float32, sum) #17"
std::string describe(const Fingerprint& f);

// "" when every rank made the same call; otherwise one line per distinct
// call with the ranks that made it.
std::string compare(const std::vector<Fingerprint>& by_rank);

}  // namespace kizuna::comm
