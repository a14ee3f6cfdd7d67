// bench_store: the TcpStore's round trips per second and the time a job
// takes to rendezvous through it. bench/compare/torch_store.py times the
// same operations with PyTorch's TCPStore, side by side.
//
//   set/get/add     one client per thread, 1 and 16 threads, all on one server
//                   in this process; items/s is the total over the threads
//   rendezvous/64   64 threads ("ranks") each connect a client, set their
//                   address, then read everyone's: with one multi_get, or
//                   with 64 gets (as torch's Python API must); real time per
//                   rendezvous, from the first connect to the last read
//
//   bench_store --benchmark_min_time=2 --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <kizuna/tcp_store.hpp>
#include <kizuna/tcp_store_server.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using kizuna::Bytes;
using kizuna::TcpStore;
using kizuna::TcpStoreOptions;
using kizuna::TcpStoreServer;

// An address, as ranks publish (the size torch's rendezvous values have).
const std::string kValue = "10.1.2.3:29500";

TcpStoreServer& server() {
  static TcpStoreServer s([] {
    TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.token = "";
    return o;
  }());
  return s;
}

std::unique_ptr<TcpStore> client() {
  TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = server().port();
  o.token = "";
  o.timeout = 60s;
  return std::make_unique<TcpStore>(o);
}

void set(benchmark::State& state) {
  auto store = client();
  const std::string key = "bench/set/" + std::to_string(state.thread_index());
  const Bytes value(kValue.begin(), kValue.end());
  for (auto _ : state) store->set(key, value);
  state.SetItemsProcessed(state.iterations());
}

void get(benchmark::State& state) {
  auto store = client();
  const std::string key = "bench/get/" + std::to_string(state.thread_index());
  store->set(key, kValue);
  for (auto _ : state) benchmark::DoNotOptimize(store->get(key));
  state.SetItemsProcessed(state.iterations());
}

void add(benchmark::State& state) {
  auto store = client();
  for (auto _ : state) benchmark::DoNotOptimize(store->add("bench/add", 1));  // one shared counter
  state.SetItemsProcessed(state.iterations());
}

void rendezvous(benchmark::State& state, bool multi_get) {
  constexpr int kRanks = 64;
  static std::atomic<int> round{0};
  for (auto _ : state) {
    const std::string prefix = "rdv/" + std::to_string(round++) + "/";
    std::vector<std::thread> ranks;
    ranks.reserve(kRanks);
    for (int rank = 0; rank < kRanks; ++rank) {
      ranks.emplace_back([&, rank] {
        auto store = client();
        store->set(prefix + std::to_string(rank), kValue + "/" + std::to_string(rank));
        std::vector<std::string> keys;
        for (int r = 0; r < kRanks; ++r) keys.push_back(prefix + std::to_string(r));
        if (multi_get) {
          benchmark::DoNotOptimize(store->multi_get(keys));
        } else {
          for (const auto& key : keys) benchmark::DoNotOptimize(store->get(key));
        }
      });
    }
    for (auto& t : ranks) t.join();
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(set)->Threads(1)->Threads(16)->UseRealTime();
BENCHMARK(get)->Threads(1)->Threads(16)->UseRealTime();
BENCHMARK(add)->Threads(1)->Threads(16)->UseRealTime();
BENCHMARK_CAPTURE(rendezvous, multi_get, true)
    ->Name("rendezvous/64/multi_get")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(rendezvous, get, false)
    ->Name("rendezvous/64/get")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
