// comm/store_barrier.hpp: the teardown barrier meets when every rank comes,
// and otherwise gives up at its deadline or on a failed store, never
// throwing and never waiting past the deadline.
#include <catch2/catch.hpp>

#include <kizuna/hash_store.hpp>
#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "comm/store_barrier.hpp"

using namespace kizuna;
using namespace std::chrono_literals;
using comm::store_barrier_within;

namespace {

// Ranks 0..delays.size()-1 of `world` as threads, each entering the
// barrier after its delay (the ranks beyond never come); what each
// returned and how long it took.
struct Entered {
  std::vector<char> met;
  std::vector<std::chrono::steady_clock::duration> took;
};
Entered enter(Store& store, int world, const std::vector<std::chrono::milliseconds>& delays,
              std::chrono::milliseconds wait) {
  const std::size_t coming = delays.size();
  Entered e{std::vector<char>(coming), std::vector<std::chrono::steady_clock::duration>(coming)};
  std::vector<std::thread> ranks;
  for (std::size_t r = 0; r < coming; ++r)
    ranks.emplace_back([&, r] {
      std::this_thread::sleep_for(delays[r]);
      const auto start = std::chrono::steady_clock::now();
      e.met[r] = store_barrier_within(store, "comm/ipc/closed", static_cast<int>(r), world, wait);
      e.took[r] = std::chrono::steady_clock::now() - start;
    });
  for (auto& t : ranks) t.join();
  return e;
}

}  // namespace

TEST_CASE("store barrier: every rank that comes within the deadline meets", "[store_barrier]") {
  HashStore store;
  const Entered e = enter(store, 4, {0ms, 50ms, 100ms, 10ms}, 5s);
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(e.met[r]);
    CHECK(e.took[r] < 2s);
  }
  HashStore alone;
  CHECK(store_barrier_within(alone, "alone", 0, 1, 0ms));  // a world of one meets at once
}

TEST_CASE("store barrier: a rank that never comes leaves the others false at the deadline", "[store_barrier]") {
  HashStore store;
  const Entered e = enter(store, 3, {0ms, 0ms}, 300ms);  // rank 2 never comes
  for (int r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK_FALSE(e.met[r]);
    CHECK(e.took[r] >= 250ms);
    CHECK(e.took[r] < 5s);
  }
}

TEST_CASE("store barrier: a store whose server has gone gives false, not an error", "[store_barrier]") {
  TcpStoreOptions so;
  so.port = 0;
  so.token = "";
  auto server = std::make_unique<TcpStoreServer>(so);
  TcpStoreOptions co;
  co.port = server->port();
  co.token = "";
  co.timeout = 2s;
  TcpStore client(co);
  server.reset();
  // A world of one would meet at once on a working store: only the failed
  // store can make it false.
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(store_barrier_within(client, "gone", 0, 1, 300ms));
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}
