// A rank that is stopped (SIGSTOP), not dead: its sockets stay open, so
// only the deadline can find it. With KIZUNA_TIMEOUT short, every other rank
// must raise Timeout within that deadline (plus the short grace the
// stuck-rank report may take) and the report must name the stopped rank:
// following "who waits for whom" through the store leads every survivor to
// it ("rank V has not reported: it is the one stuck"), and the rank that
// waits for it directly says so and prints where it is stuck.
//
// Moved here from tests/multiproc, and run over TCP and shared memory, with
// an ordinary rank stopped and with rank 0 (the store's host) stopped: then
// the report cannot be had, and each survivor must say so (naming the
// store) within the deadline plus the store client's reply allowance,
// rather than wait KIZUNA_STORE_TIMEOUT or blame a live rank. One more
// trial runs one-element all-reduces through the mailboxes, where every
// survivor waits for the stopped rank directly. All trials run at once
// (they mostly wait), each bounded by a deadline.
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>
#include <signal.h>

#include "faults.hpp"

using namespace kizuna::test;
using namespace kizuna::test::faults;

namespace {

constexpr int kWorld = 4;
constexpr int kTimeoutS = 2;       // KIZUNA_TIMEOUT
constexpr double kGraceMs = 1500;  // the report's store look-ups, and scheduling
// With rank 0 stopped the store stops too: the report's first store read
// waits its grace plus the store client's 5 s reply allowance, then gives up.
constexpr double kStoreGoneMs = 5000 + 200;

struct Trial {
  std::string transport;
  int victim = 0;
  // A one-element all-reduce left to the cost model (over shared memory:
  // the mailboxes, where every rank waits for every other), not the ring.
  bool mailbox = false;
};

TrialResult run_trial(const Trial& t, unsigned seed) {
  TrialResult res;
  std::mt19937 rng(seed);
  const int port = store_port(rng);
  Ranks ranks;
  for (int r = 0; r < kWorld; ++r) {
    Job::Env env = rank_env(r, kWorld, "127.0.0.1", port);
    env["KIZUNA_TRANSPORT"] = t.transport;
    env["KIZUNA_ALGO"] = t.mailbox ? "auto" : "ring";  // ring: rank r waits for rank r - 1, a known chain
    env["KIZUNA_TIMEOUT"] = std::to_string(kTimeoutS);
    env["KIZUNA_STORE_TIMEOUT"] = "30";
    // Small collectives: the others finish the one in flight at once, then
    // wait in the next for KIZUNA_TIMEOUT.
    ranks.start({kWorker, "all_reduce", t.mailbox ? "1" : "65536", "100000000", "25"}, env);
  }
  if (!all_ready(ranks, res)) return res;
  std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 300));
  const auto stopped_at = Clock::now();
  ranks[t.victim].signal(SIGSTOP);
  // The survivors must end on their own; the stopped one is killed after.
  std::vector<int> survivors;
  for (int r = 0; r < kWorld; ++r)
    if (r != t.victim) survivors.push_back(r);
  const auto deadline = stopped_at + std::chrono::seconds(kTimeoutS) + 20s;
  while (Clock::now() < deadline) {
    bool all = true;
    for (int r : survivors) all &= ranks.exited(r);
    if (all) break;
    std::this_thread::sleep_for(20ms);
  }
  const auto results = ranks.wait(survivors, Clock::now());  // past the deadline: hung
  ranks[t.victim].signal(SIGKILL);
  ranks.wait({t.victim}, Clock::now() + 10s);

  const std::string v = std::to_string(t.victim);
  const int direct = (t.victim + 1) % kWorld;  // in the ring it receives from the victim
  for (int r : survivors) {
    const JobResult& jr = results[r];
    const std::optional<WorkerState> state = survivor_error(res, r, jr, stopped_at, "");
    if (!state) continue;
    const WorkerState& s = *state;
    const std::string who = "rank " + std::to_string(r) + ": ";
    const double ms = res.detect_ms.back();
    const std::size_t before = res.problems.size();
    if (s.code != "Timeout") res.problems.push_back(who + "raised " + s.code + ", not Timeout");
    const bool store_stopped = t.victim == 0;  // rank 0 hosts the store
    if (ms > kTimeoutS * 1000 + kGraceMs + (store_stopped ? kStoreGoneMs : 0))
      res.problems.push_back(who + "raised it " + std::to_string(ms) + " ms after the stop");
    if (store_stopped) {
      // No report can be had from a stopped store; it must say so, naming
      // the store, and blame nobody.
      if (!contains(s.message, "no stuck-rank report, the store failed: ") ||
          !contains(s.message, "store at 127.0.0.1:" + std::to_string(port)) ||
          contains(s.message, "it is the one stuck"))
        res.problems.push_back(who + "does not say that the store failed");
    } else if (!contains(jr.output, "rank " + v + " has not reported: it is the one stuck")) {
      res.problems.push_back(who + "the report does not find rank " + v + " stuck");
    }
    if (r == direct || t.mailbox) {
      if (!contains(jr.output, "waiting for rank " + v))
        res.problems.push_back(who + "does not say it is waiting for rank " + v);
      if (!contains(jr.output, "recent calls, oldest first") || !contains(jr.output, "running, step"))
        res.problems.push_back(who + "does not print where it is stuck");
    }
    res.correct += res.problems.size() == before;
  }
  for (const auto& name : shm_leftovers(ranks.pids())) res.problems.push_back("/dev/shm/" + name + " left behind");
  if (!res.problems.empty()) res.log = ranks.describe();
  return res;
}

}  // namespace

TEST_CASE("a stopped rank: the others raise Timeout naming it in the stuck-rank report", "[faults][stop]") {
  const std::vector<Trial> trials = {{"tcp", 2}, {"shm", 2}, {"tcp", 0}, {"shm", 0},
                                     {"tcp", 1}, {"shm", 3}, {"shm", 1, true}};
  std::vector<TrialResult> results(trials.size());
  const unsigned seed = base_seed();
  parallel_for(static_cast<int>(trials.size()), static_cast<int>(trials.size()),
               [&](int i) { results[i] = run_trial(trials[i], seed + static_cast<unsigned>(i)); });
  Figures f;
  f.fault = "SIGSTOP one rank (KIZUNA_TIMEOUT=" + std::to_string(kTimeoutS) + "s)";
  f.trials = static_cast<int>(trials.size());
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const TrialResult& r = results[i];
    f.add(r);
    if (r.problems.empty()) continue;
    FAIL_CHECK(r.failure("rank " + std::to_string(trials[i].victim) + " stopped, over " + trials[i].transport +
                         (trials[i].mailbox ? " (mailboxes)" : "") + ":"));
  }
  f.note = "Timeout naming the stopped rank (stuck-rank report checked), ring, tcp and shm; mailboxes, shm";
  f.report();
  CHECK(f.hangs == 0);
  CHECK(f.correct == f.expected);
}
