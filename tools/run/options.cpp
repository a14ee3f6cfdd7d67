// run/options.cpp: kizuna-run's flags on CLI11, their validation, and its --help.
#include "options.hpp"

#include <dirent.h>
#include <netdb.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string_view>

#include "common/cli.hpp"
#include "core/env.hpp"

namespace kizuna::run {
namespace {

using tools::UsageError;

constexpr int kMaxProcsPerNode = 4096;
constexpr int kMaxNodes = 65536;
constexpr int kMaxRestarts = 1'000'000;

int to_int(std::string_view flag, const std::string& value, int min, int max) {
  return static_cast<int>(core::parse_int(flag, value, min, max));
}

int count_cpus() {
  if (const std::size_t allowed = allowed_cpus().size()) return static_cast<int>(allowed);
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// GPUs the NVIDIA driver lists (/proc/driver/nvidia/gpus/<bus id>), without
// linking CUDA; CUDA_VISIBLE_DEVICES narrows them as the runtime would.
int count_nvidia_gpus() {
  int found = 0;
  if (DIR* dir = ::opendir("/proc/driver/nvidia/gpus")) {
    while (const dirent* entry = ::readdir(dir))
      if (entry->d_name[0] != '.') ++found;
    ::closedir(dir);
  }
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string_view list(visible);
    int listed = list.empty() ? 0 : 1 + static_cast<int>(std::count(list.begin(), list.end(), ','));
    found = std::min(found, listed);
  }
  return found;
}

// The flags, in --help's order. Each setter checks its own value; what
// needs several flags is checked by parse_options. Every flag may be given
// once (CLI11's policy Throw); torchrun's spellings are second names.
void declare(CLI::App& app, RunOptions& o) {
  app.prefix_command();  // the first word that is no flag starts the program
  tools::add_value(app, "--nproc-per-node,--nproc_per_node", "N|auto",
                   "workers on this node (default 1). auto: the CPU cores this\n"
                   "process may run on; the GPUs instead when KIZUNA_DEVICE=cuda\n"
                   "and the NVIDIA driver lists some (CUDA_VISIBLE_DEVICES counts)",
                   [&o](const std::string& v) {
                     o.nproc_per_node = v == "auto" ? auto_nproc_per_node(o.nproc_source)
                                                    : to_int("--nproc-per-node", v, 1, kMaxProcsPerNode);
                   });
  tools::add_value(app, "--nnodes", "M", "nodes in the job, one kizuna-run on each (default 1)",
                   [&o](const std::string& v) { o.nnodes = to_int("--nnodes", v, 1, kMaxNodes); });
  tools::add_value(app, "--node-rank,--node_rank", "K",
                   "this node's index, 0 .. M-1 (default 0); node 0's kizuna-run\n"
                   "hosts the store",
                   [&o](const std::string& v) { o.node_rank = to_int("--node-rank", v, 0, kMaxNodes - 1); });
  tools::add_value(app, "--master-addr,--master_addr", "A",
                   "node 0's address, where the store listens (default 127.0.0.1;\n"
                   "required when M > 1)",
                   [&o](const std::string& v) {
                     const bool bracketed = v.size() > 2 && v.front() == '[' && v.back() == ']';  // [IPv6]
                     o.master_addr = bracketed ? v.substr(1, v.size() - 2) : v;
                     if (o.master_addr.empty()) throw UsageError("--master-addr is empty");
                   });
  tools::add_value(app, "--master-port,--master_port", "P",
                   "kizuna's store's port on node 0 (default: a free port the OS\n"
                   "picks with one node; 29500 with several); workers' MASTER_PORT\n"
                   "is another one",
                   [&o](const std::string& v) { o.master_port = to_int("--master-port", v, 0, 65535); });
  tools::add_value(app, "--port-range,--port_range", "LO-HI",
                   "the ports every worker listens on for its peers, for firewalls\n"
                   "that open only a range: sets KIZUNA_PORT_RANGE (each worker\n"
                   "takes 2; default: any port the OS gives)",
                   [&o](const std::string& v) {
                     try {
                       const auto [lo, hi] = core::parse_port_range("--port-range", v);
                       o.port_range = std::to_string(lo) + "-" + std::to_string(hi);
                     } catch (const Error& e) {
                       throw UsageError(e.what());
                     }
                   });
  tools::add_value(app, "--max-restarts,--max_restarts", "R",
                   "after a worker fails, restart this node's workers up to R\n"
                   "times; each round rendezvouses afresh (default 0)",
                   [&o](const std::string& v) { o.max_restarts = to_int("--max-restarts", v, 0, kMaxRestarts); });
  tools::add_value(app, "--elastic", "MIN:MAX",
                   "one node: when a worker dies the others go on while at least\n"
                   "MIN run, and --max-restarts counts replacements, each started\n"
                   "with KIZUNA_JOIN=1 to join the running group; MAX bounds the\n"
                   "world (at least --nproc-per-node) (default off)",
                   [&o](const std::string& v) {
                     const std::size_t colon = v.find(':');
                     if (colon == std::string::npos)
                       throw UsageError("--elastic " + v + ": expected MIN:MAX, e.g. 3:4");
                     o.elastic_min = to_int("--elastic MIN", v.substr(0, colon), 1, 1 << 20);
                     o.elastic_max = to_int("--elastic MAX", v.substr(colon + 1), 1, 1 << 20);
                   });
  tools::add_value(app, "--log-dir,--log_dir", "DIR",
                   "write each rank's output (stdout and stderr) to DIR/rank<R>.log\n"
                   "instead of the console (default: the console only)",
                   [&o](const std::string& v) {
                     if (v.empty()) throw UsageError("--log-dir is empty");
                     o.log_dir = v;
                   });
  tools::add_switch(app, "--tee", "with --log-dir, print to the console as well (default off)",
                    [&o] { o.tee = true; });
  tools::add_value(app, "--timeout", "S",
                   "deadline of the rendezvous between nodes (connecting, the\n"
                   "agreement check) and of the wait for the other nodes to\n"
                   "finish: seconds, or 500ms, 30s, 2m (default 300s)",
                   [&o](const std::string& v) { o.timeout = core::parse_duration("--timeout", v); });
  tools::add_value(app, "--bind", "auto|core|none",
                   "core: pin worker i to the i-th CPU kizuna-run may run on;\n"
                   "none: leave placement to the scheduler; auto (default): core\n"
                   "when the workers fit on those CPUs, else worker i to CPU i\n"
                   "modulo their number",
                   [&o](const std::string& v) {
                     if (v == "auto") o.bind = RunOptions::Bind::Auto;
                     else if (v == "core") o.bind = RunOptions::Bind::Core;
                     else if (v == "none") o.bind = RunOptions::Bind::None;
                     else throw UsageError("--bind " + v + ": expected auto, core or none");
                   });
  tools::add_help(app, "print this text");
}

}  // namespace

int auto_nproc_per_node(std::string& source) {
  std::string device;
  if (const char* d = std::getenv("KIZUNA_DEVICE"))
    for (const char* c = d; *c; ++c) device += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
  if (device.rfind("cuda", 0) == 0) {
    if (const int gpus = count_nvidia_gpus(); gpus > 0) {
      source = "auto: " + std::to_string(gpus) + " GPUs (KIZUNA_DEVICE=" + device + ")";
      return gpus;
    }
    const int cpus = count_cpus();
    source = "auto: KIZUNA_DEVICE=" + device + " but no GPU found, so " + std::to_string(cpus) + " CPU cores";
    return cpus;
  }
  const int cpus = count_cpus();
  source = "auto: " + std::to_string(cpus) + " CPU cores";
  return cpus;
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::vector<int> binding(RunOptions::Bind bind, int workers) {
  if (bind == RunOptions::Bind::None) return {};
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) return {};
  // Round robin: with more workers than CPUs (parse_options refused that
  // for --bind core), each CPU gets its share from the start. Left to the
  // scheduler, 4 ranks on 2 cores ran 4 B all-reduces at 8-13 us instead
  // of 4-6 for their first ~100 ms, until its load estimates settled.
  std::vector<int> out;
  for (int w = 0; w < workers; ++w) out.push_back(cpus[static_cast<std::size_t>(w) % cpus.size()]);
  return out;
}

const char* usage_line() {
  return "usage: kizuna-run [--nproc-per-node N|auto] [--nnodes M] [--node-rank K]\n"
         "                  [--master-addr A] [--master-port P] [--max-restarts R]\n"
         "                  [--elastic MIN:MAX] [--port-range LO-HI]\n"
         "                  [--log-dir DIR] [--tee] [--timeout S] [--bind auto|core|none]\n"
         "                  [--] program [args...]\n";
}

std::string help_text() {
  CLI::App app;
  RunOptions unused;
  declare(app, unused);
  return "Starts `program` as the workers of a kizuna job on this node, as torchrun does for\n"
         "PyTorch: one kizuna-run per node, each starting --nproc-per-node workers.\n"
         "\n"
         "options:\n" +
         tools::option_table(app, 27) +
         "\n"
         "Each worker gets what torchrun gives (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,\n"
         "GROUP_RANK, GROUP_WORLD_SIZE, ROLE_*, TORCHELASTIC_*, MASTER_ADDR and MASTER_PORT: a\n"
         "free port on node 0 where rank 0 may start its own store, as torch's env:// does),\n"
         "NODE_RANK, KIZUNA_STORE (the store kizuna-run hosts) and KIZUNA_STORE_PREFIX\n"
         "(run<id>/round<k>, fresh after each restart), on top of kizuna-run's own environment\n"
         "(every KIZUNA_* variable included); stdin is /dev/null.\n"
         "Each line a worker prints is prefixed with its rank: \"[3] ...\".\n"
         "\n"
         "When a worker exits non-zero or is killed by a signal, kizuna-run stops the others\n"
         "(SIGTERM, then SIGKILL 5 s later), prints which rank failed, how, and its last lines.\n"
         "With --elastic the others go on instead (they shrink their communicator), and a\n"
         "replacement joins them (docs/launcher.md#elastic-jobs).\n"
         "SIGINT or SIGTERM to kizuna-run stops every worker; workers also die with kizuna-run.\n"
         "\n"
         "exit status: 0 every worker succeeded; 1 a worker failed (no restarts left) or the\n"
         "rendezvous failed; 2 bad usage; 128+N kizuna-run was stopped by signal N.\n"
         "docs/launcher.md has examples, including mpirun and srun.\n";
}

RunOptions parse_options(int argc, char** argv) {
  RunOptions o;
  CLI::App app;
  declare(app, o);
  if (!tools::parse(app, argc, argv)) {
    o.help = true;
    return o;
  }
  // What the flags left: the program and its arguments, after "--" or from
  // the first word that is no flag; or an unknown flag.
  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
  else if (!rest.empty() && rest.front().size() > 1 && rest.front().front() == '-')
    throw UsageError(tools::unknown(rest.front()));
  o.program = std::move(rest);

  if (o.node_rank >= o.nnodes)
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + " is not below --nnodes " +
                     std::to_string(o.nnodes));
  if (o.master_addr.empty() && o.nnodes > 1)
    throw UsageError("--master-addr is required with --nnodes " + std::to_string(o.nnodes) +
                     ": every node's kizuna-run must reach node 0's store");
  if (o.master_port == 0 && o.nnodes > 1)
    throw UsageError("--master-port 0 cannot work with several nodes: the other nodes must know the port");
  if (o.master_port < 0 && o.nnodes > 1) o.master_port = RunOptions::kDefaultMultiNodePort;
  if (o.elastic_min > 0) {
    if (o.nnodes > 1) throw UsageError("--elastic works on one node (--nnodes 1) for now");
    if (o.elastic_min > o.elastic_max)
      throw UsageError("--elastic " + std::to_string(o.elastic_min) + ":" + std::to_string(o.elastic_max) +
                       ": MIN is above MAX");
    if (o.elastic_min > o.nproc_per_node || o.elastic_max < o.nproc_per_node)
      throw UsageError("--elastic " + std::to_string(o.elastic_min) + ":" + std::to_string(o.elastic_max) +
                       ": --nproc-per-node " + std::to_string(o.nproc_per_node) + " must lie within MIN:MAX");
  }
  if (o.tee && o.log_dir.empty()) throw UsageError("--tee needs --log-dir (without it the console is the only output)");
  const std::size_t cpus = allowed_cpus().size();
  if (o.bind == RunOptions::Bind::Core && static_cast<std::size_t>(o.nproc_per_node) > cpus)
    throw UsageError("--bind core: " + std::to_string(o.nproc_per_node) + " workers but only " +
                     std::to_string(cpus) + " CPUs to bind them to (--bind none lets them share)");
  if (o.program.empty()) throw UsageError("no program to run");
  // A name that does not resolve fails here (the last check: it may ask a name
  // server), before any worker starts,
  // rather than as every worker's store timeout.
  if (!o.master_addr.empty()) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int error = ::getaddrinfo(o.master_addr.c_str(), nullptr, &hints, &found);
    if (found) ::freeaddrinfo(found);
    if (error != 0 && error != EAI_AGAIN)
      throw UsageError("--master-addr '" + o.master_addr + "' does not resolve: " + ::gai_strerror(error));
  }
  return o;
}

}  // namespace kizuna::run
