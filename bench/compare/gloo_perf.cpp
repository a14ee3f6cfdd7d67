// gloo-perf: Gloo's all-reduce algorithms, measured and printed exactly as
// kizuna-perf measures and prints kizuna's (same flags, same columns, same
// closed-form check), for the side-by-side comparison of
// scripts/bench_compare.sh.
//
//   bench/compare/launch.sh 4 gloo-perf --algo ring -b 4 -e 64M -f 2
//
// Ranks are processes started by a launcher (bench/compare/launch.sh or
// kizuna-run) with the usual variables; they rendezvous through kizuna's
// TcpStore (rank 0 hosts it), seen by Gloo through a small adapter, and
// then talk over Gloo's TCP transport on loopback in its default mode
// (asynchronous: a device thread polls the sockets and wakes the caller,
// no busy-polling).
//
// --algo picks the algorithm class: ring (AllreduceRing), ring_chunked
// (AllreduceRingChunked), halving_doubling (AllreduceHalvingDoubling),
// bcube (AllreduceBcube). Each is constructed once per size, as its
// documentation intends (construction allocates and registers buffers),
// warmed up, then timed with run(). They are in-place only, so the
// out-of-place columns print N/A.
//
// Exit status: 0 every element right, 1 a wrong element or a failure, 2 bad usage.
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <kizuna/error.hpp>
#include <kizuna/store.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/launch_env.hpp"
#include "perf/args.hpp"
#include "perf/collective.hpp"
#include "perf/data.hpp"
#include "perf/driver.hpp"
#include "perf/report.hpp"
#include "perf/timing.hpp"

namespace {

using namespace kizuna::perf;
using kizuna::DataType;
using kizuna::ReduceOp;

// Gloo's rendezvous store interface over a kizuna Store.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(std::shared_ptr<kizuna::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, kizuna::Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const kizuna::Bytes value = store_->get(key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<kizuna::Store> store_;
};

const std::vector<std::string> kAlgorithms = {"ring", "ring_chunked", "halving_doubling", "bcube"};

std::unique_ptr<gloo::Algorithm> make_algorithm(const std::string& algo,
                                                const std::shared_ptr<gloo::Context>& context, float* data,
                                                int count, ReduceOp op) {
  const gloo::ReductionFunction<float>* fn = op == ReduceOp::Prod  ? gloo::ReductionFunction<float>::product
                                             : op == ReduceOp::Min ? gloo::ReductionFunction<float>::min
                                             : op == ReduceOp::Max ? gloo::ReductionFunction<float>::max
                                                                   : gloo::ReductionFunction<float>::sum;
  const std::vector<float*> ptrs{data};
  if (algo == "ring") return std::make_unique<gloo::AllreduceRing<float>>(context, ptrs, count, fn);
  if (algo == "ring_chunked")
    return std::make_unique<gloo::AllreduceRingChunked<float>>(context, ptrs, count, fn);
  if (algo == "halving_doubling")
    return std::make_unique<gloo::AllreduceHalvingDoubling<float>>(context, ptrs, count, fn);
  return std::make_unique<gloo::AllreduceBcube<float>>(context, ptrs, count, fn);
}

// One element of a small all-reduce over the context, for -a and the
// wrong counts (ring: two ranks or four, it is a handful of bytes).
template <typename T>
T all_reduce_scalar(const std::shared_ptr<gloo::Context>& context, T value,
                    const gloo::ReductionFunction<T>* fn) {
  gloo::AllreduceRing<T> reduce(context, {&value}, 1, fn);
  reduce.run();
  return value;
}

// Ends the run without tripping Gloo: a pair whose peer has closed its
// socket fails its next receive, and one process leaving while another is
// still inside a Gloo call can make that call fail. So every rank first
// waits, through the store, until all are done with Gloo; and rank 0, which
// hosts the store, leaves last, once every other rank has said it is leaving.
void leave_together(kizuna::Store& store, int rank, int world) {
  if (store.add("gloo-perf/done", 1) == world) store.set("gloo-perf/all-done", std::string_view("1"));
  store.wait({"gloo-perf/all-done"});
  if (rank != 0) {
    if (store.add("gloo-perf/leaving", 1) == world - 1) store.set("gloo-perf/all-leaving", std::string_view("1"));
    return;
  }
  if (world > 1) store.wait({"gloo-perf/all-leaving"});
}

struct Options {
  CommonOptions common;
  std::string algorithm = "ring";
  ReduceOp op = ReduceOp::Sum;
};

int run(const Options& o) {
  const kizuna::core::LaunchEnv launch = kizuna::core::LaunchEnv::from_process();
  launch.require_rank();
  const auto store = kizuna::Store::from_env();
  StoreAdapter adapter(store);
  gloo::rendezvous::PrefixStore prefixed("gloo-perf", adapter);

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  attr.ai_family = AF_INET;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(launch.rank, launch.world_size);
  context->connectFullMesh(prefixed, device);
  const int rank = context->rank;
  const int world = context->size;

  const std::vector<std::string> algorithms =
      o.algorithm == "all" ? kAlgorithms : std::vector<std::string>{o.algorithm};
  const ClosedForm data(DataType::Float32, o.op, world);
  const std::size_t max_bytes = o.common.sizes().empty() ? 0 : o.common.sizes().back();
  PerfBuffers buffers(max_bytes);
  float* buf = reinterpret_cast<float*>(buffers.recv());

  // "#  Rank r ..." lines, gathered through the store.
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  char line[160];
  std::snprintf(line, sizeof line, "#  Rank %2d Group  0 Pid %6d on %10s device cpu transport gloo-tcp",
                rank, static_cast<int>(::getpid()), host);
  store->set("gloo-perf/line/" + std::to_string(rank), std::string_view(line));
  std::vector<std::string> rank_lines;
  for (int r = 0; r < world; ++r) rank_lines.push_back(store->get_string("gloo-perf/line/" + std::to_string(r)));

  std::int64_t total_wrong = 0;
  for (const std::string& algo : algorithms) {
    RunInfo info;
    info.tool = "gloo-perf";
    info.collective = "all_reduce";
    info.algorithm = algo;
    info.transport = "gloo-tcp";
    info.launcher = launch.source;
    info.world_size = world;
    info.min_bytes = o.common.min_bytes;
    info.max_bytes = o.common.max_bytes;
    info.step_bytes = o.common.step_bytes;
    info.step_factor = o.common.step_factor;
    info.iters = o.common.iters;
    info.warmup = o.common.warmup;
    info.check = o.common.check;
    info.average = o.common.average;
    info.rank_lines = rank_lines;
    Report report(info, rank == 0 ? stdout : nullptr);
    report.header();
    for (const std::size_t bytes : o.common.sizes()) {
      const Sizing s = size_for(Collective::AllReduce, bytes, sizeof(float), world);
      Row row;
      row.size = s.bytes;
      row.count = s.count;
      row.type = "float";
      row.redop = std::string(kizuna::name(o.op));
      row.root = -1;
      data.input(rank, 0, s.count, buf);
      const int count = static_cast<int>(s.count);
      const auto algorithm = make_algorithm(algo, context, buf, count, o.op);
      gloo::BarrierAllToAll barrier(context);
      const double local = time_calls(
          o.common.warmup, o.common.iters, [&] { algorithm->run(); }, [&] { barrier.run(); });
      double seconds = local;
      switch (time_reduction(o.common.average)) {
        case TimeReduction::None: break;
        case TimeReduction::Sum: seconds = all_reduce_scalar(context, local, gloo::ReductionFunction<double>::sum); break;
        case TimeReduction::Min: seconds = all_reduce_scalar(context, local, gloo::ReductionFunction<double>::min); break;
        case TimeReduction::Max: seconds = all_reduce_scalar(context, local, gloo::ReductionFunction<double>::max); break;
      }
      seconds = finish_time(o.common.average, seconds, world);
      std::int64_t wrong = -1;  // not checked
      for (int k = 0; k < o.common.check && wrong <= 0; ++k) {
        data.input(rank, 0, s.count, buf);
        algorithm->run();
        std::string first;
        std::int64_t mine = static_cast<std::int64_t>(data.wrong_reduced(buf, 0, s.count, &first));
        if (mine)
          std::fprintf(stderr, "gloo-perf: rank %d: %s count %zu: %lld wrong, first at %s\n", rank,
                       algo.c_str(), s.count, static_cast<long long>(mine), first.c_str());
        wrong = all_reduce_scalar(context, mine, gloo::ReductionFunction<std::int64_t>::sum);
      }
      row.in_place = measurement(s.bytes, seconds, bus_factor(Collective::AllReduce, world), wrong);
      report.row(row);
    }
    total_wrong += report.footer();
    const std::string suffix = algorithms.size() > 1 ? "." + algo : "";
    if (rank == 0 && !o.common.json_path.empty()) report.write_json(o.common.json_path + suffix);
    if (rank == 0 && !o.common.csv_path.empty()) report.write_csv(o.common.csv_path + suffix);
  }
  leave_together(*store, rank, world);
  return total_wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  ArgParser p("gloo-perf",
              "Gloo's all-reduce algorithms over TCP on loopback, with kizuna-perf's flags and columns\n"
              "(float32; in-place only). Ranks from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.");
  add_common_options(p, o.common);
  p.value("", "--algo", "NAME", "ring (default), ring_chunked, halving_doubling, bcube, or all",
          [&](std::string_view v) {
            bool known = v == "all";
            for (const auto& a : kAlgorithms) known = known || v == a;
            if (!known)
              throw UsageError("--algo='" + std::string(v) +
                               "': accepted ring, ring_chunked, halving_doubling, bcube, all");
            o.algorithm = std::string(v);
          });
  p.value("-o", "--op", "OP", "sum (default), prod, min or max", [&](std::string_view v) {
    o.op = kizuna::parse_reduce_op(v);
    if (o.op == ReduceOp::Avg) throw UsageError("-o avg: Gloo's algorithms have no average");
  });
  p.value("-d", "--datatype", "TYPE", "float32 only", [&](std::string_view v) {
    if (kizuna::parse_data_type(v) != DataType::Float32)
      throw UsageError("-d: this harness measures float32 only");
  });
  try {
    if (!p.parse(argc, argv)) {
      std::fputs(p.usage().c_str(), stdout);
      return 0;
    }
    validate(o.common);
    if (o.common.max_bytes / sizeof(float) > static_cast<std::size_t>(INT32_MAX))
      throw UsageError("-e: Gloo counts elements in an int; at most 8G bytes");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo-perf: %s\nrun 'gloo-perf --help' for the options\n", e.what());
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo-perf: %s\n", e.what());
    return 1;
  }
}
