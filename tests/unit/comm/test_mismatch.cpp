// Mismatched calls, every route, first call or later: two ranks as threads
// make different calls (another collective, count, type, operator or
// root) at sizes in each route's range, over shared memory with private
// buffers, over symmetric memory and over TCP, as their first call and as
// their tenth (after nine that match).
//
// With KIZUNA_CHECK=1 both ranks fail with Mismatch naming both calls: the
// fingerprint exchange comes before any route's own meeting, so no route
// can hold a rank away from it. The deadline is a minute, so a Mismatch
// (rather than a Timeout) shows that nobody waited for it. Without the
// check no rank returns success: each fails with Mismatch (a message of
// another call, a peer's call seen at a meeting) or, where nothing tells
// the two calls apart, Timeout.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "error_of.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

enum class Memory { Private, Symmetric, Tcp };

// One rank's call on `n` elements of its buffer (`f` and `i` alias it).
struct Side {
  std::string fingerprint;  // how KIZUNA_CHECK's report names it, for n = 2
  std::function<Work(Communicator&, float* f, std::size_t n)> call;
};

struct Pair {
  const char* what;
  Side first, second;  // rank 0's, rank 1's
};

Work all_reduce(Communicator& c, float* f, std::size_t n, DataType t = DataType::Float32, ReduceOp op = ReduceOp::Sum) {
  return c.all_reduce(f, n, t, op);
}

const std::vector<Pair>& pairs() {
  static const std::vector<Pair> all = {
      {"all_reduce against broadcast",
       {"all_reduce(count", [](Communicator& c, float* f, std::size_t n) { return all_reduce(c, f, n); }},
       {"broadcast(count", [](Communicator& c, float* f, std::size_t n) { return c.broadcast(f, n, DataType::Float32, 0); }}},
      {"a broadcast's root against all_reduce",
       {"broadcast(count", [](Communicator& c, float* f, std::size_t n) { return c.broadcast(f, n, DataType::Float32, 0); }},
       {"all_reduce(count", [](Communicator& c, float* f, std::size_t n) { return all_reduce(c, f, n); }}},
      {"counts",
       {"all_reduce(count", [](Communicator& c, float* f, std::size_t n) { return all_reduce(c, f, n); }},
       {"all_reduce(count", [](Communicator& c, float* f, std::size_t n) { return all_reduce(c, f, n + 1); }}},
      {"types",
       {"float32", [](Communicator& c, float* f, std::size_t n) { return all_reduce(c, f, n); }},
       {"int32", [](Communicator& c, float* f, std::size_t n) { return all_reduce(c, f, n, DataType::Int32); }}},
      {"operators",
       {"sum", [](Communicator& c, float* f, std::size_t n) { return all_reduce(c, f, n); }},
       {"max", [](Communicator& c, float* f, std::size_t n) { return all_reduce(c, f, n, DataType::Float32, ReduceOp::Max); }}},
      {"roots",
       {"root 0", [](Communicator& c, float* f, std::size_t n) { return c.broadcast(f, n, DataType::Float32, 0); }},
       {"root 1", [](Communicator& c, float* f, std::size_t n) { return c.broadcast(f, n, DataType::Float32, 1); }}},
      {"a reduce's leaf against all_gather",
       {"reduce(count", [](Communicator& c, float* f, std::size_t n) {
          return c.reduce(f, f, n / 2 + 1, DataType::Float32, ReduceOp::Sum, 1); }},
       {"all_gather(count", [](Communicator& c, float* f, std::size_t n) {
          return c.all_gather(f + n / 2 + 1, f, n / 2 + 1, DataType::Float32); }}},
  };
  return all;
}

struct Outcome {
  Error error{ErrorCode::Internal, "no error"};
};

// Rank r makes `before` matching all-reduces of n floats, then its side of
// `pair`; each rank's outcome.
std::vector<Outcome> run_pair(const Pair& pair, Memory memory, std::size_t n, int before, bool check) {
  CommOptions options;
  options.transport = memory == Memory::Tcp ? Transport::Tcp : Transport::Shm;
  options.check = check;
  options.timeout = check ? std::chrono::seconds(60) : std::chrono::milliseconds(1500);
  const auto comms = make_comms(2, options);
  std::vector<Outcome> out(2);
  run_ranks(2, [&](int r) {
    Communicator& c = *comms[r];
    const std::size_t bytes = (n + 2) * sizeof(float);
    std::shared_ptr<void> memory_kept;
    std::vector<float> own;
    float* f = nullptr;
    if (memory == Memory::Symmetric) {
      memory_kept = c.allocate_symmetric(bytes);
      f = static_cast<float*>(memory_kept.get());
    } else {
      own.assign(n + 2, 1.0f);
      f = own.data();
    }
    for (int k = 0; k < before; ++k) all_reduce(c, f, n).wait();
    out[r].error = error_of((r == 0 ? pair.first : pair.second).call(c, f, n));
  });
  return out;
}

const char* memory_name(Memory m) {
  return m == Memory::Private ? "shared memory" : m == Memory::Symmetric ? "symmetric memory" : "TCP";
}

}  // namespace

TEST_CASE("mismatched calls fail on every rank, on every route, first call or tenth: with KIZUNA_CHECK as a Mismatch naming both, without it never as a success", "[comm][mismatch]") {
  const bool check = GENERATE(true, false);
  const Memory memory = GENERATE(Memory::Private, Memory::Symmetric, Memory::Tcp);
  const std::size_t bytes = GENERATE(8, 1024, 4096, 64 << 10, 4 << 20);
  const int before = GENERATE(0, 9);
  for (const Pair& pair : pairs()) {
    INFO(pair.what << ", " << memory_name(memory) << ", " << bytes << " bytes, after " << before
                   << " matching calls, KIZUNA_CHECK " << check);
    const std::vector<Outcome> got = run_pair(pair, memory, bytes / sizeof(float), before, check);
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << ": " << got[r].error.what());
      if (check) {
        CHECK(got[r].error.code() == ErrorCode::Mismatch);
        CHECK_THAT(got[r].error.what(), Catch::Contains("KIZUNA_CHECK") && Catch::Contains(pair.first.fingerprint) &&
                                            Catch::Contains(pair.second.fingerprint));
      } else {
        CHECK((got[r].error.code() == ErrorCode::Mismatch || got[r].error.code() == ErrorCode::Timeout));
      }
    }
  }
}
