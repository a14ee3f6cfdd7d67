// bench_ddp: how much of the gradient all-reduce the Reducer hides behind
// backward, for a ~25M-parameter model, ranks as threads of this process
// over loopback TCP (2 and 4 ranks).
//
// The model: 96 layers of a 512 x 512 weight (1 MiB) and a 512 bias,
// registered forward in one flat float32 buffer (25.2M parameters, 96 MiB
// of gradients), so that a 1 MiB cap gives a bucket per tensor, 4 MiB about
// two layers, 25 MiB about twelve and 100 MiB all of them. The synthetic backward walks the layers from last to first and
// computes each layer's gradients for real: `passes` sweeps of a saxpy-like
// update g[i] = 0.5 g[i] + x[i] over the layer (memory-bound float work, as
// a real backward's weight-gradient GEMMs are not, but it occupies a core
// the same way and can be sized).
//
// With --ddp_backward=sleep, each layer sleeps instead, for --ddp_sleep_ns
// nanoseconds per parameter: a backward that runs elsewhere (a GPU) and
// leaves the CPU to communication, which shows what overlap can hide when
// compute and communication do not compete for the same cores.
//
// Three ways to run a step, each a benchmark on `world` threads:
//   compute  the backward alone, no Reducer calls
//   comm     no compute: every gradient marked ready at once, then finalize()
//            (the buckets' all-reduces back to back)
//   overlap  the backward with mark_ready() after each layer, then
//            finalize(): buckets travel while earlier layers compute
// Hidden fraction = (compute + comm - overlap) / comm: 1 when communication
// costs nothing on top of compute, 0 when nothing overlaps. Bucket caps 1, 4,
// 25 and 100 MiB without compression, and 25 MiB with float16 / bfloat16.
// The first bucket stays at the default 1 MiB (capped at the cap).
//
// After Google Benchmark's own table, a summary in Markdown (medians over
// the repetitions) is printed: the table of docs/trainer.md.
//
// Ranks talk over loopback TCP (--ddp_transport=shm: shared memory instead).
//
//   bench_ddp --benchmark_repetitions=3 [--ddp_passes=4] [--ddp_backward=compute|sleep]
//             [--ddp_sleep_ns=7] [--ddp_transport=tcp|shm] [--benchmark_filter=ddp/2/]
#include <benchmark/benchmark.h>

#include <kizuna/comm.hpp>
#include <kizuna/ddp.hpp>
#include <kizuna/hash_store.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using kizuna::Communicator;
using kizuna::Compression;

constexpr int kLayers = 96;
constexpr std::size_t kWidth = 512;
int g_passes = 4;
bool g_sleep = false;
double g_sleep_ns = 7.0;
kizuna::Transport g_transport = kizuna::Transport::Tcp;

enum class Mode { Compute, Comm, Overlap };

const char* mode_name(Mode m) {
  return m == Mode::Compute ? "compute" : m == Mode::Comm ? "comm" : "overlap";
}
const char* compression_name(Compression c) {
  return c == Compression::None ? "none" : c == Compression::Float16 ? "fp16" : "bf16";
}

std::map<int, std::vector<std::shared_ptr<Communicator>>> g_comms;

std::vector<std::shared_ptr<Communicator>> make_comms(int world) {
  auto store = std::make_shared<kizuna::HashStore>();
  std::vector<std::shared_ptr<Communicator>> comms(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      kizuna::CommOptions o;
      o.store = store;
      o.rank = r;
      o.world_size = world;
      o.name = "bench_ddp";
      o.transport = g_transport;
      comms[r] = Communicator::create(o);
    });
  for (auto& t : threads) t.join();
  return comms;
}

// Registration order is forward: layer 0's weight first.
std::vector<kizuna::Parameter> model_views() {
  std::vector<kizuna::Parameter> views;
  std::size_t at = 0;
  for (int l = 0; l < kLayers; ++l)
    for (bool bias : {false, true}) {
      kizuna::Parameter p;
      p.name = "layer" + std::to_string(l) + (bias ? ".bias" : ".weight");
      p.count = bias ? kWidth : kWidth * kWidth;
      p.shape = bias ? std::vector<std::int64_t>{kWidth} : std::vector<std::int64_t>{kWidth, kWidth};
      p.offset = at;
      at += p.bytes();
      views.push_back(p);
    }
  return views;
}

// One layer's gradient "computation": `passes` sweeps over its gradients,
// or a sleep as long as a device would take.
void compute_gradient(float* g, const float* x, std::size_t n) {
  if (g_sleep) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<std::int64_t>(g_sleep_ns * n)));
    return;
  }
  for (int pass = 0; pass < g_passes; ++pass)
    for (std::size_t i = 0; i < n; ++i) g[i] = 0.5f * g[i] + x[i];
}

// Per-rank buffers, allocated once per world and reused by every benchmark.
struct Buffers {
  std::vector<float> params, grads, inputs;
};
std::map<std::pair<int, int>, Buffers> g_buffers;
std::mutex g_buffers_mutex;

Buffers& buffers(int world, int rank, std::size_t count) {
  std::lock_guard lock(g_buffers_mutex);
  Buffers& b = g_buffers[{world, rank}];
  if (b.params.size() != count) {
    b.params.assign(count, 0.01f * rank);
    b.grads.assign(count, 0.0f);
    b.inputs.resize(count);
    for (std::size_t i = 0; i < count; ++i) b.inputs[i] = 0.5f + static_cast<float>((i * 7 + rank) % 101) / 101.0f;
  }
  return b;
}

void BM_step(benchmark::State& state, int world, Mode mode, std::size_t cap_mib, Compression c) {
  const int rank = state.thread_index();
  const auto views = model_views();
  const std::size_t count = views.back().offset / sizeof(float) + views.back().count;
  Buffers& buf = buffers(world, rank, count);
  float* grads = buf.grads.data();

  std::unique_ptr<kizuna::Reducer> reducer;
  if (mode != Mode::Compute) {
    kizuna::ReducerOptions o;
    o.bucket_cap_bytes = cap_mib << 20;
    o.first_bucket_bytes = std::min(o.first_bucket_bytes, o.bucket_cap_bytes);
    o.compression = c;
    reducer = std::make_unique<kizuna::Reducer>(g_comms.at(world)[rank], buf.params.data(), grads,
                                                count * sizeof(float), views, o);
  }
  auto step = [&] {
    for (std::size_t p = views.size(); p-- > 0;) {
      const auto& v = views[p];
      if (mode != Mode::Comm)
        compute_gradient(grads + v.offset / sizeof(float), buf.inputs.data() + v.offset / sizeof(float), v.count);
      if (mode != Mode::Compute) reducer->mark_ready(p);
    }
    if (mode != Mode::Compute) reducer->finalize();
  };
  step();  // warm-up: pages touched, and the first iteration's bucket rebuild
  // Timed per step, after Google Benchmark's start barrier (which waits for
  // every rank's set-up).
  std::chrono::duration<double, std::milli> elapsed{0};
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    step();
    elapsed += std::chrono::steady_clock::now() - start;
  }
  if (rank == 0) {
    // Google Benchmark's Time column divides by ranks x steps; this is per step.
    state.counters["step_ms"] = elapsed.count() / static_cast<double>(state.iterations());
    state.counters["GB_grads"] = static_cast<double>(count * sizeof(float)) / 1e9;
    state.SetLabel(reducer ? std::to_string(reducer->buckets().size()) + " buckets" : "");
  }
}

// Collects every repetition's step time (rank 0's wall clock), by name.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& r : runs)
      if (r.run_type == Run::RT_Iteration && !r.error_occurred && r.counters.count("step_ms"))
        times_[r.run_name.function_name].push_back(r.counters.at("step_ms").value);
    ConsoleReporter::ReportRuns(runs);
  }

  // Median in ms, or -1 when the benchmark did not run.
  double median(const std::string& name) const {
    const auto it = times_.find(name);
    if (it == times_.end() || it->second.empty()) return -1;
    auto v = it->second;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  std::size_t repetitions(const std::string& name) const {
    const auto it = times_.find(name);
    return it == times_.end() ? 0 : it->second.size();
  }

 private:
  std::map<std::string, std::vector<double>> times_;
};

std::string bench_name(int world, Mode m, std::size_t cap_mib, Compression c) {
  if (m == Mode::Compute) return "ddp/" + std::to_string(world) + "/compute";
  return "ddp/" + std::to_string(world) + "/" + mode_name(m) + "/bucket:" + std::to_string(cap_mib) +
         "MiB/" + compression_name(c);
}

struct Config {
  std::size_t cap_mib;
  Compression compression;
};
const std::vector<Config> kConfigs{{1, Compression::None},      {4, Compression::None},
                                   {25, Compression::None},     {100, Compression::None},
                                   {25, Compression::Float16},  {25, Compression::BFloat16}};

void print_summary(const SummaryReporter& rep) {
  std::printf("\n| ranks | bucket cap | compression | compute ms | comm ms | overlap ms | "
              "compute + comm ms | hidden | speed-up vs serial |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (int world : {2, 4}) {
    const double compute = rep.median(bench_name(world, Mode::Compute, 0, Compression::None));
    if (compute < 0) continue;
    for (const auto& cfg : kConfigs) {
      const double comm = rep.median(bench_name(world, Mode::Comm, cfg.cap_mib, cfg.compression));
      const double overlap = rep.median(bench_name(world, Mode::Overlap, cfg.cap_mib, cfg.compression));
      if (comm < 0 || overlap < 0) continue;
      std::printf("| %d | %zu MiB | %s | %.1f | %.1f | %.1f | %.1f | %.0f%% | %.2fx |\n", world,
                  cfg.cap_mib, compression_name(cfg.compression), compute, comm, overlap,
                  compute + comm, 100.0 * (compute + comm - overlap) / comm,
                  (compute + comm) / overlap);
    }
  }
  std::printf("\nmedians of %zu repetition(s); backward: ",
              rep.repetitions(bench_name(2, Mode::Compute, 0, Compression::None)));
  if (g_sleep) std::printf("sleep %.1f ns per parameter", g_sleep_ns);
  else std::printf("%d pass(es) over 25.2M float32 gradients", g_passes);
  std::printf("; transport %s\n", g_transport == kizuna::Transport::Tcp ? "tcp" : "shm");
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first; Google Benchmark rejects flags it does not know.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) {
      return a.rfind(flag, 0) == 0 ? a.substr(std::strlen(flag)) : std::string();
    };
    if (!value("--ddp_passes=").empty()) {
      g_passes = std::max(1, std::atoi(value("--ddp_passes=").c_str()));
    } else if (!value("--ddp_backward=").empty()) {
      g_sleep = value("--ddp_backward=") == "sleep";
    } else if (!value("--ddp_sleep_ns=").empty()) {
      g_sleep_ns = std::atof(value("--ddp_sleep_ns=").c_str());
    } else if (!value("--ddp_transport=").empty()) {
      g_transport = value("--ddp_transport=") == "shm" ? kizuna::Transport::Shm : kizuna::Transport::Tcp;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());

  for (int world : {2, 4}) {
    g_comms[world] = make_comms(world);
    auto add = [&](Mode m, std::size_t cap, Compression c) {
      benchmark::RegisterBenchmark(bench_name(world, m, cap, c).c_str(), BM_step, world, m, cap, c)
          ->Threads(world)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(4);
    };
    add(Mode::Compute, 0, Compression::None);
    for (const auto& cfg : kConfigs) {
      add(Mode::Comm, cfg.cap_mib, cfg.compression);
      add(Mode::Overlap, cfg.cap_mib, cfg.compression);
    }
  }
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_summary(reporter);
  benchmark::Shutdown();
  g_buffers.clear();
  g_comms.clear();
  return 0;
}
