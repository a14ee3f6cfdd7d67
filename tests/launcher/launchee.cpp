// kizuna-test-launchee <mode> <dir> [args]: a worker for the launcher tests,
// started by kizuna-run. Every mode first writes "<dir>/<RANK>.pid" (its pid,
// and the pid of any child it starts), so a test can find and kill workers
// and check afterwards that none survived.
//
//   env <dir>                 prints "ENV NAME=value" for its whole environment,
//                             then rendezvouses through Store::from_env() (a
//                             PrefixStore under KIZUNA_STORE_PREFIX) and prints
//                             "store ok"
//   exit <dir> <rank> <code>  rank <rank> waits until every local worker has
//                             written its pid file, then exits with <code>;
//                             the others sleep until stopped
//   sleep <dir>               starts a child that sleeps too, then sleeps until
//                             stopped
//   leave <dir>               starts a child in a session of its own that
//                             sleeps, then exits 0, leaving it running
//   stall <dir> <rank>        every rank all-reduces in a loop; rank <rank>
//                             stops itself (SIGSTOP) after 20 of them, so
//                             the others time out waiting for it
//   affinity <dir>            prints "CPUS 0,1" (the CPUs it may run on)
//   fail-once <dir> <rank> <code>
//                             rank <rank> exits with <code> the first time
//                             (marker file <dir>/failed-once); otherwise every
//                             rank creates a Communicator from the environment
//                             and checks an all-reduce
//
// "Sleeps until stopped" is bounded: after kSleepLimit it exits 4, which the
// tests count as a failure. Exit codes: 0 ok, 1 wrong result, 2 bad usage,
// 4 never stopped, 10 + ErrorCode for a kizuna::Error.
#include <kizuna/comm.hpp>
#include <kizuna/prefix_store.hpp>
#include <kizuna/store.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

using namespace kizuna;

namespace {

constexpr auto kSleepLimit = std::chrono::seconds(120);

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

int rank() { return std::atoi(env_or("RANK", "-1").c_str()); }

void write_pid_file(const std::string& dir, const std::vector<pid_t>& pids) {
  const std::string path = dir + "/" + std::to_string(rank()) + ".pid";
  {
    std::ofstream out(path + ".tmp");
    for (pid_t p : pids) out << p << "\n";
  }
  std::rename((path + ".tmp").c_str(), path.c_str());  // whole, or not there
}

int count_pid_files(const std::string& dir) {
  int n = 0;
  const int world = std::atoi(env_or("WORLD_SIZE", "0").c_str());
  for (int r = 0; r < world; ++r) {
    struct stat st {};
    n += ::stat((dir + "/" + std::to_string(r) + ".pid").c_str(), &st) == 0;
  }
  return n;
}

int sleep_until_stopped() {
  std::this_thread::sleep_for(kSleepLimit);
  std::printf("rank %d was never stopped\n", rank());
  return 4;
}

int print_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  std::string list;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) list += (list.empty() ? "" : ",") + std::to_string(c);
  std::printf("CPUS %s\n", list.c_str());
  return 0;
}

int print_env() {
  std::vector<std::string> entries;
  for (char** e = environ; *e != nullptr; ++e) entries.emplace_back(*e);
  std::sort(entries.begin(), entries.end());
  for (const auto& e : entries)
    if (e.find('\n') == std::string::npos) std::printf("ENV %s\n", e.c_str());
  std::fflush(stdout);

  auto store = Store::from_env();
  const auto* prefixed = dynamic_cast<const PrefixStore*>(store.get());
  if (prefixed == nullptr || prefixed->prefix() != env_or("KIZUNA_STORE_PREFIX", "")) {
    std::printf("store is not a PrefixStore under KIZUNA_STORE_PREFIX\n");
    return 1;
  }
  store->set("hello/" + std::to_string(rank()), std::string_view("1"));
  std::vector<std::string> keys;
  const int world = std::atoi(env_or("WORLD_SIZE", "0").c_str());
  for (int r = 0; r < world; ++r) keys.push_back("hello/" + std::to_string(r));
  store->wait(keys);
  std::printf("store ok\n");
  return 0;
}

int exit_with(const std::string& dir, int who, int code) {
  if (rank() != who) {
    std::printf("rank %d waiting\n", rank());
    std::fflush(stdout);
    return sleep_until_stopped();
  }
  const int local_world = std::atoi(env_or("LOCAL_WORLD_SIZE", "1").c_str());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (count_pid_files(dir) < local_world && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::printf("rank %d exiting with code %d\n", rank(), code);
  return code;
}

int sleep_with_child(const std::string& dir) {
  const pid_t child = ::fork();
  if (child == 0) {
    std::this_thread::sleep_for(kSleepLimit);
    ::_exit(4);
  }
  write_pid_file(dir, {::getpid(), child});
  std::printf("rank %d sleeping, child %d\n", rank(), static_cast<int>(child));
  std::fflush(stdout);
  return sleep_until_stopped();
}

int leave_child(const std::string& dir) {
  const pid_t child = ::fork();
  if (child == 0) {
    ::setsid();  // out of the worker's process group
    std::this_thread::sleep_for(kSleepLimit);
    ::_exit(4);
  }
  write_pid_file(dir, {::getpid(), child});
  std::printf("rank %d leaving child %d behind\n", rank(), static_cast<int>(child));
  return 0;
}

int fail_once(const std::string& dir, int who, int code) {
  const std::string marker = dir + "/failed-once";
  struct stat st {};
  if (rank() == who && ::stat(marker.c_str(), &st) != 0) {
    std::ofstream(marker) << "1\n";
    std::printf("rank %d failing on its first start\n", rank());
    return code;
  }
  auto comm = Communicator::from_env();
  std::int64_t value = comm->rank();
  comm->all_reduce(&value, 1, DataType::Int64, ReduceOp::Sum).wait();
  const std::int64_t n = comm->size();
  const bool ok = value == n * (n - 1) / 2;
  std::printf("rank %d of %d: all_reduce %s (%s)\n", comm->rank(), comm->size(), ok ? "ok" : "WRONG",
              env_or("KIZUNA_STORE_PREFIX", "").c_str());
  return ok ? 0 : 1;
}

int stall(int who) {
  auto comm = Communicator::from_env();
  std::vector<std::int64_t> data(1 << 16, 1);
  for (int i = 0;; ++i) {
    if (i == 20 && comm->rank() == who) {
      std::printf("rank %d stopping itself\n", comm->rank());
      std::fflush(stdout);
      ::raise(SIGSTOP);
    }
    comm->all_reduce(data.data(), data.size(), DataType::Int64, ReduceOp::Max).wait();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: kizuna-test-launchee env|affinity|exit|sleep|leave|stall|fail-once <dir> [args]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const std::string dir = argv[2];
  try {
    if (mode != "sleep" && mode != "leave") write_pid_file(dir, {::getpid()});
    if (mode == "env") return print_env();
    if (mode == "affinity") return print_affinity();
    if (mode == "exit" && argc == 5) return exit_with(dir, std::atoi(argv[3]), std::atoi(argv[4]));
    if (mode == "sleep") return sleep_with_child(dir);
    if (mode == "leave") return leave_child(dir);
    if (mode == "stall" && argc == 4) return stall(std::atoi(argv[3]));
    if (mode == "fail-once" && argc == 5) return fail_once(dir, std::atoi(argv[3]), std::atoi(argv[4]));
    std::fprintf(stderr, "unknown mode or wrong arguments: %s\n", mode.c_str());
    return 2;
  } catch (const Error& e) {
    std::printf("error %s: %s\n", std::string(name(e.code())).c_str(), e.what());
    return 10 + static_cast<int>(e.code());
  }
}
