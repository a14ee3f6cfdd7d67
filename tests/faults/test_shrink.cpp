// Shrinking after a death, across processes: a job of 4 (also 2 and 8) kizuna-fault-worker
// processes in "shrink" mode loops a collective (int64, checked exactly);
// ranks are SIGKILLed at random moments once every rank runs. Every
// survivor must catch the failure, agree with the others on the failed
// ranks (Communicator::shrink), and go on with a right result on the smaller
// group within 2 s of the kill, then finish; no process may hang. Rank 0
// hosts the store, so the victims are drawn from the others, except in the
// store host's own case, where every survivor must fail with an error
// naming the store instead of hanging.
//
// Trials are seeded (KZ_FAULTS_SEED, printed; KZ_FAULTS_REPEAT=N for N
// times as many); two run at a time. Each
// case prints its figures ("FAULTS |", the time from the kill to the first
// right iteration on the shrunk group in the detection columns).
#include <catch2/catch.hpp>

#include <signal.h>

#include <numeric>

#include "faults.hpp"

using namespace kizuna::test;
using namespace kizuna::test::faults;

namespace {

constexpr double kRecoverLimit = 2000.0;  // ms, from the kill to the first right iteration after the shrink
constexpr int kConcurrentTrials = 2;
constexpr int kWorld = 4;  // unless a trial says otherwise
constexpr int kRunSeconds = 6;  // each worker's loop, from its start

struct Trial {
  std::string transport;
  std::string collective;
  int world = kWorld;
  std::vector<int> victims;  // killed in order
  int delay_ms = 0;          // after every rank is ready, to the first kill
  int gap_ms = 0;            // between kills
  std::size_t count = 0;
  unsigned seed = 0;
  bool replace = false;  // start a process for each victim that joins the survivors (mode "elastic")
};

std::string describe(const Trial& t) {
  std::ostringstream out;
  out << t.world << " ranks, " << t.collective << " over " << t.transport << ", count " << t.count << ", rank(s)";
  for (int v : t.victims) out << " " << v;
  out << " killed " << t.delay_ms << " ms after ready, " << t.gap_ms << " ms apart";
  if (t.replace) out << ", then replaced";
  return out.str();
}

TrialResult run_trial(const Trial& t) {
  TrialResult res;
  std::mt19937 rng(t.seed);
  const int port = store_port(rng);
  if (port == 0) {
    res.problems.push_back("no free store port");
    return res;
  }
  Ranks ranks;
  // Rank r, in `mode`: "shrink", "elastic", or "join" (a replacement).
  const auto start = [&](int r, const char* mode) {
    Job::Env env = rank_env(r, t.world, "127.0.0.1", port);
    env["KIZUNA_TRANSPORT"] = t.transport;
    env["KIZUNA_TIMEOUT"] = "30";  // far beyond the trial: only the loss can end a call in time
    env["KIZUNA_STORE_TIMEOUT"] = "15";
    ranks.start({kWorker, t.collective, std::to_string(t.count), "100000000", std::to_string(kRunSeconds), mode},
                env);
  };
  for (int r = 0; r < t.world; ++r) start(r, t.replace ? "elastic" : "shrink");
  if (!all_ready(ranks, res)) return res;
  std::this_thread::sleep_for(std::chrono::milliseconds(t.delay_ms));
  const auto killed_at = Clock::now();
  for (std::size_t k = 0; k < t.victims.size(); ++k) {
    if (k > 0) std::this_thread::sleep_for(std::chrono::milliseconds(t.gap_ms));
    ranks[t.victims[k]].signal(SIGKILL);
  }
  const auto last_kill = Clock::now();
  // As a launcher would: once the victims are reaped, start their
  // replacements.
  std::vector<JobResult> results = ranks.wait(t.victims, Clock::now() + 2s);
  if (t.replace)
    for (int v : t.victims) start(v, "join");
  const auto replaced_at = Clock::now();
  std::vector<int> others;
  for (int r = 0; r < ranks.size(); ++r)
    if (std::find(t.victims.begin(), t.victims.end(), r) == t.victims.end()) others.push_back(r);
  const std::vector<JobResult> rest = ranks.wait(others, killed_at + std::chrono::seconds(kRunSeconds + 20));
  results.resize(rest.size());
  for (int r : others) results[r] = rest[r];
  const bool store_host_killed = std::find(t.victims.begin(), t.victims.end(), 0) != t.victims.end();
  const int survivors_expected = t.world - static_cast<int>(t.victims.size());
  const int world_at_end = t.replace ? t.world : survivors_expected;
  for (int r = 0; r < ranks.size(); ++r) {
    const std::string who = "rank " + std::to_string(r) + ": ";
    const JobResult& jr = results[r];
    if (std::find(t.victims.begin(), t.victims.end(), r) != t.victims.end()) {
      if (jr.signal != SIGKILL) res.problems.push_back(who + "the victim was not ended by SIGKILL");
      continue;
    }
    ++res.survivors;
    const WorkerState s = parse(jr.output);
    if (jr.hung) {
      ++res.hangs;
      res.problems.push_back(who + "hung (killed " + std::to_string(kRunSeconds + 20) + " s after the kill)");
      continue;
    }
    if (s.wrong) {
      res.problems.push_back(who + "a wrong result");
      continue;
    }
    if (store_host_killed) {
      // The store is gone with its host: a clear error, soon, no hang.
      const bool named = contains(s.message, "store");
      if (!s.errored || !named) {
        res.problems.push_back(who + "did not fail naming the store (exit " + std::to_string(jr.exit_code) +
                               "): " + s.message);
        continue;
      }
      res.detect_ms.push_back(ms_since(killed_at, s.at_ns));
      ++res.correct;
      continue;
    }
    bool ok = true;
    if (s.errored) ok = false, res.problems.push_back(who + "ended with " + s.code + ": " + s.message);
    const bool newcomer = r >= t.world;
    if (newcomer && s.joined_ns == 0) ok = false, res.problems.push_back(who + "(a replacement) never joined");
    if (!newcomer && s.lost_codes.empty()) ok = false, res.problems.push_back(who + "saw no failure");
    if (!newcomer && s.shrinks == 0) ok = false, res.problems.push_back(who + "never shrank");
    if (!newcomer && t.replace && s.grows == 0) ok = false, res.problems.push_back(who + "never grew");
    if (s.last_world != world_at_end)
      ok = false, res.problems.push_back(who + "ended in a group of " + std::to_string(s.last_world) + " ranks, not " +
                                         std::to_string(world_at_end));
    if (s.resumed_ns == 0) ok = false, res.problems.push_back(who + "never had a right iteration after regrouping");
    if (!s.done || jr.exit_code != 0) ok = false, res.problems.push_back(who + "did not finish (exit " +
                                                                          std::to_string(jr.exit_code) + ")");
    if (s.resumed_ns != 0) {
      // with replacements: from their start to the first right iteration of
      // the whole group; else from the last kill
      const double ms = ms_since(t.replace ? replaced_at : last_kill, s.resumed_ns);
      res.detect_ms.push_back(ms);
      if (ms > kRecoverLimit)
        ok = false, res.problems.push_back(who + "went on " + std::to_string(ms) + " ms after the last kill");
    }
    res.correct += ok;
  }
  if (!res.problems.empty()) res.log = ranks.describe();
  return res;
}

void run_trials(const std::string& fault, const std::vector<Trial>& trials, const std::string& note) {
  std::printf("%s: %zu trials, seed %u (KZ_FAULTS_SEED=%u to repeat)\n", fault.c_str(), trials.size(), base_seed(),
              base_seed());
  std::vector<TrialResult> results(trials.size());
  parallel_for(static_cast<int>(trials.size()), kConcurrentTrials, [&](int i) { results[i] = run_trial(trials[i]); });
  Figures f;
  f.fault = fault;
  f.trials = static_cast<int>(trials.size());
  for (std::size_t i = 0; i < trials.size(); ++i) {
    f.add(results[i]);
    if (!results[i].problems.empty()) FAIL_CHECK(results[i].failure("trial " + std::to_string(i) + ": " + describe(trials[i]) + ":"));
  }
  f.note = note;
  f.report();
  CHECK(f.hangs == 0);
  CHECK(f.correct == f.expected);
}

// Victims drawn from ranks 1..world-1 (rank 0 hosts the store).
std::vector<int> draw_victims(std::mt19937& rng, int n, int world = kWorld) {
  std::vector<int> pool(static_cast<std::size_t>(world - 1));
  std::iota(pool.begin(), pool.end(), 1);
  std::shuffle(pool.begin(), pool.end(), rng);
  pool.resize(n);
  return pool;
}

// KZ_FAULTS_REPEAT=N runs every matrix N times over (more trials for
// docs/reliability.md; default 1).
int repeat() {
  const char* s = std::getenv("KZ_FAULTS_REPEAT");
  return s != nullptr && std::atoi(s) > 0 ? std::atoi(s) : 1;
}

std::vector<Trial> matrix(unsigned salt, int victims, int gap_lo, int gap_hi, int per_cell,
                          const std::vector<std::string>& collectives) {
  std::mt19937 rng(base_seed() ^ salt);
  std::vector<Trial> out;
  for (int k = 0; k < per_cell * repeat(); ++k)
    for (const char* transport : {"shm", "tcp"})
      for (const std::string& c : collectives) {
        Trial t;
        t.transport = transport;
        t.collective = c;
        t.victims = draw_victims(rng, victims);
        t.delay_ms = std::uniform_int_distribution<int>(0, 250)(rng);
        t.gap_ms = std::uniform_int_distribution<int>(gap_lo, gap_hi)(rng);
        const std::size_t counts[] = {1, 4099, 65537};
        t.count = c == "barrier" ? 0 : counts[std::uniform_int_distribution<int>(0, 2)(rng)];
        t.seed = rng();
        out.push_back(t);
      }
  return out;
}

}  // namespace

TEST_CASE("shrink: one of 4 ranks killed in each collective, the survivors go on within 2 s", "[faults][shrink]") {
  run_trials("SIGKILL one of 4, survivors shrink",
             matrix(0x5a1u, 1, 0, 0, 1, {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "barrier"}),
             "time from the kill to the first right iteration on the shrunk group");
}

TEST_CASE("shrink: one rank killed in a job of 2 and in a job of 8, the survivors go on within 2 s",
          "[faults][shrink]") {
  std::vector<Trial> trials;
  for (int world : {2, 8}) {
    std::vector<Trial> cell = matrix(0x5a6u ^ static_cast<unsigned>(world), 1, 0, 0, 1, {"all_reduce"});
    std::mt19937 rng(base_seed() ^ 0x5a7u ^ static_cast<unsigned>(world));
    for (Trial& t : cell) {
      t.world = world;
      t.victims = draw_victims(rng, 1, world);
      trials.push_back(t);
    }
  }
  run_trials("SIGKILL one of 2 or of 8, survivors shrink", trials,
             "time from the kill to the first right iteration on the shrunk group (one survivor of 2 goes on alone)");
}

TEST_CASE("shrink: two of 4 ranks killed at once, the last two go on", "[faults][shrink]") {
  run_trials("SIGKILL two of 4 at once, survivors shrink", matrix(0x5a2u, 2, 0, 0, 2, {"all_reduce"}),
             "time from the kills to the first right iteration on the shrunk group");
}

TEST_CASE("shrink: a second rank killed while the survivors shrink, the last two go on", "[faults][shrink]") {
  run_trials("SIGKILL a second rank during the shrink", matrix(0x5a3u, 2, 1, 150, 2, {"all_reduce"}),
             "time from the second kill to the first right iteration on the shrunk group");
}

TEST_CASE("shrink and grow: a rank killed, the survivors shrink, its replacement joins, all 4 go on",
          "[faults][shrink][grow]") {
  std::vector<Trial> trials = matrix(0x5a5u, 1, 0, 0, 1, {"all_reduce", "all_gather", "broadcast"});
  for (Trial& t : trials) t.replace = true;
  run_trials("SIGKILL one of 4, a replacement joins", trials,
             "time from the replacement's start to the first right iteration of each rank in the whole group");
}

TEST_CASE("shrink: when the store's host dies, every survivor fails naming the store, none hangs",
          "[faults][shrink]") {
  std::mt19937 rng(base_seed() ^ 0x5a4u);
  std::vector<Trial> trials;
  for (const char* transport : {"shm", "tcp"}) {
    Trial t;
    t.transport = transport;
    t.collective = "all_reduce";
    t.victims = {0};
    t.delay_ms = std::uniform_int_distribution<int>(0, 250)(rng);
    t.count = 4099;
    t.seed = rng();
    trials.push_back(t);
  }
  run_trials("SIGKILL the store's host (rank 0), survivors try to shrink", trials,
             "time from the kill to each survivor's error naming the store");
}
