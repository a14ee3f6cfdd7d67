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
