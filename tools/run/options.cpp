// run/options.cpp: parsing and validating kizuna-run's flags, and its --help.
#include "options.hpp"

#include <kizuna/error.hpp>

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <string_view>

#include "core/env.hpp"

namespace kizuna::run {
namespace {

constexpr int kMaxProcsPerNode = 4096;
constexpr int kMaxNodes = 65536;
constexpr int kMaxRestarts = 1'000'000;

// Flags that take a value, in their canonical spelling.
const std::vector<std::string_view> kValueFlags = {
    "--nproc-per-node", "--nnodes",       "--node-rank", "--master-addr",
    "--master-port",    "--max-restarts", "--log-dir",   "--timeout",
    "--bind",
};

// "--nproc_per_node" -> "--nproc-per-node" (torchrun accepts both).
std::string canonical(std::string flag) {
  for (std::size_t i = 2; i < flag.size(); ++i)
    if (flag[i] == '_') flag[i] = '-';
  return flag;
}

int to_int(const std::string& flag, const std::string& value, int min, int max) {
  try {
    return static_cast<int>(core::parse_int(flag, value, min, max));
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
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
         "                  [--log-dir DIR] [--tee] [--timeout S] [--bind auto|core|none]\n"
         "                  [--] program [args...]\n";
}

const char* help_text() {
  return "Starts `program` as the workers of a kizuna job on this node, as torchrun does for\n"
         "PyTorch: one kizuna-run per node, each starting --nproc-per-node workers.\n"
         "\n"
         "options:\n"
         "  --nproc-per-node N|auto  workers on this node (default 1). auto: the CPU cores this\n"
         "                           process may run on; the GPUs instead when KIZUNA_DEVICE=cuda\n"
         "                           and the NVIDIA driver lists some (CUDA_VISIBLE_DEVICES counts)\n"
         "  --nnodes M               nodes in the job, one kizuna-run on each (default 1)\n"
         "  --node-rank K            this node's index, 0 .. M-1 (default 0); node 0's kizuna-run\n"
         "                           hosts the store\n"
         "  --master-addr A          node 0's address, where the store listens (default 127.0.0.1;\n"
         "                           required when M > 1)\n"
         "  --master-port P          the store's port on node 0 (default: a free port the OS picks\n"
         "                           with one node; 29500 with several)\n"
         "  --max-restarts R         after a worker fails, restart this node's workers up to R\n"
         "                           times; each round rendezvouses afresh (default 0)\n"
         "  --log-dir DIR            write each rank's output (stdout and stderr) to DIR/rank<R>.log\n"
         "                           instead of the console (default: the console only)\n"
         "  --tee                    with --log-dir, print to the console as well (default off)\n"
         "  --timeout S              deadline of the rendezvous between nodes (connecting, the\n"
         "                           agreement check) and of the wait for the other nodes to\n"
         "                           finish: seconds, or 500ms, 30s, 2m (default 300s)\n"
         "  --bind auto|core|none    core: pin worker i to the i-th CPU kizuna-run may run on;\n"
         "                           none: leave placement to the scheduler; auto (default): core\n"
         "                           when the workers fit on those CPUs, else worker i to CPU i\n"
         "                           modulo their number\n"
         "  -h, --help               print this text\n"
         "\n"
         "Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, GROUP_RANK,\n"
         "MASTER_ADDR, MASTER_PORT, KIZUNA_STORE (the store kizuna-run hosts) and\n"
         "KIZUNA_STORE_PREFIX (run<id>/round<k>, fresh after each restart), on top of\n"
         "kizuna-run's own environment (every KIZUNA_* variable included); stdin is /dev/null.\n"
         "Each line a worker prints is prefixed with its rank: \"[3] ...\".\n"
         "\n"
         "When a worker exits non-zero or is killed by a signal, kizuna-run stops the others\n"
         "(SIGTERM, then SIGKILL 5 s later), prints which rank failed, how, and its last lines.\n"
         "SIGINT or SIGTERM to kizuna-run stops every worker; workers also die with kizuna-run.\n"
         "\n"
         "exit status: 0 every worker succeeded; 1 a worker failed (no restarts left) or the\n"
         "rendezvous failed; 2 bad usage; 128+N kizuna-run was stopped by signal N.\n"
         "docs/launcher.md has examples, including mpirun and srun.\n";
}

RunOptions parse_options(int argc, char** argv) {
  RunOptions o;
  std::map<std::string, std::string> values;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program
    if (arg.rfind("--", 0) != 0) throw UsageError("unknown option '" + arg + "'");
    std::string value;
    bool inline_value = false;
    if (const auto eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    const std::string flag = canonical(arg);
    if (flag == "--tee") {
      if (inline_value) throw UsageError("--tee takes no value");
      o.tee = true;
      continue;
    }
    if (std::find(kValueFlags.begin(), kValueFlags.end(), flag) == kValueFlags.end())
      throw UsageError("unknown option '" + arg + "'");
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      value = argv[++i];
    }
    if (values.count(flag)) throw UsageError(flag + " is given twice");
    values[flag] = value;
  }
  for (; i < argc; ++i) o.program.emplace_back(argv[i]);

  auto has = [&](const char* flag) { return values.count(flag) != 0; };
  if (has("--nproc-per-node")) {
    const std::string& v = values["--nproc-per-node"];
    if (v == "auto") {
      o.nproc_per_node = auto_nproc_per_node(o.nproc_source);
    } else {
      o.nproc_per_node = to_int("--nproc-per-node", v, 1, kMaxProcsPerNode);
    }
  }
  if (has("--nnodes")) o.nnodes = to_int("--nnodes", values["--nnodes"], 1, kMaxNodes);
  if (has("--node-rank")) o.node_rank = to_int("--node-rank", values["--node-rank"], 0, kMaxNodes - 1);
  if (o.node_rank >= o.nnodes)
    throw UsageError("--node-rank " + std::to_string(o.node_rank) + " is not below --nnodes " +
                     std::to_string(o.nnodes));
  if (has("--master-addr")) {
    o.master_addr = values["--master-addr"];
    if (o.master_addr.size() > 2 && o.master_addr.front() == '[' && o.master_addr.back() == ']')
      o.master_addr = o.master_addr.substr(1, o.master_addr.size() - 2);
    if (o.master_addr.empty()) throw UsageError("--master-addr is empty");
  } else if (o.nnodes > 1) {
    throw UsageError("--master-addr is required with --nnodes " + std::to_string(o.nnodes) +
                     ": every node's kizuna-run must reach node 0's store");
  }
  if (has("--master-port")) {
    o.master_port = to_int("--master-port", values["--master-port"], 0, 65535);
    if (o.master_port == 0 && o.nnodes > 1)
      throw UsageError("--master-port 0 cannot work with several nodes: the other nodes must know the port");
  } else if (o.nnodes > 1) {
    o.master_port = RunOptions::kDefaultMultiNodePort;
  }
  if (has("--max-restarts"))
    o.max_restarts = to_int("--max-restarts", values["--max-restarts"], 0, kMaxRestarts);
  if (has("--log-dir")) {
    o.log_dir = values["--log-dir"];
    if (o.log_dir.empty()) throw UsageError("--log-dir is empty");
  }
  if (o.tee && o.log_dir.empty()) throw UsageError("--tee needs --log-dir (without it the console is the only output)");
  if (has("--timeout")) {
    try {
      o.timeout = core::parse_duration("--timeout", values["--timeout"]);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  if (has("--bind")) {
    const std::string& v = values["--bind"];
    if (v == "auto") o.bind = RunOptions::Bind::Auto;
    else if (v == "core") o.bind = RunOptions::Bind::Core;
    else if (v == "none") o.bind = RunOptions::Bind::None;
    else throw UsageError("--bind " + v + ": expected auto, core or none");
    const std::size_t cpus = allowed_cpus().size();
    if (o.bind == RunOptions::Bind::Core && static_cast<std::size_t>(o.nproc_per_node) > cpus)
      throw UsageError("--bind core: " + std::to_string(o.nproc_per_node) + " workers but only " +
                       std::to_string(cpus) + " CPUs to bind them to (--bind none lets them share)");
  }
  if (o.program.empty()) throw UsageError("no program to run");
  return o;
}

}  // namespace kizuna::run
