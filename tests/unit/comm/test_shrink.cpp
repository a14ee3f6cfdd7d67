// Shrinking after a failure, ranks as threads: the agreement on the failed
// set (comm/agreement.hpp) on a HashStore, then Communicator::shrink and
// kzCommShrink with a rank that "dies" (aborts its communicator and stops
// calling), compared with a serial reference.
#include <catch2/catch.hpp>

#include <kizuna/comm.hpp>
#include <kizuna/hash_store.hpp>
#include <kizuna/kizuna.h>
#include <kizuna/tcp_store.hpp>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "comm/agreement.hpp"
#include "error_of.hpp"
#include "processes.hpp"
#include "run_ranks.hpp"

using namespace kizuna;
using namespace kizuna::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

comm::ShrinkRound round_of(int rank, int world, std::set<int> suspects = {}) {
  comm::ShrinkRound r;
  r.base = "test/shrink";
  r.comm_name = "test";
  r.rank = rank;
  r.world = world;
  r.suspects = std::move(suspects);
  return r;
}

// Every rank in `ranks` takes part in one round (its suspects as given);
// returns each one's decided set, or its error's code and message.
struct Outcome {
  std::vector<int> failed;
  std::optional<ErrorCode> code;
  std::string message;
};

std::vector<Outcome> agree(Store& store, int world, const std::vector<int>& ranks,
                           const std::map<int, std::set<int>>& suspects, std::chrono::milliseconds limit,
                           std::function<bool(int)> gone = {}) {
  std::vector<Outcome> out(ranks.size());
  const auto deadline = Clock::now() + limit;
  run_ranks(static_cast<int>(ranks.size()), [&](int i) {
    comm::ShrinkRound round = round_of(ranks[i], world, suspects.count(ranks[i]) ? suspects.at(ranks[i]) : std::set<int>{});
    round.gone = gone;
    try {
      out[i].failed = comm::agree_on_failed(store, round, deadline);
    } catch (const Error& e) {
      out[i].code = e.code();
      out[i].message = e.what();
    }
  });
  return out;
}

// Sum over the ranks of a group of (old rank + 1) * (i + 1): each survivor
// contributes as its old number, so the reference is the sum over them.
void check_all_reduce(Communicator& c, int old_rank, const std::vector<int>& survivors, std::size_t count) {
  std::vector<std::int64_t> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<std::int64_t>((old_rank + 1) * (i + 1));
  c.all_reduce(v.data(), count, DataType::Int64, ReduceOp::Sum).wait();
  const std::int64_t weight = std::accumulate(survivors.begin(), survivors.end(), 0, [](int s, int r) { return s + r + 1; });
  for (std::size_t i = 0; i < count; ++i) REQUIRE(v[i] == weight * static_cast<std::int64_t>(i + 1));
}

}  // namespace

TEST_CASE("agreement: a rank one survivor saw lost is failed on every survivor", "[comm][shrink]") {
  HashStore store;
  const auto out = agree(store, 4, {0, 1, 2}, {{0, {3}}}, 5s);
  for (const Outcome& o : out) {
    INFO(o.message);
    CHECK(!o.code);
    CHECK(o.failed == std::vector<int>{3});
  }
}

TEST_CASE("agreement: two ranks lost at once, each seen by a different survivor", "[comm][shrink]") {
  HashStore store;
  const auto out = agree(store, 5, {0, 2, 4}, {{0, {1}}, {4, {3}}}, 5s);
  for (const Outcome& o : out) CHECK(o.failed == std::vector<int>{1, 3});
}

TEST_CASE("agreement: a rank suspected but present before the decision is kept", "[comm][shrink]") {
  // Rank 1 arrives first; rank 0, which suspects it, and rank 2 after.
  // (Arriving after the others had decided without it, it would be left
  // out: the next case.)
  HashStore store;
  std::vector<Outcome> first;
  std::thread one([&] { first = agree(store, 3, {1}, {}, 5s); });
  while (!store.check({"test/shrink/arrived"})) std::this_thread::sleep_for(1ms);
  const auto out = agree(store, 3, {0, 2}, {{0, {1}}}, 5s);
  one.join();
  for (const Outcome& o : out) {
    CHECK(!o.code);
    CHECK(o.failed.empty());
  }
  CHECK(!first[0].code);
  CHECK(first[0].failed.empty());
}

TEST_CASE("agreement: a process known gone is failed without anyone suspecting it", "[comm][shrink]") {
  HashStore store;
  const auto out = agree(store, 3, {0, 1}, {}, 5s, [](int r) { return r == 2; });
  for (const Outcome& o : out) CHECK(o.failed == std::vector<int>{2});
}

TEST_CASE("agreement: a rank neither present nor seen to fail ends it with a Timeout naming it", "[comm][shrink]") {
  HashStore store;
  const auto start = Clock::now();
  const auto out = agree(store, 4, {0, 1}, {{0, {3}}}, 300ms);
  CHECK(Clock::now() - start < 3s);
  for (const Outcome& o : out) {
    REQUIRE(o.code == ErrorCode::Timeout);
    CHECK_THAT(o.message, Catch::Contains("rank(s) 2 neither joined nor were seen to fail (joined: 0 1)"));
  }
}

TEST_CASE("agreement: a survivor that comes after the decision is told it was left out", "[comm][shrink]") {
  HashStore store;
  const auto first = agree(store, 3, {0, 1}, {{0, {2}}}, 5s);
  for (const Outcome& o : first) CHECK(o.failed == std::vector<int>{2});
  const auto late = agree(store, 3, {2}, {}, 5s);
  REQUIRE(late[0].code == ErrorCode::Aborted);
  CHECK_THAT(late[0].message, Catch::Contains("rank 2 is left out: the others had decided without it (failed: 2)"));
}

TEST_CASE("agreement: every survivor takes the first decision, whatever it saw", "[comm][shrink]") {
  // Many rounds with suspects that differ per survivor: the decided sets
  // always agree.
  for (int trial = 0; trial < 20; ++trial) {
    HashStore store;
    const auto out = agree(store, 6, {0, 1, 3, 5}, {{0, {2}}, {3, {4}}, {5, {2, 4}}}, 5s);
    for (const Outcome& o : out) CHECK(o.failed == std::vector<int>{2, 4});
  }
}

TEST_CASE("shrink: after a rank dies the survivors go on as a smaller group, renumbered in order", "[comm][shrink]") {
  CommOptions options;
  options.transport = GENERATE(Transport::Tcp, Transport::Shm);
  options.algorithm = Algorithm::Ring;
  options.timeout = 30s;
  options.setup_timeout = 20s;
  const auto comms = make_comms(4, options);
  std::atomic<int> started{0};
  std::vector<std::shared_ptr<Communicator>> shrunk(4);
  run_ranks(4, [&](int r) {
    if (r == 1) {  // "dies" mid-call: its connections go away, it never comes back
      while (started.load() < 3) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(20ms);
      comms[1]->abort("simulated crash");
      return;
    }
    std::vector<float> v(1 << 16, 1.0f);
    Work w = comms[r]->all_reduce(v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
    ++started;
    CHECK(error_of(w).code() == ErrorCode::PeerLost);
    shrunk[r] = comms[r]->shrink();
  });
  const std::vector<int> survivors{0, 2, 3};
  for (int i = 0; i < 3; ++i) {
    REQUIRE(shrunk[survivors[i]]);
    CHECK(shrunk[survivors[i]]->size() == 3);
    CHECK(shrunk[survivors[i]]->rank() == i);
  }
  run_ranks(3, [&](int i) {
    Communicator& c = *shrunk[survivors[i]];
    for (std::size_t count : {std::size_t{1}, std::size_t{1009}, std::size_t{300007}})
      check_all_reduce(c, survivors[i], survivors, count);
    std::vector<std::int32_t> gathered(3, -1);
    const std::int32_t mine = survivors[i];
    c.all_gather(&mine, gathered.data(), 1, DataType::Int32).wait();
    CHECK(gathered == std::vector<std::int32_t>{0, 2, 3});
  });
  // The old communicator stays failed.
  CHECK(comms[0]->async_error() != nullptr);
}

TEST_CASE("shrink twice: a second death on the shrunk group shrinks it again", "[comm][shrink]") {
  CommOptions options;
  options.timeout = 30s;
  options.setup_timeout = 20s;
  const auto comms = make_comms(4, options);
  std::vector<std::shared_ptr<Communicator>> once(4), twice(4);
  run_ranks(4, [&](int r) {
    if (r == 3) {
      comms[3]->abort("first crash");
      return;
    }
    std::int64_t x = r;
    CHECK(error_of(comms[r]->all_reduce(&x, 1, DataType::Int64, ReduceOp::Sum)).code() == ErrorCode::PeerLost);
    once[r] = comms[r]->shrink();
    REQUIRE(once[r]->size() == 3);
    if (r == 0) {  // rank 0 of the shrunk group dies too
      once[r]->abort("second crash");
      return;
    }
    CHECK(error_of(once[r]->all_reduce(&x, 1, DataType::Int64, ReduceOp::Sum)).code() == ErrorCode::PeerLost);
    twice[r] = once[r]->shrink();
    check_all_reduce(*twice[r], r, {1, 2}, 4099);
  });
  CHECK(twice[1]->rank() == 0);
  CHECK(twice[2]->rank() == 1);
  CHECK(twice[1]->size() == 2);
}

TEST_CASE("shrink with nobody failed gives a group of the same ranks", "[comm][shrink]") {
  const auto comms = make_comms(3);
  std::vector<std::shared_ptr<Communicator>> shrunk(3);
  run_ranks(3, [&](int r) {
    shrunk[r] = comms[r]->shrink();
    CHECK(shrunk[r]->size() == 3);
    CHECK(shrunk[r]->rank() == r);
    check_all_reduce(*shrunk[r], r, {0, 1, 2}, 1000);
  });
}

TEST_CASE("shrink: a rank that neither calls it nor is seen to fail ends it with a Timeout naming it",
          "[comm][shrink]") {
  CommOptions options;
  options.setup_timeout = 1s;
  const auto comms = make_comms(3, options);
  run_ranks(2, [&](int r) {
    const auto start = Clock::now();
    const Error e = error_of_call([&] { comms[r]->shrink(); });
    CHECK(Clock::now() - start < 10s);
    CHECK(e.code() == ErrorCode::Timeout);
    CHECK_THAT(e.what(), Catch::Contains("rank(s) 2 neither joined nor were seen to fail"));
  });
}

TEST_CASE("kzCommShrink: a survivor through the C ABI gets a working smaller communicator", "[comm][shrink][c_api]") {
  // Rank 0 through the C ABI (it hosts the store); ranks 1 and 2 through
  // C++ in this same process, named as the C ABI names its first
  // communicator (default-named ranks of one process would count apart).
  const int port = free_port();
  const std::string store = "127.0.0.1:" + std::to_string(port);
  kzComm_t comm = nullptr;
  kzResult_t made = kzInternalError;
  std::thread init([&] { made = kzCommInitRank(&comm, 3, store.c_str(), 0); });
  std::vector<std::shared_ptr<Communicator>> others(3);
  run_ranks(2, [&](int i) {
    TcpStoreOptions client;
    client.port = port;
    CommOptions options;
    options.store = std::make_shared<TcpStore>(client);
    options.rank = i + 1;
    options.world_size = 3;
    options.name = "kizuna/comm0";
    others[i + 1] = Communicator::create(options);
  });
  init.join();
  REQUIRE(made == kzSuccess);
  kzComm_t shrunk = nullptr;
  std::shared_ptr<Communicator> shrunk1;
  others[2]->abort("simulated crash");
  run_ranks(2, [&](int i) {
    std::int64_t x = 1;
    if (i == 0) {
      CHECK(kzAllReduce(&x, &x, 1, kzInt64, kzSum, comm, nullptr) == kzPeerLost);
      CHECK(kzCommShrink(comm, nullptr) == kzInvalidArgument);
      REQUIRE(kzCommShrink(comm, &shrunk) == kzSuccess);
      int n = 0, me = -1;
      CHECK(kzCommCount(shrunk, &n) == kzSuccess);
      CHECK(kzCommUserRank(shrunk, &me) == kzSuccess);
      CHECK(n == 2);
      CHECK(me == 0);
      REQUIRE(kzAllReduce(&x, &x, 1, kzInt64, kzSum, shrunk, nullptr) == kzSuccess);
    } else {
      CHECK(error_of(others[1]->all_reduce(&x, 1, DataType::Int64, ReduceOp::Sum)).code() == ErrorCode::PeerLost);
      shrunk1 = others[1]->shrink();
      REQUIRE(shrunk1->rank() == 1);
      x = 2;
      shrunk1->all_reduce(&x, 1, DataType::Int64, ReduceOp::Sum).wait();
    }
    CHECK(x == 3);
  });
  shrunk1.reset();
  others.clear();
  CHECK(kzCommDestroy(shrunk) == kzSuccess);
  CHECK(kzCommDestroy(comm) == kzSuccess);
}
