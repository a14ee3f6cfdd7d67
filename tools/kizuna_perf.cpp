// kizuna-perf: collective bandwidth, measured the way NVIDIA's nccl-tests
// measure it (all_reduce_perf and friends), with the same flags and columns.
//
//   kizuna-run -n 4 kizuna-perf -b 8 -e 64M -f 2                  ranks as processes
//   mpirun -np 4 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 kizuna-perf ...
//   kizuna-perf --threads 4 -b 8 -e 64M -f 2                      ranks as threads
//   kizuna-run -n 4 kizuna-perf --device cuda -b 8 -e 1G -f 2       GPU buffers
//   kizuna-run -n 4 kizuna-perf --calibrate tuning.txt              a tuning profile
//   kizuna-run -n 4 kizuna-perf --calibrate t.txt --versus t.txt    auto against every forced way
//
// Each size is one row: size, count, type, redop, root, then time (us),
// algbw and busbw (GB/s) and #wrong for out-of-place and for in-place
// calls; busbw uses nccl-tests' factors (perf/collective.hpp). Inputs are
// computed in closed form, so the check (-c 1, the default) costs no
// communication beyond one sum of the wrong counts (perf/data.hpp). Only
// rank 0 prints; --json and --csv also write the rows to files.
//
// As processes, each rank finds its rank, the world size and the store
// (rank 0 hosts it) in the launcher's variables: RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT (kizuna-run, torchrun), or Open MPI's
// OMPI_COMM_WORLD_* with MASTER_ADDR/MASTER_PORT passed through -x.
// --threads N runs N ranks as threads of this process over an in-process
// store instead. --device cuda puts the buffers in GPU memory (local rank L
// on GPU L modulo the GPUs there are) and orders the calls on a CUDA stream;
// inputs are computed and results checked on the host, copied across
// outside the timed loop (perf/device_memory.hpp).
//
// Exit status: 0 every element right, 1 a wrong element or a failure (the
// message is on stderr), 2 bad usage: a flag or a KIZUNA_* variable.
#include <kizuna/comm.hpp>
#include <kizuna/error.hpp>
#include <kizuna/hash_store.hpp>
#include <kizuna/store.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/env.hpp"
#include "core/launch_env.hpp"
#include "perf/args.hpp"
#include "perf/calibration.hpp"
#include "perf/device_memory.hpp"
#include "perf/driver.hpp"
#include "perf/versus.hpp"

namespace {

using namespace kizuna;
using namespace kizuna::perf;

constexpr const char* kSummary =
    "Measures a collective's time and bandwidth over a sweep of sizes, with nccl-tests' flags,\n"
    "columns and bus-bandwidth factors, and checks every result. Ranks come from the launcher\n"
    "(kizuna-run, torchrun or mpirun: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or, with\n"
    "--threads N, are N threads of this process.\n"
    "Exit status: 0 all results right, 1 a wrong result or a failure, 2 bad usage.";

// Algorithm::OneShot, TwoShot and Doubling, where this build of kizuna has
// them (looked up at compile time, so the tool builds against older
// libraries too, for side-by-side runs).
template <typename A = Algorithm>
std::optional<A> one_shot_algorithm() {
  if constexpr (requires { A::OneShot; }) return A::OneShot;
  else return std::nullopt;
}
template <typename A = Algorithm>
std::optional<A> two_shot_algorithm() {
  if constexpr (requires { A::TwoShot; }) return A::TwoShot;
  else return std::nullopt;
}
template <typename A = Algorithm>
std::optional<A> doubling_algorithm() {
  if constexpr (requires { A::Doubling; }) return A::Doubling;
  else return std::nullopt;
}

// Communicator::allocate_symmetric, where this build has it.
template <typename C = Communicator>
std::shared_ptr<void> allocate_symmetric(C& comm, std::size_t bytes) {
  if constexpr (requires { comm.allocate_symmetric(bytes); }) return comm.allocate_symmetric(bytes);
  else return nullptr;
}
template <typename C = Communicator>
constexpr bool symmetric_memory_available() {
  return requires(C& c) { c.allocate_symmetric(std::size_t{1}); };
}

std::string algorithm_names() {
  std::string names = "auto, ring, tree";
  if (one_shot_algorithm()) names += ", oneshot";
  if (two_shot_algorithm()) names += ", twoshot";
  if (doubling_algorithm()) names += ", doubling";
  return names;
}

struct Options {
  PerfConfig config;
  std::string algorithm = "auto";
  Algorithm algorithm_value = Algorithm::Auto;
  std::string transport;  // empty: as the environment says
  int threads = 0;        // 0: ranks are processes
  bool cuda = false;      // --device cuda: buffers on the GPU, calls on a stream
  bool symmetric = false; // -R 2: buffers in symmetric memory
  std::string calibrate;  // --calibrate FILE: measure the candidates, write a tuning profile
  std::string versus;     // --versus FILE: auto with that profile against every forced candidate
  int rounds = 5;         // --rounds: of --calibrate and --versus
  std::chrono::milliseconds placement_wait{0};  // --placement-wait: of --calibrate
};

std::vector<DataType> parse_types(std::string_view text) {
  if (text == "all") {
    std::vector<DataType> all;
    for (int t = 0; t < kNumDataTypes; ++t) all.push_back(static_cast<DataType>(t));
    return all;
  }
  return {parse_data_type(text)};
}

std::vector<ReduceOp> parse_ops(std::string_view text) {
  if (text == "all") return {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg};
  return {parse_reduce_op(text)};
}

// Returns false after --help.
bool parse_command_line(int argc, char** argv, Options& o, ArgParser& p) {
  PerfConfig& c = o.config;
  add_common_options(p, c.common);
  p.value("-o", "--op", "OP", "reduction: sum, prod, min, max, avg or all (default sum)",
          [&](std::string_view v) { c.ops = parse_ops(v); });
  p.value("-d", "--datatype", "TYPE",
          "int8 uint8 int32 uint32 int64 uint64 float16|half bfloat16 float32|float float64|double, "
          "or all (default float32)",
          [&](std::string_view v) { c.types = parse_types(v); });
  p.value("-r", "--root", "RANK", "root of broadcast and reduce (default 0)",
          [&](std::string_view v) { c.root = static_cast<int>(core::parse_int("--root", v, 0, 1 << 24)); });
  p.value("", "--collective", "NAME",
          "all_reduce (default), all_gather, reduce_scatter, broadcast or reduce",
          [&](std::string_view v) {
            const auto coll = parse_collective(v);
            if (!coll)
              throw UsageError("--collective='" + std::string(v) +
                               "': accepted all_reduce, all_gather, reduce_scatter, broadcast, reduce");
            c.collective = *coll;
          });
  p.value("", "--algo", "NAME",
          "one of " + algorithm_names() + " (auto, the default: the cost model chooses per call)",
          [&](std::string_view v) {
            o.algorithm = std::string(v);
            if (v == "auto") o.algorithm_value = Algorithm::Auto;
            else if (v == "ring") o.algorithm_value = Algorithm::Ring;
            else if (v == "tree") o.algorithm_value = Algorithm::Tree;
            else if (v == "oneshot" && one_shot_algorithm()) o.algorithm_value = *one_shot_algorithm();
            else if (v == "twoshot" && two_shot_algorithm()) o.algorithm_value = *two_shot_algorithm();
            else if (v == "doubling" && doubling_algorithm()) o.algorithm_value = *doubling_algorithm();
            else throw UsageError("--algo='" + std::string(v) + "': accepted " + algorithm_names());
          });
  p.value("", "--transport", "NAME", "auto (default), tcp or shm: sets KIZUNA_TRANSPORT",
          [&](std::string_view v) {
            if (v != "auto" && v != "tcp" && v != "shm")
              throw UsageError("--transport='" + std::string(v) + "': accepted auto, tcp, shm");
            o.transport = std::string(v);
          });
  p.value("", "--device", "NAME",
          "cpu (default) or cuda: buffers in GPU memory, calls ordered on a CUDA stream; local rank "
          "L uses GPU L modulo the GPUs there are",
          [&](std::string_view v) {
            if (v != "cpu" && v != "cuda") throw UsageError("--device='" + std::string(v) + "': accepted cpu, cuda");
            o.cuda = v == "cuda";
          });
  p.value("-R", "--local_register", "0|2",
          "buffer registration as nccl-tests has it: 0, private buffers (default); 2, symmetric memory "
          "(Communicator::allocate_symmetric), whose all-reduces read the peers' buffers in place",
          [&](std::string_view v) {
            if (v != "0" && v != "2")
              throw UsageError("-R '" + std::string(v) + "': accepted 0 (none) and 2 (symmetric); kizuna has no "
                               "local registration (1)");
            if (v == "2" && !symmetric_memory_available())
              throw UsageError("-R 2: this build of kizuna has no symmetric memory");
            o.symmetric = v == "2";
          });
  p.value("-t", "--threads", "N",
          "run N ranks as threads of this process (under a launcher only -t 1, nccl-tests' default, which "
          "changes nothing)",
          [&](std::string_view v) { o.threads = static_cast<int>(core::parse_int("--threads", v, 1, 1024)); });
  p.value("-g", "--ngpus", "1", "devices per rank: always 1 (nccl-tests' flag, accepted for its command lines)",
          [&](std::string_view v) { core::parse_int("-g", v, 1, 1); });
  p.value("", "--calibrate", "FILE",
          "measure every way an all-reduce can go here (each algorithm, the mailboxes, the staged and, with "
          "-R 2, the symmetric route) over the sweep (without -b/-e: 8 B .. 64 MiB, -f 2) and add the "
          "result to the tuning profile FILE, which KIZUNA_TUNING_FILE loads (docs/tuning.md#tuner)",
          [&](std::string_view v) {
            if (v.empty()) throw UsageError("--calibrate needs a file name");
            o.calibrate = std::string(v);
          });
  p.value("", "--versus", "FILE",
          "race auto, with the tuning profile FILE, against auto without a profile and every forced way "
          "(timed as --calibrate times them, 30 ms a measurement), alternating in these same processes, and print each one's time per "
          "size (--json: the rounds' times); with --calibrate FILE too, calibrate first (make bench-auto)",
          [&](std::string_view v) {
            if (v.empty()) throw UsageError("--versus needs a file name");
            o.versus = std::string(v);
          });
  p.value("", "--rounds", "N", "rounds of --calibrate and --versus, each size's time their median (default 5)",
          [&](std::string_view v) { o.rounds = static_cast<int>(core::parse_int("--rounds", v, 1, 1000)); });
  p.value("", "--placement-wait", "DURATION",
          "with --calibrate: after the rounds, while the CPUs were found near (sharing a cache) or far in "
          "fewer than --rounds rounds, calibrate more rounds for up to DURATION (\"60s\"), so that the "
          "profile holds a table of each placement (for hosts that move the CPUs; docs/tuning.md#tuner)",
          [&](std::string_view v) { o.placement_wait = core::parse_duration("--placement-wait", v); });
  if (!p.parse(argc, argv)) return false;
  if (o.placement_wait.count() > 0 && o.calibrate.empty())
    throw UsageError("--placement-wait is how long --calibrate goes on: give --calibrate FILE too");
  if (!o.versus.empty() && !o.calibrate.empty() && o.versus != o.calibrate)
    throw UsageError("--versus " + o.versus + " with --calibrate " + o.calibrate +
                     ": together they name one profile, calibrated then raced");
  if (!o.calibrate.empty() || !o.versus.empty()) {
    const char* flag = o.calibrate.empty() ? "--versus" : "--calibrate";
    if (o.algorithm_value != Algorithm::Auto)
      throw UsageError(std::string(flag) + " measures every algorithm: drop --algo");
    if (o.cuda) throw UsageError(std::string(flag) + " measures host buffers: drop --device cuda");
    if (c.collective != Collective::AllReduce)
      throw UsageError(std::string(flag) + " measures all_reduce: drop --collective");
    const CommonOptions untouched;
    if (c.common.min_bytes == untouched.min_bytes && c.common.max_bytes == untouched.max_bytes) {
      c.common.min_bytes = 8;
      c.common.max_bytes = 64ull << 20;
      if (c.common.step_factor == 1) c.common.step_factor = 2;
    }
  }
  validate(c.common);
  // nccl-tests' command lines say -t 1 under mpirun: one thread per process.
  // Here --threads N makes a world of its own, which under a launcher would
  // quietly run each process alone.
  if (o.threads > 0) {
    const core::LaunchEnv launch = core::LaunchEnv::from_process();
    if (launch.rank >= 0 && launch.world_size > 1) {
      if (o.threads > 1)
        throw UsageError("--threads " + std::to_string(o.threads) + " runs a world of its own threads, but this " +
                         "process is rank " + std::to_string(launch.rank) + " of " +
                         std::to_string(launch.world_size) + " started by " + launch.source +
                         ": drop -t/--threads (or give -t 1)");
      o.threads = 0;  // -t 1: one rank per process, as launched
    }
  }
  // "-d all -o all" skips the (integer, avg) pairs; asking for one is an error.
  if (has_op(c.collective) && c.types.size() == 1 && !is_floating(c.types[0]) && c.ops.size() == 1 &&
      c.ops[0] == ReduceOp::Avg)
    throw UsageError("-o avg is defined for floating types only, not " + std::string(name(c.types[0])));
  return true;
}

std::string transport_name(const Options& o) {
  if (!o.transport.empty()) return o.transport;
  const char* env = std::getenv("KIZUNA_TRANSPORT");
  return env && *env ? env : "auto";
}

// Where a rank's buffers live: -1 for the host, or with --device cuda the
// GPU of local rank `local_rank` (several ranks may share one).
int gpu_for(const Options& o, int local_rank) {
  return o.cuda ? std::max(local_rank, 0) % cuda_device_count() : -1;
}

// The communicator's device for `gpu`: "cpu" or "cuda:N".
std::string device_name(int gpu) { return gpu < 0 ? "cpu" : "cuda:" + std::to_string(gpu); }

CalibrationArgs calibration_args(const Options& o) {
  CalibrationArgs args;
  args.path = o.calibrate;
  args.sizes = o.config.common.sizes();
  args.symmetric = o.symmetric;
  args.rounds = o.rounds;
  args.placement_wait = o.placement_wait;
  return args;
}

// --calibrate and --versus, as asked: the exit status.
int run_tuning(const CommOptions& options, const Options& o) {
  if (!o.calibrate.empty()) {
    const int status = run_calibration(options, calibration_args(o));
    if (status != 0 || o.versus.empty()) return status;
  }
  VersusArgs args;
  args.profile = o.versus;
  args.json = o.config.common.json_path;
  args.transport = transport_name(o);
  for (std::size_t bytes : o.config.common.sizes())
    if (bytes >= 4 && (args.sizes.empty() || bytes / 4 * 4 > args.sizes.back())) args.sizes.push_back(bytes / 4 * 4);
  if (args.sizes.empty()) throw UsageError("--versus: no size of 4 bytes or more");
  args.symmetric = o.symmetric;
  args.rounds = o.rounds;
  return run_versus(options, args);
}

// One rank's whole run; returns the wrong elements over every rank.
std::int64_t run_rank(Communicator& comm, const Options& o, const std::string& launcher,
                      int gpu) {
  const PerfConfig& c = o.config;
  if (has_root(c.collective) && c.root >= comm.size())
    throw UsageError("--root " + std::to_string(c.root) + " is not a rank of a world of " +
                     std::to_string(comm.size()));
  PerfBuffers buffers = o.symmetric ? PerfBuffers(buffer_bytes(c), allocate_symmetric(
                                                                       comm, PerfBuffers::span_bytes(buffer_bytes(c))))
                                    : PerfBuffers(buffer_bytes(c));
  std::unique_ptr<DeviceMemory> memory;
  if (gpu >= 0) memory = make_device_memory(gpu, buffer_bytes(c));
  RunInfo info;
  info.tool = "kizuna-perf";
  info.collective = std::string(name(c.collective));
  info.algorithm = o.algorithm;
  info.transport = transport_name(o);
  info.buffers = o.symmetric ? "symmetric" : "private";
  info.launcher = launcher;
  info.world_size = comm.size();
  info.min_bytes = c.common.min_bytes;
  info.max_bytes = c.common.max_bytes;
  info.step_bytes = c.common.step_bytes;
  info.step_factor = c.common.step_factor;
  info.iters = c.common.iters;
  info.warmup = c.common.warmup;
  info.check = c.common.check;
  info.average = c.common.average;
  // The communicator's own account of its device: which GPU and the path
  // its collectives take (GPU to GPU, or staged through the host).
  info.rank_lines = gather_rank_lines(comm, gpu >= 0 ? comm.device() : device_name(gpu), info.transport);
  info.tuning = comm.tuning();

  const bool printing = comm.rank() == 0;
  // Rank 0 writes the results files. Whether it can is everyone's business:
  // the others would otherwise wait for it in a collective that it never
  // joins. So every rank learns the outcome, before the sweep (a path that
  // cannot be written fails at once, not after the sweep) and after it.
  auto fail_together = [&](const std::string& mine) {
    std::int64_t failed = mine.empty() ? 0 : 1;
    comm.all_reduce(&failed, 1, DataType::Int64, ReduceOp::Max).wait();
    if (failed) throw Error(ErrorCode::SystemError, printing ? mine : "rank 0 could not write its results files");
  };
  auto write_files = [&](Report& report) -> std::string {
    try {
      if (!c.common.json_path.empty()) report.write_json(c.common.json_path);
      if (!c.common.csv_path.empty()) report.write_csv(c.common.csv_path);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  Report report(info, printing ? stdout : nullptr);
  fail_together(printing ? write_files(report) : "");  // the files' headers alone, for now
  report.header();
  const std::int64_t wrong = run_sweep(comm, c, buffers, memory.get(), report);
  report.footer();
  fail_together(printing ? write_files(report) : "");
  return wrong;
}

int run_processes(const Options& o) {
  const core::LaunchEnv launch = core::LaunchEnv::from_process();
  if (launch.rank < 0)
    throw Error(ErrorCode::InvalidArgument,
                "no rank in the environment: start kizuna-perf under kizuna-run, torchrun or mpirun "
                "(RANK/WORLD_SIZE or OMPI_COMM_WORLD_*, with MASTER_ADDR and MASTER_PORT), or run "
                "ranks as threads with --threads N");
  launch.require_rank();
  CommOptions options;
  options.store = Store::from_env();
  options.rank = launch.rank;
  options.world_size = launch.world_size;
  options.name = "kizuna-perf";
  options.algorithm = o.algorithm_value;
  const int gpu = gpu_for(o, launch.local_rank);
  options.device = device_name(gpu);
  if (!o.calibrate.empty() || !o.versus.empty()) return run_tuning(options, o);
  const auto comm = Communicator::create(options);
  return run_rank(*comm, o, launch.source, gpu) ? 1 : 0;
}

int run_threads(const Options& o) {
  const int n = o.threads;
  if (has_root(o.config.collective) && o.config.root >= n)
    throw UsageError("--root " + std::to_string(o.config.root) + " is not a rank of " +
                     std::to_string(n) + " threads");
  const auto store = std::make_shared<HashStore>();
  std::vector<std::shared_ptr<Communicator>> comms(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::int64_t> wrong(n, 0);
  std::mutex mutex;
  // A rank that fails aborts the others, which would otherwise wait for it
  // until their deadline.
  auto abort_all = [&](int failed) {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& comm : comms)
      if (comm) comm->abort("rank " + std::to_string(failed) + " of kizuna-perf failed");
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        CommOptions options;
        options.store = store;
        options.rank = r;
        options.world_size = n;
        options.name = "kizuna-perf";
        options.algorithm = o.algorithm_value;
        const int gpu = gpu_for(o, r);
        options.device = device_name(gpu);
        if (!o.calibrate.empty() || !o.versus.empty()) {
          wrong[r] = run_tuning(options, o);
          return;
        }
        auto comm = Communicator::create(options);
        {
          std::lock_guard<std::mutex> lock(mutex);
          comms[r] = comm;
        }
        wrong[r] = run_rank(*comm, o, "threads", gpu);
      } catch (...) {
        errors[r] = std::current_exception();
        abort_all(r);
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return wrong[0] ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  ArgParser parser("kizuna-perf", kSummary);
  try {
    if (!parse_command_line(argc, argv, o, parser)) {
      std::fputs(parser.usage().c_str(), stdout);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kizuna-perf: %s\nrun 'kizuna-perf --help' for the options\n", e.what());
    return tools::kUsageExit;
  }
  // Before any communicator exists: kizuna reads its environment once.
  if (!o.transport.empty()) ::setenv("KIZUNA_TRANSPORT", o.transport.c_str(), 1);
  try {
    tools::check_environment();
    return o.threads ? run_threads(o) : run_processes(o);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "kizuna-perf: %s\n", e.what());
    return tools::kUsageExit;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kizuna-perf: %s\n", e.what());
    return 1;
  }
}
