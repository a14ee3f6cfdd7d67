// kizuna-run across two "hosts": two network namespaces joined by a veth
// pair, one kizuna-run --nnodes 2 in each (ip netns exec). The addresses
// exist only inside those namespaces; names carry this process's pid, and
// the namespaces (with the veth pair) are deleted at the end of each test
// and, if an earlier run was killed, at the start of the next.
//
// Needs root and a kernel that allows network namespaces; when the machine
// refuses, each test prints why and exits 77 (CTest SKIP_RETURN_CODE), so
// it is reported as skipped, never as passed.
#include <catch2/catch.hpp>

#include <signal.h>

#include "job.hpp"
#include "namespace_pair.hpp"

using namespace kizuna::test;
using namespace std::chrono_literals;

namespace {

const std::string kBin = KIZUNA_BINARY_DIR;
const std::string kRun = kBin + "/bin/kizuna-run";
const std::string kWorker = kBin + "/tests/multiproc/kizuna-test-worker";
const std::string kLaunchee = kBin + "/tests/launcher/kizuna-test-launchee";
const std::vector<std::string> kLauncherVariables = {
    "RANK",        "LOCAL_RANK",  "WORLD_SIZE",   "LOCAL_WORLD_SIZE",    "NODE_RANK", "GROUP_RANK",
    "MASTER_ADDR", "MASTER_PORT", "KIZUNA_STORE", "KIZUNA_STORE_PREFIX", "KIZUNA_SOCKET_IFNAME"};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

[[noreturn]] void skip(const std::string& why) {
  std::printf("SKIP: %s\n", why.c_str());
  std::fflush(stdout);
  std::exit(77);
}

std::vector<std::string> node_args(int node, const std::string& nproc, const std::vector<std::string>& program,
                                   const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv{kRun,       "--nnodes",    "2", "--node-rank", std::to_string(node), "--master-addr",
                                NamespacePair::address(0), "--nproc-per-node", nproc, "--timeout", "60"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--");
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

}  // namespace

TEST_CASE("two nodes in two network namespaces run the all-reduce check together", "[launcher][netns]") {
  NamespacePair hosts(skip);
  Job node0(hosts.in(0, node_args(0, "2", {kWorker, "check"})), {}, kLauncherVariables);
  Job node1(hosts.in(1, node_args(1, "2", {kWorker, "check"})), {}, kLauncherVariables);
  const JobResult r0 = node0.wait(170s);
  const JobResult r1 = node1.wait(30s);
  INFO("node 0:\n" << r0.output << "\nnode 1:\n" << r1.output);
  CHECK(r0.ok());
  CHECK(r1.ok());
  // Several nodes and no --master-port: node 0's store is at 29500.
  CHECK(contains(r1.output, "store 10.233.0.1:29500"));
  CHECK(contains(r0.output, "[0] rank 0 of 4: ok"));
  CHECK(contains(r0.output, "[1] rank 1 of 4: ok"));
  CHECK(contains(r1.output, "[2] rank 2 of 4: ok"));
  CHECK(contains(r1.output, "[3] rank 3 of 4: ok"));
}

TEST_CASE("two nodes run staged device collectives, hierarchically, on emulated devices", "[launcher][netns]") {
  NamespacePair hosts(skip);
  Job node0(hosts.in(0, node_args(0, "2", {kWorker, "staged"})), {}, kLauncherVariables);
  Job node1(hosts.in(1, node_args(1, "2", {kWorker, "staged"})), {}, kLauncherVariables);
  const JobResult r0 = node0.wait(170s);
  const JobResult r1 = node1.wait(30s);
  INFO("node 0:\n" << r0.output << "\nnode 1:\n" << r1.output);
  CHECK(r0.ok());
  CHECK(r1.ok());
  for (int r = 0; r < 4; ++r)
    CHECK(contains(r < 2 ? r0.output : r1.output,
                   "rank " + std::to_string(r) + " of 4 staged on emulated device (host memory): ok"));
}

TEST_CASE("nodes that disagree on --nproc-per-node stop before any worker starts", "[launcher][netns]") {
  NamespacePair hosts(skip);
  TempDir dir;
  Job node0(hosts.in(0, node_args(0, "2", {kLaunchee, "env", dir.path()})), {}, kLauncherVariables);
  Job node1(hosts.in(1, node_args(1, "1", {kLaunchee, "env", dir.path()})), {}, kLauncherVariables);
  const JobResult r0 = node0.wait(90s);
  const JobResult r1 = node1.wait(30s);
  INFO("node 0:\n" << r0.output << "\nnode 1:\n" << r1.output);
  CHECK(r0.exit_code == 1);
  CHECK(r1.exit_code == 1);
  const std::string problem = "node 1 has --nproc-per-node 1 but node 0 has --nproc-per-node 2";
  CHECK(contains(r0.output, "kizuna-run[node 0]: nodes disagree: " + problem));
  CHECK(contains(r1.output, "kizuna-run[node 1]: nodes disagree: node 0 has --nproc-per-node 2 but node 1 has "
                            "--nproc-per-node 1"));
  CHECK(read_pid_files(dir.path()).empty());  // no worker ever started
}

TEST_CASE("a worker failing on one node: both nodes restart and re-rendezvous", "[launcher][netns]") {
  NamespacePair hosts(skip);
  TempDir dir;
  // Rank 3 (on node 1) fails on its first start; node 0 learns it through the store.
  const std::vector<std::string> program{kLaunchee, "fail-once", dir.path(), "3", "7"};
  Job node0(hosts.in(0, node_args(0, "2", program, {"--max-restarts", "1"})), {}, kLauncherVariables);
  Job node1(hosts.in(1, node_args(1, "2", program, {"--max-restarts", "1"})), {}, kLauncherVariables);
  const JobResult r0 = node0.wait(120s);
  const JobResult r1 = node1.wait(30s);
  INFO("node 0:\n" << r0.output << "\nnode 1:\n" << r1.output);
  CHECK(r0.ok());
  CHECK(r1.ok());
  CHECK(contains(r1.output, "exited with code 7"));
  CHECK(contains(r0.output, "another node failed: rank 3 on node 1 exited with code 7"));
  for (int rank = 0; rank < 4; ++rank) {
    const JobResult& r = rank < 2 ? r0 : r1;
    CHECK(contains(r.output, "[" + std::to_string(rank) + "] rank " + std::to_string(rank) + " of 4: all_reduce ok"));
  }
}
