// bench_allreduce: all-reduce of float32 over TCP loopback, ranks as threads
// of this process (2 and 4), ring and tree, 4 B .. 64 MiB.
//
// Each benchmark runs on `world` threads (Google Benchmark's ->Threads), one
// per rank, each calling all_reduce(...).wait() once per iteration on its
// own communicator; the communicators are created before any timing. Times
// are wall-clock per all-reduce. Counters: algbw = bytes / time and busbw =
// algbw x 2(n-1)/n (nccl-tests' definition), in GB/s, reported by rank 0.
//
//   bench_allreduce --benchmark_filter='ring/4/' --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <kizuna/comm.hpp>
#include <kizuna/hash_store.hpp>

#include <map>
#include <memory>
#include <thread>
#include <vector>

namespace {

using kizuna::Algorithm;
using kizuna::Communicator;

std::map<std::pair<int, Algorithm>, std::vector<std::shared_ptr<Communicator>>> g_comms;

std::vector<std::shared_ptr<Communicator>> make(int world, Algorithm algorithm) {
  auto store = std::make_shared<kizuna::HashStore>();
  std::vector<std::shared_ptr<Communicator>> comms(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      kizuna::CommOptions o;
      o.store = store;
      o.rank = r;
      o.world_size = world;
      o.algorithm = algorithm;
      o.name = "bench";
      comms[r] = Communicator::create(o);
    });
  for (auto& t : threads) t.join();
  return comms;
}

void BM_all_reduce(benchmark::State& state, int world, Algorithm algorithm) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
  Communicator& comm = *g_comms.at({world, algorithm})[state.thread_index()];
  std::vector<float> buf(count, 1.0f);
  for (auto _ : state)
    comm.all_reduce(buf.data(), count, kizuna::DataType::Float32, kizuna::ReduceOp::Sum).wait();
  if (state.thread_index() == 0) {
    const double total = static_cast<double>(count * sizeof(float)) * state.iterations();
    state.counters["algbw_GBps"] = benchmark::Counter(total / 1e9, benchmark::Counter::kIsRate);
    state.counters["busbw_GBps"] =
        benchmark::Counter(total / 1e9 * 2.0 * (world - 1) / world, benchmark::Counter::kIsRate);
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (int world : {2, 4})
    for (Algorithm a : {Algorithm::Ring, Algorithm::Tree}) {
      g_comms[{world, a}] = make(world, a);
      const std::string name = std::string(a == Algorithm::Ring ? "ring" : "tree") + "/" + std::to_string(world);
      benchmark::RegisterBenchmark(("all_reduce/" + name).c_str(), BM_all_reduce, world, a)
          ->RangeMultiplier(16)
          ->Range(4, 64 << 20)
          ->Threads(world)
          ->UseRealTime();
    }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_comms.clear();
  return 0;
}
