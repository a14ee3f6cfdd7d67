// tests/faults/faults.hpp: what the fault-injection tests share.
//
// - Ranks: a job's ranks as kizuna-fault-worker processes (each a Job: its
//   own process group, killed at the deadline and on destruction, so no
//   child outlives its test), with the output lines the worker prints
//   parsed (ready, done, error CODE at NS, wrong; lost, shrunk, grew,
//   joined, resumed).
// - Figures: the per-fault counts a test prints (trials, errors raised
//   correctly, hangs, detection time p50/p99/max), one "FAULTS |" line each,
//   also appended to $KZ_FAULTS_REPORT when set (tests/faults/report.sh
//   collects them into the table of docs/reliability.md). The tests' own
//   variables say KZ_, not KIZUNA_: kizuna warns about KIZUNA_* names it
//   does not know, and other tests read that output.
// - Ports and leftovers: a store port outside the ephemeral range (so no
//   rank's listener can take it first), /proc/net/tcp queries, and the job's
//   shared-memory segments in /dev/shm.
//
// Times come from steady_clock (CLOCK_MONOTONIC), which the worker also
// stamps its error with: one clock for every process of the machine, in
// every network namespace.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "job.hpp"

namespace kizuna::test::faults {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline const std::string kWorker = std::string(KIZUNA_BINARY_DIR) + "/tests/faults/kizuna-fault-worker";
inline const std::string kProxy = std::string(KIZUNA_BINARY_DIR) + "/tests/faults/kizuna-fault-proxy";
inline const std::string kStoreTool = std::string(KIZUNA_BINARY_DIR) + "/bin/kizuna-store";

// Variables a test sets itself (or that only the test reads): never
// inherited by the processes it starts.
inline const std::vector<std::string> kLaunchVariables = {
    "RANK",        "LOCAL_RANK",  "WORLD_SIZE",   "LOCAL_WORLD_SIZE",    "NODE_RANK",           "GROUP_RANK",
    "MASTER_ADDR", "MASTER_PORT", "KIZUNA_STORE", "KIZUNA_STORE_PREFIX", "KIZUNA_SOCKET_IFNAME", "KIZUNA_ALGO",
    "KIZUNA_TRANSPORT", "KIZUNA_TIMEOUT", "KIZUNA_STORE_TIMEOUT", "KIZUNA_CHECK", "KIZUNA_STORE_TOKEN",
    "KZ_FAULTS_REPORT", "KZ_FAULTS_SEED", "KZ_FAULTS_REPEAT"};

inline long long now_ns(Clock::time_point t = Clock::now()) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

[[noreturn]] inline void skip(const std::string& why) {
  std::printf("SKIP: %s\n", why.c_str());
  std::fflush(stdout);
  std::_Exit(77);  // CTest SKIP_RETURN_CODE; no destructors (the namespaces' own are not run)
}

// What a worker said, from its output.
struct WorkerState {
  bool ready = false;
  bool done = false;
  long long done_ms = -1;
  bool errored = false;
  std::string code;      // "PeerLost", "Timeout", ...
  long long at_ns = 0;   // when it caught the error
  std::string message;   // the error's text
  bool wrong = false;
  // With the worker's "shrink": each failure it survived (code and
  // message of its "lost" line), when its last shrink ended and when its
  // first iteration after that was right.
  std::vector<std::string> lost_codes, lost_messages;
  int shrinks = 0;
  long long shrunk_ns = 0, resumed_ns = 0;
  int last_world = 0;  // the size of the group it last shrank or grew to
  // With "elastic" or "join": how often it grew, and when it joined.
  int grows = 0;
  long long joined_ns = 0;
};

inline WorkerState parse(const std::string& output) {
  WorkerState s;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("ready rank ", 0) == 0) s.ready = true;
    if (line.rfind("wrong ", 0) == 0) s.wrong = true;
    if (line.rfind("done ", 0) == 0) {
      s.done = true;
      const auto in = line.find(" in ");
      if (in != std::string::npos) s.done_ms = std::atoll(line.c_str() + in + 4);
    }
    if (line.rfind("lost ", 0) == 0) {
      std::istringstream words(line.substr(5));
      std::string code;
      words >> code;
      s.lost_codes.push_back(code);
      const auto colon = line.find(": ");
      s.lost_messages.push_back(colon == std::string::npos ? line : line.substr(colon + 2));
    }
    if (line.rfind("shrunk at ", 0) == 0) {
      ++s.shrinks;
      s.shrunk_ns = std::atoll(line.c_str() + 10);
      const auto of = line.rfind(" of ");
      if (of != std::string::npos) s.last_world = std::atoi(line.c_str() + of + 4);
    }
    if (line.rfind("resumed at ", 0) == 0) s.resumed_ns = std::atoll(line.c_str() + 11);
    if (line.rfind("grew at ", 0) == 0 || line.rfind("joined at ", 0) == 0) {
      if (line[0] == 'g') ++s.grows;
      else s.joined_ns = std::atoll(line.c_str() + 10);
      const auto of = line.rfind(" of ");
      if (of != std::string::npos) s.last_world = std::atoi(line.c_str() + of + 4);
    }
    if (line.rfind("error ", 0) == 0) {
      s.errored = true;
      std::istringstream words(line.substr(6));
      std::string at;
      words >> s.code >> at >> s.at_ns;
      const auto colon = line.find(": ");
      s.message = colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return s;
}

// The ranks of one job, each a worker process (or anything else in argv).
class Ranks {
 public:
  // Starts rank r of argvs.size() with env[r] (plus every KIZUNA_* of the
  // caller not in kLaunchVariables).
  void start(const std::vector<std::string>& argv, const Job::Env& env) {
    jobs_.push_back(std::make_unique<Job>(argv, env, kLaunchVariables));
  }

  int size() const { return static_cast<int>(jobs_.size()); }
  Job& operator[](int r) { return *jobs_[r]; }
  WorkerState state(int r) const { return parse(jobs_[r]->output()); }

  // Whether every rank printed "ready" by the deadline (false at once when
  // one of them has already exited).
  bool wait_ready(std::chrono::milliseconds timeout, std::string& why) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      bool all = true;
      for (int r = 0; r < size(); ++r) {
        if (state(r).ready) continue;
        all = false;
        if (exited(r)) {
          why = "rank " + std::to_string(r) + " exited before it was ready:\n" + jobs_[r]->output();
          return false;
        }
      }
      if (all) return true;
      if (Clock::now() >= deadline) {
        why = "not every rank was ready within " + std::to_string(timeout.count()) + " ms";
        return false;
      }
      std::this_thread::sleep_for(10ms);
    }
  }

  // Whether rank r has exited (it stays a zombie until wait()).
  bool exited(int r) const {
    siginfo_t info{};
    ::waitid(P_PID, static_cast<id_t>(jobs_[r]->pid()), &info, WEXITED | WNOHANG | WNOWAIT);
    return info.si_pid != 0;
  }

  // Reaps the ranks in `which` by one shared deadline; the ones still
  // running then are SIGKILLed and marked hung.
  std::vector<JobResult> wait(const std::vector<int>& which, Clock::time_point deadline) {
    std::vector<JobResult> out(jobs_.size());
    for (int r : which) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      out[r] = jobs_[r]->wait(std::max(left, std::chrono::milliseconds(0)));
    }
    return out;
  }

  std::vector<int> all() const {
    std::vector<int> v(jobs_.size());
    for (int r = 0; r < size(); ++r) v[r] = r;
    return v;
  }

  std::vector<pid_t> pids() const {
    std::vector<pid_t> v;
    for (const auto& j : jobs_) v.push_back(j->pid());
    return v;
  }

  std::string describe() const {
    std::string out;
    for (int r = 0; r < size(); ++r) out += "--- rank " + std::to_string(r) + ":\n" + jobs_[r]->output();
    return out;
  }

 private:
  std::vector<std::unique_ptr<Job>> jobs_;
};

// The environment of rank r of n, all on one host (local rank = rank) or
// `per_node` ranks to a node.
inline Job::Env rank_env(int r, int n, const std::string& addr, int port, int per_node = 0) {
  if (per_node <= 0) per_node = n;
  return {{"RANK", std::to_string(r)},
          {"WORLD_SIZE", std::to_string(n)},
          {"LOCAL_RANK", std::to_string(r % per_node)},
          {"LOCAL_WORLD_SIZE", std::to_string(per_node)},
          {"NODE_RANK", std::to_string(r / per_node)},
          {"MASTER_ADDR", addr},
          {"MASTER_PORT", std::to_string(port)}};
}

// --- figures ---------------------------------------------------------------

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t i = static_cast<std::size_t>(std::ceil(p / 100.0 * v.size()));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

// What one trial found: its problems (empty: all well), the survivors
// checked, how many were right, how many hung, when each detected the fault.
struct TrialResult {
  std::vector<std::string> problems;
  int survivors = 0;
  int correct = 0;
  int hangs = 0;
  std::vector<double> detect_ms;
  std::string log;

  // `header` ("rank 2 stopped, over tcp:"), then one problem per line, then
  // the log: the text a failed trial is reported with.
  std::string failure(const std::string& header) const {
    std::ostringstream what;
    what << header << "\n";
    for (const auto& p : problems) what << "  " << p << "\n";
    what << log;
    return what.str();
  }
};

struct Figures {
  std::string fault;
  int trials = 0;
  int correct = 0;  // survivors (or runs) whose error, or result, was right
  int expected = 0; // how many were checked
  int hangs = 0;
  std::vector<double> detect_ms;
  std::string note;

  // Counts one trial's survivors into the figures.
  void add(const TrialResult& r) {
    expected += r.survivors;
    correct += r.correct;
    hangs += r.hangs;
    detect_ms.insert(detect_ms.end(), r.detect_ms.begin(), r.detect_ms.end());
  }

  std::string line() const {
    char buf[512];
    auto ms = [](double v) {
      return std::isnan(v) ? std::string("-") : std::to_string(static_cast<long long>(std::lround(v)));
    };
    const double max = detect_ms.empty() ? NAN : *std::max_element(detect_ms.begin(), detect_ms.end());
    std::snprintf(buf, sizeof buf, "FAULTS | %s | %d | %d/%d | %d | %s | %s | %s | %s |", fault.c_str(), trials,
                  correct, expected, hangs, ms(percentile(detect_ms, 50)).c_str(),
                  ms(percentile(detect_ms, 99)).c_str(), ms(max).c_str(), note.c_str());
    return buf;
  }

  // Prints the line, and appends it to $KZ_FAULTS_REPORT.
  void report() const {
    const std::string l = line();
    std::printf("%s\n", l.c_str());
    std::fflush(stdout);
    if (const char* path = std::getenv("KZ_FAULTS_REPORT"); path != nullptr && *path != '\0') {
      std::ofstream out(path, std::ios::app);
      out << l << "\n";
    }
  }
};

// --- ports and leftovers ---------------------------------------------------

// Sockets of /proc/net/tcp and tcp6 (this network namespace) with local port
// `port` in state `state` (0x0A listen, 0x01 established).
inline int count_sockets(int port, int state) {
  int n = 0;
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string sl, local, remote, st;
      words >> sl >> local >> remote >> st;
      const auto colon = local.rfind(':');
      if (colon == std::string::npos) continue;
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port && std::stoi(st, nullptr, 16) == state) ++n;
    }
  }
  return n;
}

// Whether a server could bind `port` on 127.0.0.1 now (as TcpStoreServer does, SO_REUSEADDR).
inline bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 1) == 0;
  ::close(fd);
  return ok;
}

// A store port below the ephemeral range (no rank's listener or outgoing
// connection is handed it meanwhile), free now and not given to another
// job of this process that may still run. Rank 0 binds it right after.
inline int store_port(std::mt19937& rng) {
  static std::mutex mutex;
  static std::set<int> given;
  std::lock_guard lock(mutex);
  int low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
  const int top = std::max(low, 20000) - 1, bottom = std::max(10000, top - 12000);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int p = std::uniform_int_distribution<int>(bottom, top)(rng);
    if (p >= 29400 && p <= 29600) continue;  // kizuna-run's and torchrun's default 29500
    // Test processes that ctest runs side by side draw from one range, each
    // with its own `given`: a port one of them just freed (a killed store)
    // could be the next another takes, and look still held. Each process
    // keeps to the ports congruent to its pid modulo 7.
    if (p % 7 != ::getpid() % 7) continue;
    if (given.count(p) || !bindable(p) || count_sockets(p, 0x0A) + count_sockets(p, 0x01) > 0) continue;
    given.insert(p);
    return p;
  }
  return 0;
}

// /dev/shm entries a job of these processes left (segments are named
// kizuna-<pid>-<communicator>-<rank>).
inline std::vector<std::string> shm_leftovers(const std::vector<pid_t>& pids) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    for (pid_t p : pids)
      if (name.rfind("kizuna-" + std::to_string(p) + "-", 0) == 0) out.push_back(name);
  }
  return out;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Milliseconds from `from` (steady_clock) to a worker's error stamp.
inline double ms_since(Clock::time_point from, long long at_ns) {
  return static_cast<double>(at_ns - now_ns(from)) / 1e6;
}

// --- one trial's survivors -------------------------------------------------

// Waits up to `timeout` for every rank to say it is ready. If they do not,
// records why in `res` (with every rank's output), reaps them, and returns
// false: the trial has nothing more to check.
inline bool all_ready(Ranks& ranks, TrialResult& res, std::chrono::milliseconds timeout = 20s) {
  std::string why;
  if (ranks.wait_ready(timeout, why)) return true;
  res.problems.push_back("set-up: " + why);
  ranks.wait(ranks.all(), Clock::now());
  res.log = ranks.describe();
  return false;
}

// The part of judging a survivor that every fault shares: counts it; a
// survivor that hung (`hung_note` says for how long) or raised no error is a
// problem, and then there is nothing more to check (nullopt). Otherwise
// records how long after `fault_at` it raised its error, and returns its
// state for the fault's own checks.
inline std::optional<WorkerState> survivor_error(TrialResult& res, int rank, const JobResult& jr,
                                                 Clock::time_point fault_at, const std::string& hung_note) {
  ++res.survivors;
  const std::string who = "rank " + std::to_string(rank) + ": ";
  if (jr.hung) {
    ++res.hangs;
    res.problems.push_back(who + "hung" + hung_note);
    return std::nullopt;
  }
  const WorkerState s = parse(jr.output);
  if (!s.errored) {
    res.problems.push_back(who + "raised no error (exit " + std::to_string(jr.exit_code) + ")");
    return std::nullopt;
  }
  res.detect_ms.push_back(ms_since(fault_at, s.at_ns));
  return s;
}


// Seed of the randomised tests: KZ_FAULTS_SEED, else a fixed one (runs repeat).
inline unsigned base_seed() {
  const char* s = std::getenv("KZ_FAULTS_SEED");
  return s != nullptr && *s != '\0' ? static_cast<unsigned>(std::strtoul(s, nullptr, 0)) : 20261129u;
}

// Runs fn(i) for i in [0, n) on `threads` threads; fn must not use Catch
// assertions (they are not thread-safe): it records, the caller asserts.
template <typename Fn>
void parallel_for(int n, int threads, Fn&& fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t)
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) fn(i);
    });
  for (auto& t : pool) t.join();
}

}  // namespace kizuna::test::faults
