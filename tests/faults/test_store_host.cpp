// The store's host killed during rendezvous. The job is one rank short, so
// every rank that came sits in rendezvous, connected to the store and
// waiting for the missing one; then the process hosting the store is
// SIGKILLed. Every client must raise an error long before its deadline
// (KIZUNA_STORE_TIMEOUT, set to 30 s) whose message names the store's
// address, and exit.
//
// Two hosts of the store: rank 0 (MASTER_ADDR/MASTER_PORT: the ranks wait in
// the store's join) and a standalone `kizuna-store serve` (KIZUNA_STORE: the
// ranks wait for each other's addresses). Trials run at once, seeded.
#include <catch2/catch.hpp>

#include <signal.h>

#include "faults.hpp"

using namespace kizuna::test;
using namespace kizuna::test::faults;

namespace {

constexpr int kStoreTimeoutS = 30;
constexpr double kLimitMs = 5000;  // well before the deadline

struct Trial {
  bool standalone = false;  // kizuna-store serve, else rank 0
  int started = 0;          // ranks started (the world has one more)
};

TrialResult run_trial(const Trial& t, unsigned seed) {
  TrialResult res;
  std::mt19937 rng(seed);
  const int world = t.started + 1;
  const int port = store_port(rng);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  std::unique_ptr<Job> server;
  if (t.standalone) {
    // Under timeout(1) where there is one, so that a server whose test was
    // killed does not linger; the kill below takes the whole process group.
    std::vector<std::string> argv{kStoreTool, "serve", "--host", "127.0.0.1", "--port", std::to_string(port)};
    if (const std::string timeout = find_tool("timeout"); !timeout.empty()) argv.insert(argv.begin(), {timeout, "120"});
    server = std::make_unique<Job>(argv, Job::Env{}, kLaunchVariables);
    if (!wait_for([&] { return count_sockets(port, 0x0A) > 0; }, 20s)) {
      res.problems.push_back("kizuna-store serve did not listen on " + address + ":\n" + server->output());
      return res;
    }
  }
  Ranks ranks;
  for (int r = 0; r < t.started; ++r) {
    // Standalone: the ranks are 1..started (rank 0 never comes), all clients.
    const int rank = t.standalone ? r + 1 : r;
    Job::Env env = rank_env(rank, world, "127.0.0.1", port);
    if (t.standalone) {
      env.erase("MASTER_ADDR");
      env.erase("MASTER_PORT");
      env["KIZUNA_STORE"] = address;
    }
    env["KIZUNA_STORE_TIMEOUT"] = std::to_string(kStoreTimeoutS);
    ranks.start({kWorker, "all_reduce", "16", "1", "5"}, env);
  }
  // Every rank is connected to the store (one established connection each
  // on the server's side): rendezvous is under way, and cannot finish.
  if (!wait_for([&] { return count_sockets(port, 0x01) >= t.started; }, 20s)) {
    res.problems.push_back("the ranks did not all connect to the store at " + address);
    ranks.wait(ranks.all(), Clock::now());
    res.log = ranks.describe();
    return res;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 300));
  const auto killed_at = Clock::now();
  std::vector<int> clients;
  if (t.standalone) {
    ::kill(-server->pid(), SIGKILL);
    clients = ranks.all();
  } else {
    ranks[0].signal(SIGKILL);
    for (int r = 1; r < t.started; ++r) clients.push_back(r);
  }
  const auto results = ranks.wait(ranks.all(), killed_at + std::chrono::seconds(kStoreTimeoutS - 5));
  if (server) server->wait(10s);
  for (int r : clients) {
    // The clients are the trial's survivors.
    const int shown = t.standalone ? r + 1 : r;
    const std::optional<WorkerState> state = survivor_error(
        res, shown, results[r], killed_at,
        " (still running " + std::to_string(kStoreTimeoutS - 5) + " s after the kill)");
    if (!state) continue;
    const WorkerState& s = *state;
    const std::string who = "rank " + std::to_string(shown) + ": ";
    const double ms = res.detect_ms.back();
    const std::size_t before = res.problems.size();
    if (!contains(s.message, "store at " + address))
      res.problems.push_back(who + "the error does not name the store at " + address);
    if (ms > kLimitMs) res.problems.push_back(who + "raised it " + std::to_string(ms) + " ms after the kill");
    res.correct += res.problems.size() == before;
  }
  if (count_sockets(port, 0x0A) != 0) res.problems.push_back("the store port is still listening");
  if (!res.problems.empty()) res.log = ranks.describe();
  return res;
}

}  // namespace

TEST_CASE("the store's host killed during rendezvous: every client errors naming the store", "[faults][store]") {
  const std::vector<Trial> trials = {{false, 2}, {false, 3}, {false, 4}, {true, 1}, {true, 2}, {true, 3}};
  std::vector<TrialResult> results(trials.size());
  const unsigned seed = base_seed() ^ 0x570eu;
  parallel_for(static_cast<int>(trials.size()), 3,
               [&](int i) { results[i] = run_trial(trials[i], seed + static_cast<unsigned>(i)); });
  Figures f;
  f.fault = "store host SIGKILLed in rendezvous";
  f.trials = static_cast<int>(trials.size());
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const TrialResult& r = results[i];
    f.add(r);
    if (r.problems.empty()) continue;
    FAIL_CHECK(r.failure(std::string(trials[i].standalone ? "kizuna-store serve" : "rank 0") + " killed, " +
                         std::to_string(trials[i].started) + " ranks waiting:"));
  }
  f.note = "error naming the store address, store timeout 30 s; rank 0 and kizuna-store serve as host";
  f.report();
  CHECK(f.hangs == 0);
  CHECK(f.correct == f.expected);
}
