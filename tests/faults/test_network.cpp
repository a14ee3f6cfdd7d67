// Network faults between two "hosts": two network namespaces joined by a
// veth pair (tests/support/namespace_pair.hpp), ranks 0-1 in the first
// (rank 0 hosts the store), ranks 2-3 in the second; shared memory inside a
// namespace, TCP across. The kernels these run on have no netem qdisc, so:
//
//   loss       nftables in both namespaces drops 1% of what leaves on the
//              veth (numgen random mod 100 < 1 drop)
//   bandwidth  tc tbf caps both directions of the veth at 100 Mbit/s
//   delay      kizuna-fault-proxy (one per namespace, fed by an nftables
//              redirect of every connection to the other namespace) holds
//              each chunk 20 ms +- 10 ms, in order
//   stalls     the same proxy forwards nothing for 200 ms of every 500 ms
//   combined   loss + delay + bandwidth together
//
// Under each, a fixed workload (every collective, int64, checked exactly)
// must give exactly the right results; the test runs it once without the
// fault first and records the slowdown. Then the link is set down in the
// middle of collectives: every rank on both sides must raise PeerLost or
// Timeout within the deadline (KIZUNA_TIMEOUT, short here; plus, for the
// side cut off from the store, the store client's reply allowance that the
// stuck-rank report may spend finding the store gone), and exit. And a
// rank of the second namespace killed: the survivors on both sides shrink
// (Communicator::shrink) and go on with exact results.
//
// A machine that refuses namespaces, nftables or tc skips the test that
// needs it (exit 77, the reason printed), never passes it silently.
#include <catch2/catch.hpp>

#include <signal.h>

#include <fstream>
#include <functional>

#include "faults.hpp"
#include "namespace_pair.hpp"

using namespace kizuna::test;
using namespace kizuna::test::faults;

namespace {

constexpr int kWorld = 4;
constexpr int kPerNode = 2;
constexpr int kStorePort = 29500;  // inside namespaces made for this test: free
constexpr int kProxyPort = 15999;
constexpr unsigned kProxyMark = 0x6b7a;
// The workload: 10 rounds of the six collectives on 16 Ki int64 (128 KiB;
// all_gather and reduce_scatter move 512 KiB).
const std::vector<std::string> kWorkload = {"all", "16384", "10", "100"};

int node_of(int rank) { return rank / kPerNode; }

class Network {
 public:
  Network() : hosts_(skip, "kzflt-", "kzf") {}

  NamespacePair& hosts() { return hosts_; }

  // Loads an nftables ruleset into namespace i; a refusal skips the test.
  void nft(int i, const std::string& rules) {
    const std::string nft = find_tool("nft");
    if (nft.empty()) refuse("nftables is not installed (Debian package nftables)");
    const std::string path =
        "/tmp/kizuna-faults-" + std::to_string(::getpid()) + "-" + std::to_string(files_++) + ".nft";
    std::ofstream(path) << rules;
    std::string why;
    const bool ok = run_command(hosts_.in(i, {nft, "-f", path}), why);
    ::unlink(path.c_str());
    if (!ok) refuse("nftables refused a ruleset in a network namespace: " + why);
  }

  void loss(int percent) {
    for (int i = 0; i < 2; ++i)
      nft(i, "table inet kzloss {\n chain out {\n  type filter hook output priority 0;\n  oifname \"" +
                 hosts_.veth(i) + "\" numgen random mod 100 < " + std::to_string(percent) + " counter drop\n }\n}\n");
  }

  void bandwidth(const std::string& rate) {
    const std::string tc = find_tool("tc");
    if (tc.empty()) refuse("tc is not installed (Debian package iproute2)");
    for (int i = 0; i < 2; ++i) {
      std::string why;
      if (!run_command(hosts_.in(i, {tc, "qdisc", "add", "dev", hosts_.veth(i), "root", "tbf", "rate", rate, "burst",
                                     "64kb", "latency", "200ms"}),
                       why))
        refuse("tc refused a tbf qdisc on the veth: " + why);
    }
  }

  // A proxy in each namespace, and every connection to the other namespace
  // redirected through it.
  void proxy(const std::vector<std::string>& options) {
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> argv{kProxy, "--port", std::to_string(kProxyPort), "--mark", std::to_string(kProxyMark),
                                    "--seed", std::to_string(base_seed() + i), "--lifetime-s", "300"};
      argv.insert(argv.end(), options.begin(), options.end());
      proxies_.push_back(std::make_unique<Job>(hosts_.in(i, argv)));
      Job& p = *proxies_.back();
      if (!wait_for([&] { return contains(p.output(), "proxy listening"); }, 20s))
        throw std::runtime_error("kizuna-fault-proxy did not start:\n" + p.output());
      nft(i, "table ip kzproxy {\n chain out {\n  type nat hook output priority -100;\n  meta mark != " +
                 std::to_string(kProxyMark) + " ip daddr " + NamespacePair::address(1 - i) +
                 " tcp dport != 0 redirect to :" + std::to_string(kProxyPort) + "\n }\n}\n");
    }
  }

  // What the faults did: packets nftables dropped, packets tbf held back,
  // what the proxies forwarded (they print it on SIGTERM).
  std::string effects() {
    std::string out;
    const std::string nft = find_tool("nft"), tc = find_tool("tc");
    long long dropped = -1, overlimits = -1;
    for (int i = 0; i < 2; ++i) {
      std::string text;
      if (!nft.empty() && run_command(hosts_.in(i, {nft, "list", "table", "inet", "kzloss"}), text))
        dropped = std::max(0LL, dropped) + number_after(text, "counter packets ");
      if (!tc.empty() && run_command(hosts_.in(i, {tc, "-s", "qdisc", "show", "dev", hosts_.veth(i)}), text) &&
          contains(text, "tbf"))
        overlimits = std::max(0LL, overlimits) + number_after(text, "overlimits ");
    }
    if (dropped >= 0) out += "; " + std::to_string(dropped) + " packets dropped";
    if (overlimits >= 0) out += "; tbf overlimits " + std::to_string(overlimits);
    for (auto& p : proxies_) {
      p->signal(SIGTERM);
      const JobResult r = p->wait(10s);
      proxy_log_ += r.output;
      const auto at = r.output.find("proxy: ");
      if (at == std::string::npos) continue;
      proxy_connections_ += std::atoll(r.output.c_str() + at + 7);
    }
    if (!proxies_.empty()) out += "; " + std::to_string(proxy_connections_) + " connections through the proxies";
    proxies_.clear();
    return out;
  }

  bool proxied() const { return proxy_connections_ > 0; }
  const std::string& proxy_log() const { return proxy_log_; }

  static long long number_after(const std::string& text, const std::string& label) {
    const auto at = text.find(label);
    return at == std::string::npos ? 0 : std::atoll(text.c_str() + at + label.size());
  }

  // Starts the four ranks running argv.
  void start(Ranks& ranks, const std::vector<std::string>& argv, const Job::Env& extra) {
    for (int r = 0; r < kWorld; ++r) {
      Job::Env env = rank_env(r, kWorld, NamespacePair::address(0), kStorePort, kPerNode);
      for (const auto& [k, v] : extra) env[k] = v;
      std::vector<std::string> command = hosts_.in(node_of(r), {kWorker});
      command.insert(command.end(), argv.begin(), argv.end());
      ranks.start(command, env);
    }
  }

 private:
  // Skips the test, leaving nothing behind (proxies, namespaces).
  [[noreturn]] void refuse(const std::string& why) {
    proxies_.clear();
    hosts_.remove();
    skip(why);
  }

  NamespacePair hosts_;
  std::vector<std::unique_ptr<Job>> proxies_;
  long long proxy_connections_ = 0;
  std::string proxy_log_;
  int files_ = 0;
};

struct Run {
  bool exact = true;   // every rank finished with the right results
  int right = 0;       // ranks that did
  bool hung = false;
  long long ms = 0;    // the slowest rank's time for the workload
  std::string log;
};

Run workload(Network& net) {
  Run run;
  Ranks ranks;
  net.start(ranks, kWorkload, {{"KIZUNA_TIMEOUT", "60"}, {"KIZUNA_STORE_TIMEOUT", "60"}});
  const auto results = ranks.wait(ranks.all(), Clock::now() + 100s);
  for (int r = 0; r < kWorld; ++r) {
    const WorkerState s = parse(results[r].output);
    run.hung |= results[r].hung;
    const bool ok = results[r].ok() && s.done && !s.wrong;
    run.right += ok;
    run.exact &= ok;
    run.ms = std::max(run.ms, s.done_ms);
  }
  run.log = ranks.describe();
  return run;
}

// Runs the workload without the fault, applies it, runs it again.
// `apply` says whether it put the proxies in the path.
void exact_under(const std::string& fault, const std::function<bool(Network&)>& apply) {
  Network net;
  const Run base = workload(net);
  INFO("without the fault:\n" << base.log);
  REQUIRE(base.exact);
  const bool through_proxy = apply(net);
  const Run faulted = workload(net);
  const std::string effects = net.effects();
  INFO("under " << fault << effects << ":\n" << faulted.log << net.proxy_log());
  Figures f;
  f.fault = fault;
  f.trials = 1;
  f.expected = kWorld;
  f.correct = faulted.right;
  f.hangs = faulted.hung ? 1 : 0;
  char note[200];
  std::snprintf(note, sizeof note, "%s; workload %lld ms -> %lld ms (%.1fx)",
                faulted.exact ? "results exact" : "RESULTS WRONG OR MISSING", base.ms, faulted.ms,
                base.ms > 0 ? static_cast<double>(faulted.ms) / static_cast<double>(base.ms) : 0.0);
  f.note = note + effects;
  f.report();
  CHECK_FALSE(faulted.hung);
  CHECK(faulted.exact);
  // The traffic really went through the proxies (else the test proves nothing).
  if (through_proxy) CHECK(net.proxied());
}

}  // namespace

TEST_CASE("1% packet loss (nftables): results stay exact", "[faults][netns][loss]") {
  exact_under("1% loss (nftables)", [](Network& net) { return net.loss(1), false; });
}

TEST_CASE("a 100 Mbit/s cap (tc tbf): results stay exact", "[faults][netns][bandwidth]") {
  exact_under("100 Mbit/s cap (tc tbf)", [](Network& net) { return net.bandwidth("100mbit"), false; });
}

TEST_CASE("20 ms delay with 10 ms jitter (proxy): results stay exact", "[faults][netns][delay]") {
  exact_under("20 ms +- 10 ms delay (proxy)",
              [](Network& net) { return net.proxy({"--delay-ms", "20", "--jitter-ms", "10"}), true; });
}

TEST_CASE("200 ms stalls every 500 ms (proxy): results stay exact", "[faults][netns][stall]") {
  exact_under("200 ms stall every 500 ms (proxy)",
              [](Network& net) { return net.proxy({"--stall-every-ms", "500", "--stall-ms", "200"}), true; });
}

TEST_CASE("1% loss with 20 ms delay and jitter under a 100 Mbit/s cap: results stay exact",
          "[faults][netns][combined]") {
  exact_under("1% loss + 20 +- 10 ms + 100 Mbit/s", [](Network& net) {
    net.bandwidth("100mbit");
    net.loss(1);
    net.proxy({"--delay-ms", "20", "--jitter-ms", "10"});
    return true;
  });
}

TEST_CASE("the link set down mid-collective: PeerLost or Timeout on both sides within the deadline",
          "[faults][netns][linkdown]") {
  constexpr int kTimeoutS = 3;
  constexpr double kGraceMs = 2000;  // the stuck-rank report's store look-ups, and scheduling
  // Ranks of the second namespace are cut off from the store too (it lives
  // in the first): the report's first store read waits its grace plus the
  // store client's 5 s reply allowance, then gives up.
  constexpr double kStoreGoneMs = 5000 + 300;
  Network net;
  Figures f;
  f.fault = "veth set down mid-collective (KIZUNA_TIMEOUT=" + std::to_string(kTimeoutS) + "s)";
  std::mt19937 rng(base_seed() ^ 0x11d0u);
  // Both ends in turn; the link is brought back up between trials.
  for (int side : {0, 1}) {
    Ranks ranks;
    net.start(ranks, {"all_reduce", "65537", "100000000", "25"},
              {{"KIZUNA_TIMEOUT", std::to_string(kTimeoutS)}, {"KIZUNA_STORE_TIMEOUT", "20"}, {"KIZUNA_ALGO", "ring"}});
    std::string why;
    const bool ready = ranks.wait_ready(30s, why);
    if (!ready) {
      ranks.wait(ranks.all(), Clock::now());
      FAIL(why << "\n" << ranks.describe());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 400));
    const auto down_at = Clock::now();
    net.hosts().must({"-n", net.hosts().name(side), "link", "set", net.hosts().veth(side), "down"});
    const auto results = ranks.wait(ranks.all(), down_at + std::chrono::seconds(kTimeoutS) + 25s);
    net.hosts().must({"-n", net.hosts().name(side), "link", "set", net.hosts().veth(side), "up"});
    INFO("link set down on side " << side << ":\n" << ranks.describe());
    ++f.trials;
    for (int r = 0; r < kWorld; ++r) {
      CAPTURE(r);
      ++f.expected;
      const WorkerState s = parse(results[r].output);
      if (results[r].hung) ++f.hangs;
      CHECK_FALSE(results[r].hung);
      CHECK(s.errored);
      if (!s.errored) continue;
      const double ms = ms_since(down_at, s.at_ns);
      f.detect_ms.push_back(ms);
      const bool right_code = s.code == "PeerLost" || s.code == "Timeout";
      const double limit = kTimeoutS * 1000 + kGraceMs + (node_of(r) == 1 ? kStoreGoneMs : 0);
      CHECK(right_code);
      CHECK(ms <= limit);
      f.correct += right_code && ms <= limit && !results[r].hung;
    }
  }
  f.note = "PeerLost or Timeout on all 4 ranks, both sides";
  f.report();
}

TEST_CASE("a rank killed on the second of two nodes: the survivors on both shrink and go on",
          "[faults][netns][shrink]") {
  Network net;
  Figures f;
  f.fault = "SIGKILL one of 4 on 2 netns nodes, survivors shrink";
  std::mt19937 rng(base_seed() ^ 0x5a6u);
  for (int victim : {2, 3}) {  // each rank of the node that does not host the store
    Ranks ranks;
    net.start(ranks, {"all_reduce", "4099", "100000000", "6", "shrink"},
              {{"KIZUNA_TIMEOUT", "30"}, {"KIZUNA_STORE_TIMEOUT", "20"}});
    TrialResult res;
    if (!all_ready(ranks, res, 30s)) FAIL(res.failure("set-up:"));
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 300));
    const auto killed_at = Clock::now();
    ranks[victim].signal(SIGKILL);
    const auto results = ranks.wait(ranks.all(), killed_at + 30s);
    INFO("rank " << victim << " killed:\n" << ranks.describe());
    ++f.trials;
    CHECK(results[victim].signal == SIGKILL);
    for (int r = 0; r < kWorld; ++r) {
      if (r == victim) continue;
      CAPTURE(r);
      ++f.expected;
      const WorkerState s = parse(results[r].output);
      if (results[r].hung) ++f.hangs;
      const bool ok = !results[r].hung && results[r].exit_code == 0 && s.done && !s.wrong && s.shrinks >= 1 &&
                      s.last_world == kWorld - 1 && s.resumed_ns != 0;
      CHECK(ok);
      if (s.resumed_ns != 0) f.detect_ms.push_back(ms_since(killed_at, s.resumed_ns));
      f.correct += ok;
    }
  }
  f.note = "time from the kill to the first right iteration on the shrunk group, across the veth";
  f.report();
  CHECK(f.correct == f.expected);
}
