// run/options.hpp: kizuna-run's command line.
//
// RunOptions is what the flags say, validated (ranges, --tee only with
// --log-dir, --master-addr required with several nodes) with the defaults
// filled in: --nproc-per-node auto already resolved to a count. The flags
// are parsed by CLI11 (common/cli.hpp); parse_options() throws
// tools::UsageError on anything wrong, and main prints it with the usage
// line and exits 2. Flags take their value as the next argument or after
// '=' (--nnodes 2, --nnodes=2), each at most once; torchrun's underscore
// spellings (--nproc_per_node) are accepted too. The first argument that is
// not a flag, or everything after "--", is the program and its arguments.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace kizuna::run {

struct RunOptions {
  static constexpr int kDefaultMultiNodePort = 29500;
  static constexpr std::chrono::milliseconds kDefaultTimeout{300'000};

  int nproc_per_node = 1;
  std::string nproc_source;  // how `auto` decided nproc_per_node, for the banner; "" otherwise
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;  // "" when not given: 127.0.0.1 on one node
  int master_port = -1;     // -1 when not given: a free port (one node) or 29500
  int max_restarts = 0;
  // --elastic MIN:MAX (one node): a worker that dies does not end the job
  // while at least MIN workers run; its replacements (up to max_restarts)
  // join the running group (KIZUNA_JOIN=1). 0: not elastic.
  int elastic_min = 0;
  int elastic_max = 0;
  std::string port_range;   // --port-range LO-HI: the workers' KIZUNA_PORT_RANGE ("" keeps the environment's)
  std::string log_dir;      // "" = console only
  bool tee = false;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // --bind: pin worker i to the i-th CPU kizuna-run may run on. Auto binds
  // when the workers fit (nproc-per-node <= those CPUs), as mpirun does: two
  // spinning ranks that the scheduler first puts on one core otherwise run
  // at a fraction of their speed for tens of milliseconds.
  enum class Bind { Auto, Core, None };
  Bind bind = Bind::Auto;
  std::vector<std::string> program;  // program and its arguments
  bool help = false;

  // The address workers and other launchers reach the store at.
  std::string store_host() const { return master_addr.empty() ? "127.0.0.1" : master_addr; }
};

RunOptions parse_options(int argc, char** argv);

// "usage: kizuna-run [--nproc-per-node N|auto] ... [--] program [args...]"
const char* usage_line();
// The --help text: every flag with its default, the variables workers get,
// the exit status.
std::string help_text();

// The value of --nproc-per-node auto: the CPU cores this process may run on,
// or the NVIDIA GPUs when KIZUNA_DEVICE asks for cuda and the driver lists
// some (CUDA_VISIBLE_DEVICES counted). `source` says which, for the banner.
int auto_nproc_per_node(std::string& source);

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus();

// The CPU each of `workers` workers is pinned to under `bind` (empty: none
// pinned, also when they do not fit; parse_options refuses --bind core then).
std::vector<int> binding(RunOptions::Bind bind, int workers);

}  // namespace kizuna::run
