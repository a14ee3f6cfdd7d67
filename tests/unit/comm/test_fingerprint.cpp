#include <catch2/catch.hpp>

#include "comm/fingerprint.hpp"

using namespace kizuna;
using namespace kizuna::comm;

TEST_CASE("fingerprints round-trip and differences are described per group of ranks", "[fingerprint]") {
  const Fingerprint a{algo::Collective::Broadcast, DataType::BFloat16, ReduceOp::Sum, 3, 77, 9};
  const FingerprintBytes bytes = encode(a);
  CHECK(decode(bytes.data()) == a);
  CHECK(describe(a) == "broadcast(count 77, bfloat16, root 3) #9");
  Fingerprint b = a;
  b.root = 1;
  CHECK(compare({a, a, a}).empty());
  const std::string report = compare({a, b, a});
  CHECK(report.find("ranks 0, 2 called broadcast(count 77, bfloat16, root 3) #9") != std::string::npos);
  CHECK(report.find("rank 1 called broadcast(count 77, bfloat16, root 1) #9") != std::string::npos);
}

TEST_CASE("a fingerprint tells an all-reduce on symmetric memory from one through the slots", "[fingerprint]") {
  const Fingerprint slots{algo::Collective::AllReduce, DataType::Float32, ReduceOp::Sum, 0, 1000, 4};
  Fingerprint symmetric = slots;
  symmetric.symmetric = true;
  CHECK(decode(encode(symmetric).data()) == symmetric);
  CHECK(decode(encode(slots).data()) == slots);
  CHECK(describe(symmetric) == "all_reduce(count 1000, float32, sum) #4 on symmetric memory");
  const std::string report = compare({slots, symmetric});
  CHECK(report.find("rank 0 called all_reduce(count 1000, float32, sum) #4\n") != std::string::npos);
  CHECK(report.find("rank 1 called all_reduce(count 1000, float32, sum) #4 on symmetric memory") != std::string::npos);
}
