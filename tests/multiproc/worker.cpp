// kizuna-test-worker <scenario>: one rank of a multi-process test, started
// by test_multiproc (or kizuna-run) with RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT set. Prints what it did; the exit code is the verdict:
//   0 ok, 1 wrong result, 2 bad usage, 10 + ErrorCode for a kizuna::Error.
//
// Scenarios:
//   check     all-reduce and all-gather with each algorithm (ring, tree,
//             one-shot, two-shot: a communicator each), a few types,
//             checked against the closed-form reference
//   loop      large all-reduces until an error (for the kill test)
//   mismatch  KIZUNA_CHECK=1 with rank 1 passing a different count
//   split     two groups (even / odd ranks) running different collectives
//             at the same time
#include <kizuna/comm.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "algorithms.hpp"
#include "collective_reference.hpp"
#include "core/launch_env.hpp"
#include "emulated_device.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

int check(const std::shared_ptr<Store>& store) {
  // The rank and world size as Communicator::from_env reads them (RANK and
  // WORLD_SIZE, or mpirun's and Slurm's variables).
  const core::LaunchEnv launch = core::LaunchEnv::from_process();
  launch.require_rank();
  const int n = launch.world_size;
  const int r = launch.rank;
  int wrong = 0;
  for (const auto& [a, algo_name] : kForcedAlgorithms) {
    CommOptions options;
    options.store = store;
    options.rank = r;
    options.world_size = n;
    options.algorithm = a;
    options.name = std::string("check/") + algo_name;
    const auto comm_ptr = Communicator::create(options);
    Communicator& comm = *comm_ptr;
    for (DataType t : {DataType::Float32, DataType::Int64, DataType::BFloat16}) {
      for (std::uint64_t count : {1ull, 1000ull, 300007ull}) {
        const CollectiveReference ref(t, ReduceOp::Sum);
        auto in = ref.input_buffer(r, count);
        std::vector<unsigned char> out(count * ref.elem());
        comm.all_reduce(in.data(), out.data(), count, t, ReduceOp::Sum).wait();
        const std::string e = ref.compare(out.data(), count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, i, w); });
        if (!e.empty()) {
          std::printf("rank %d %s all_reduce %s count %llu: %s\n", r, algo_name, std::string(name(t)).c_str(),
                      static_cast<unsigned long long>(count), e.c_str());
          ++wrong;
        }
        std::vector<unsigned char> gathered(count * n * ref.elem());
        comm.all_gather(in.data(), gathered.data(), count, t).wait();
        const std::string g = ref.compare(gathered.data(), count * n, [&](std::uint64_t i, unsigned char* w) {
          ref.input(static_cast<int>(i / count), i % count, w);
        });
        if (!g.empty()) {
          std::printf("rank %d %s all_gather: %s\n", r, algo_name, g.c_str());
          ++wrong;
        }
      }
    }
    comm.barrier().wait();
  }
  std::printf("rank %d of %d: %s\n", r, n, wrong ? "WRONG" : "ok");
  return wrong ? 1 : 0;
}

int loop(Communicator& comm) {
  std::vector<float> v(1 << 20, 1.0f);
  std::printf("rank %d looping\n", comm.rank());
  std::fflush(stdout);
  for (int i = 0; i < 100000; ++i) comm.all_reduce(v.data(), v.size(), DataType::Float32, ReduceOp::Sum).wait();
  return 0;
}

int mismatch(Communicator& comm) {
  std::vector<float> v(1000, 1.0f);
  comm.all_reduce(v.data(), 1000, DataType::Float32, ReduceOp::Sum).wait();
  comm.all_reduce(v.data(), comm.rank() == 1 ? 999 : 1000, DataType::Float32, ReduceOp::Sum).wait();
  return 0;
}

int split(Communicator& comm) {
  auto sub = comm.split(comm.rank() % 2, comm.rank());
  int wrong = 0;
  for (int i = 0; i < 50; ++i) {
    if (comm.rank() % 2 == 0) {
      std::vector<double> v(10000, comm.rank());
      sub->all_reduce(v.data(), v.size(), DataType::Float64, ReduceOp::Max).wait();
      wrong += v[9999] != static_cast<double>((comm.size() - 1) / 2 * 2);
    } else {
      std::vector<std::int32_t> v(777, comm.rank()), all(777 * sub->size());
      sub->all_gather(v.data(), all.data(), 777, DataType::Int32).wait();
      for (int k = 0; k < sub->size(); ++k) wrong += all[k * 777] != 2 * k + 1;
    }
  }
  std::printf("rank %d split into group of %d: %s\n", comm.rank(), sub->size(), wrong ? "WRONG" : "ok");
  return wrong ? 1 : 0;
}

// Device collectives staged through host memory, on an emulated device
// (emulated_device.hpp): in parts, over whatever host path the topology
// picks (hierarchical across nodes), against the serial reference.
int staged(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  EmulatedStream stream;
  const DeviceStream s = stream.handle();
  int wrong = 0;
  const auto report = [&](const char* what, const std::string& e) {
    if (e.empty()) return;
    std::printf("rank %d staged %s: %s\n", r, what, e.c_str());
    ++wrong;
  };
  // 13 MiB of float32 (three parts), and a small call.
  for (std::uint64_t count : {(13ull << 20) / 4, 1001ull}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      const CollectiveReference ref(DataType::Float32, op);
      auto buffer = ref.input_buffer(r, count);
      comm.all_reduce(buffer.data(), buffer.data(), count, DataType::Float32, op, s).wait();
      report("all_reduce", ref.compare(buffer.data(), count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, i, w); }));
    }
    const CollectiveReference ref(DataType::Float32, ReduceOp::Sum);
    auto in = ref.input_buffer(r, count);
    std::vector<unsigned char> out(count * ref.elem());
    comm.reduce(in.data(), r == 0 ? out.data() : nullptr, count, DataType::Float32, ReduceOp::Sum, 0, s).wait();
    if (r == 0)
      report("reduce", ref.compare(out.data(), count, [&](std::uint64_t i, unsigned char* w) { ref.reduced(n, i, w); }));
    comm.broadcast(in.data(), out.data(), count, DataType::Float32, n - 1, s).wait();
    report("broadcast", ref.compare(out.data(), count, [&](std::uint64_t i, unsigned char* w) { ref.input(n - 1, i, w); }));
  }
  const CollectiveReference ref(DataType::Int64, ReduceOp::Max);
  auto in = ref.input_buffer(r, 777);
  std::vector<unsigned char> gathered(777 * n * ref.elem());
  comm.all_gather(in.data(), gathered.data(), 777, DataType::Int64, s).wait();
  report("all_gather", ref.compare(gathered.data(), 777 * n, [&](std::uint64_t i, unsigned char* w) {
    ref.input(static_cast<int>(i / 777), i % 777, w);
  }));
  if (!stream.synchronize()) report("stream", "did not finish");
  std::printf("rank %d of %d staged on %s: %s\n", r, n, comm.device().c_str(), wrong ? "WRONG" : "ok");
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kizuna-test-worker check|loop|mismatch|split|staged\n");
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    // "staged": the communicator's device is emulated on the host.
    std::optional<EmulatedDevice> device;
    if (scenario == "staged") {
      device.emplace();
      ::setenv("KIZUNA_DEVICE", "cuda", 1);
    }
    if (scenario == "check") return check(Store::from_env());
    auto comm = Communicator::from_env();
    if (scenario == "staged") return staged(*comm);
    if (scenario == "loop") return loop(*comm);
    if (scenario == "mismatch") return mismatch(*comm);
    if (scenario == "split") return split(*comm);
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  } catch (const Error& e) {
    std::printf("error %s: %s\n", std::string(name(e.code())).c_str(), e.what());
    return 10 + static_cast<int>(e.code());
  }
}
