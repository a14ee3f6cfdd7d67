// Start-up mistakes, each as a new user makes it with RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT set by hand: every process of the job must
// fail within 5 s (a rank that never comes: within the store timeout), with
// an error that names the cause. The ranks are kizuna-fault-worker
// processes; each case prints a "FAULTS |" line for docs/reliability.md.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "faults.hpp"
#include "name_lookup.hpp"

using namespace kizuna::test;
using namespace kizuna::test::faults;

namespace {

constexpr int kStoreTimeoutS = 20;  // the never-coming rank's case sets its own
constexpr double kLimitMs = 5000;


// Runs the job `ranks` (each its environment), waits for every process to
// exit, and checks that each failed within `limit_ms` of the start with an
// error containing `expect`. Reports the case's figures.
void expect_all_fail(const std::string& fault, const std::vector<Job::Env>& ranks, const std::string& expect,
                     double limit_ms = kLimitMs) {
  Ranks job;
  const auto start = Clock::now();
  for (const Job::Env& env : ranks) {
    Job::Env e = env;
    if (!e.count("KIZUNA_STORE_TIMEOUT")) e["KIZUNA_STORE_TIMEOUT"] = std::to_string(kStoreTimeoutS);
    e["KIZUNA_TIMEOUT"] = "30";
    job.start({kWorker, "all_reduce", "16", "1", "5"}, e);
  }
  const auto results = job.wait(job.all(), start + std::chrono::milliseconds(static_cast<long long>(limit_ms) + 20000));
  Figures figures;
  figures.fault = fault;
  figures.trials = 1;
  TrialResult trial;
  for (int r = 0; r < job.size(); ++r) {
    ++trial.survivors;
    const WorkerState s = job.state(r);
    const std::string who = "process " + std::to_string(r) + ": ";
    if (results[r].hung) {
      ++trial.hangs;
      trial.problems.push_back(who + "still running " + std::to_string(static_cast<long long>(limit_ms) + 20000) +
                               " ms after the start");
      continue;
    }
    if (!s.errored) {
      trial.problems.push_back(who + "did not fail with an error (exit " + std::to_string(results[r].exit_code) + ")");
      continue;
    }
    const double ms = (s.at_ns - now_ns(start)) / 1e6;
    trial.detect_ms.push_back(ms);
    const std::size_t before = trial.problems.size();
    if (s.message.find(expect) == std::string::npos)
      trial.problems.push_back(who + "its error does not say '" + expect + "': " + s.message);
    if (ms > limit_ms) trial.problems.push_back(who + "failed " + std::to_string(ms) + " ms after the start");
    trial.correct += trial.problems.size() == before;
  }
  if (!trial.problems.empty()) trial.log = job.describe();
  figures.add(trial);
  figures.report();
  INFO(trial.failure(fault + ":"));
  CHECK(trial.problems.empty());
}

Job::Env with(Job::Env env, const std::string& key, const std::string& value) {
  env[key] = value;
  return env;
}

// A listener on 127.0.0.1:port that is not kizuna: it answers every
// connection with an SSH banner (or, `silent`, with nothing) and keeps it
// open.
class ForeignListener {
 public:
  explicit ForeignListener(int port, bool silent = false) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 16) == 0;
    thread_ = std::thread([this, silent] {
      while (!stop_) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) break;
        const char banner[] = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n";
        if (!silent) (void)!::write(c, banner, sizeof banner - 1);
        open_.push_back(c);
      }
    });
  }
  ~ForeignListener() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    for (int c : open_) ::close(c);
  }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::atomic<bool> stop_{false};
  std::vector<int> open_;
  std::thread thread_;
};

std::mt19937& rng() {
  static std::mt19937 r(std::random_device{}());
  return r;
}

}  // namespace

TEST_CASE("rendezvous: two processes given the same RANK both fail, and so does every other, naming both",
          "[faults][rendezvous]") {
  const int port = store_port(rng());
  expect_all_fail("two processes with RANK=1 (world 3)",
                  {rank_env(0, 3, "127.0.0.1", port), rank_env(1, 3, "127.0.0.1", port),
                   rank_env(1, 3, "127.0.0.1", port)},
                  "rank 1 of kizuna/comm0 is claimed by two processes");
}

TEST_CASE("rendezvous: a rank with a higher WORLD_SIZE is refused, and every rank fails naming both sizes",
          "[faults][rendezvous]") {
  const int port = store_port(rng());
  expect_all_fail("WORLD_SIZE 3 on one rank of 2",
                  {rank_env(0, 2, "127.0.0.1", port), rank_env(1, 3, "127.0.0.1", port)},
                  "says world size 3, this store expects 2");
}

TEST_CASE("rendezvous: a rank with a lower WORLD_SIZE is refused, and every rank fails naming both sizes",
          "[faults][rendezvous]") {
  const int port = store_port(rng());
  expect_all_fail("WORLD_SIZE 2 on one rank of 3",
                  {rank_env(0, 3, "127.0.0.1", port), rank_env(1, 2, "127.0.0.1", port),
                   rank_env(2, 3, "127.0.0.1", port)},
                  "says world size 2, this store expects 3");
}

TEST_CASE("rendezvous: a MASTER_ADDR that does not resolve fails at once, naming it", "[faults][rendezvous]") {
  if (!resolver_denies("no-such-host.invalid")) skip("this machine's resolver does not deny unknown names at once");
  const int port = store_port(rng());
  expect_all_fail("MASTER_ADDR does not resolve", {rank_env(1, 2, "no-such-host.invalid", port)},
                  "cannot resolve store host 'no-such-host.invalid'");
}

TEST_CASE("rendezvous: something that is not kizuna on MASTER_PORT is named at once", "[faults][rendezvous]") {
  const int port = store_port(rng());
  ForeignListener foreign(port);
  REQUIRE(foreign.ok());
  expect_all_fail("a foreign listener on MASTER_PORT", {rank_env(1, 2, "127.0.0.1", port)}, "is it a kizuna store?");
}

TEST_CASE("rendezvous: a listener on MASTER_PORT that never greets is named within its patience (5 s)",
          "[faults][rendezvous]") {
  const int port = store_port(rng());
  ForeignListener foreign(port, true);
  REQUIRE(foreign.ok());
  expect_all_fail("a silent listener on MASTER_PORT", {rank_env(1, 2, "127.0.0.1", port)},
                  "accepted the connection but sent no greeting", 5000 + kLimitMs);
}

TEST_CASE("rendezvous: KIZUNA_PORT_RANGE with every port taken fails every rank, naming the range",
          "[faults][rendezvous]") {
  const int port = store_port(rng());
  const int taken = store_port(rng());
  ForeignListener holder(taken);
  REQUIRE(holder.ok());
  const std::string range = std::to_string(taken) + "-" + std::to_string(taken);
  expect_all_fail("KIZUNA_PORT_RANGE exhausted",
                  {with(rank_env(0, 2, "127.0.0.1", port), "KIZUNA_PORT_RANGE", range),
                   with(rank_env(1, 2, "127.0.0.1", port), "KIZUNA_PORT_RANGE", range)},
                  "every port of KIZUNA_PORT_RANGE=" + range + " is taken");
}

TEST_CASE("rendezvous: a rank that never comes: the others fail at the store timeout, saying how many joined",
          "[faults][rendezvous]") {
  const int port = store_port(rng());
  expect_all_fail("a rank never starts (store timeout 3 s)",
                  {with(rank_env(0, 2, "127.0.0.1", port), "KIZUNA_STORE_TIMEOUT", "3")}, "(1 of 2 clients joined)",
                  3000 + kLimitMs);
}

TEST_CASE("rendezvous: with KIZUNA_PORT_RANGE the ranks listen inside the range, and the job runs",
          "[faults][rendezvous]") {
  const int port = store_port(rng());
  // Ten ports below the ephemeral range that nothing holds now.
  const int low = store_port(rng());
  int free_run = 0;
  for (int p = low; p < low + 10; ++p) free_run += bindable(p) && count_sockets(p, 0x0A) == 0;
  REQUIRE(free_run == 10);
  const std::string range = std::to_string(low) + "-" + std::to_string(low + 9);
  Ranks job;
  for (int r = 0; r < 2; ++r)
    job.start({kWorker, "all_reduce", "16", "100000", "60"},  // about a second; both stop at one iteration
              with(with(rank_env(r, 2, "127.0.0.1", port), "KIZUNA_PORT_RANGE", range), "KIZUNA_STORE_TIMEOUT", "20"));
  std::string why;
  REQUIRE(job.wait_ready(20s, why));
  int listening = 0;
  for (int p = low; p <= low + 9; ++p) listening += count_sockets(p, 0x0A);
  const auto results = job.wait(job.all(), Clock::now() + 30s);
  INFO(job.describe());
  // Each rank's point-to-point listener stays for the communicator's life
  // (its links' listener closes once the links are up): at least 2.
  CHECK(listening >= 2);
  for (int r = 0; r < 2; ++r) CHECK(results[r].ok());
}
