// The tuning table: what make_tuning derives from the settings and the
// facts every rank knows alike (comm/tuning.hpp, docs/tuning.md).
#include <catch2/catch.hpp>

#include "comm/tuning.hpp"
#include "error_of.hpp"

using namespace kizuna;
using namespace kizuna::comm;
using namespace std::chrono_literals;

namespace {

Facts node(int world, int cores, std::string congestion = "") {
  Facts f;
  f.world = world;
  f.local_ranks = world;
  f.cores = cores;
  f.tcp_congestion = std::move(congestion);
  f.asymmetric_fence = true;
  f.mailbox_capacity = 1024;
  return f;
}

Settings over_tcp() {
  Settings s;
  s.transport = Transport::Tcp;
  return s;
}

core::Env env_of(std::vector<std::pair<std::string, std::string>> vars) {
  return core::Env::parse([vars](const std::string& name) -> std::optional<std::string> {
    for (const auto& [k, v] : vars)
      if (k == name) return v;
    return std::nullopt;
  });
}

}  // namespace

TEST_CASE("tuning: 2 ranks, each with a core, sharing memory", "[comm][tuning]") {
  const Tuning t = make_tuning(Settings{}, node(2, 2));
  CHECK(t.single_host);
  CHECK_FALSE(t.oversubscribed);
  CHECK(t.node_memory);
  CHECK(t.link.alpha_us == 2.0);
  CHECK(t.mailbox_upto == 1024);
  CHECK(t.symmetric_from == 512 << 10);
  CHECK(t.staged_from == 64 << 10);
  CHECK(t.staged_near_from == 256 << 10);
  CHECK(t.staged_near_upto == 6 << 20);
  CHECK(t.staging_bytes == 512 << 10);
  CHECK(t.spin == 200us);
  CHECK(t.yield == 50us);
  CHECK(t.light_rings);
  CHECK_FALSE(t.slots_stream);
  CHECK(t.slots_follow_probe);
  CHECK_FALSE(t.stream_until_probed);
  CHECK(t.link.large_all_reduce_from == UINT64_MAX);
}

TEST_CASE("tuning: 4 ranks on 2 cores sharing memory", "[comm][tuning]") {
  const Tuning t = make_tuning(Settings{}, node(4, 2));
  CHECK(t.oversubscribed);
  CHECK(t.link.alpha_us == 15.0);
  CHECK(t.symmetric_from == 64 << 10);
  CHECK(t.staged_near_from == 0);  // only 2 ranks, each with a core
  CHECK(t.staged_near_upto == 0);
  CHECK(t.spin == 0us);
  CHECK(t.yield == 1000us);
  CHECK_FALSE(t.light_rings);  // a rank that never spins cannot afford the heavy fence
  CHECK(t.slots_stream);
  CHECK_FALSE(t.slots_follow_probe);
  CHECK(t.stream_until_probed);
}

TEST_CASE("tuning: loopback TCP, more ranks than cores, picks its large all-reduce by congestion control", "[comm][tuning]") {
  const Tuning reno = make_tuning(over_tcp(), node(4, 2, "reno"));
  CHECK_FALSE(reno.node_memory);
  CHECK(reno.mailbox_upto == 0);
  CHECK(reno.link.message_us == 10.0);
  CHECK(reno.link.large_all_reduce_from == 512 << 10);
  CHECK(reno.link.large_all_reduce == algo::Algorithm::Ring);
  const Tuning bbr = make_tuning(over_tcp(), node(4, 2, "bbr"));
  CHECK(bbr.link.large_all_reduce_from == 1 << 20);
  CHECK(bbr.link.large_all_reduce == algo::Algorithm::Tree);
  CHECK(make_tuning(over_tcp(), node(2, 2, "reno")).link.large_all_reduce_from == UINT64_MAX);
  CHECK(make_tuning(over_tcp(), node(4, 4, "reno")).link.large_all_reduce_from == UINT64_MAX);
}

TEST_CASE("tuning: several nodes over shared memory are hierarchical, without the node's own paths", "[comm][tuning]") {
  Facts f = node(8, 8);
  f.nodes = 2;
  f.local_ranks = 4;
  const Tuning t = make_tuning(Settings{}, f);
  CHECK(t.hierarchical);
  CHECK_FALSE(t.single_host);
  CHECK_FALSE(t.node_memory);
  CHECK(t.mailbox_upto == 0);
  CHECK(t.link.alpha_us == algo::LinkModel{}.alpha_us);
}

TEST_CASE("tuning: settings override the defaults, and a set staged threshold turns off the near rule", "[comm][tuning]") {
  Settings s;
  s.symmetric_from = 1 << 20;
  s.staged_from = 128 << 10;
  s.mailbox_upto = 0;
  s.spin_us = 5;
  s.yield_us = 7;
  s.staging_bytes = 256 << 10;
  s.stores = core::StagedStores::Stream;
  const Tuning t = make_tuning(s, node(2, 2));
  CHECK(t.symmetric_from == 1 << 20);
  CHECK(t.staged_from == 128 << 10);
  CHECK(t.staged_near_from == 0);
  CHECK(t.staged_near_upto == 0);
  CHECK(t.mailbox_upto == 0);
  CHECK(t.spin == 5us);
  CHECK(t.yield == 7us);
  CHECK(t.staging_bytes == 256 << 10);
  CHECK(t.slots_stream);
  CHECK_FALSE(t.slots_follow_probe);
}

TEST_CASE("settings: an option wins over its variable, and bad ones name themselves", "[comm][tuning]") {
  const core::Env env = env_of({{"KIZUNA_ALGO", "tree"}, {"KIZUNA_SYMMETRIC_FROM", "1M"}, {"KIZUNA_CHECK", "1"},
                                {"KIZUNA_STAGED_STORES", "cache"}, {"KIZUNA_SPIN_US", "3"}});
  CommOptions options;
  Settings s = settings_from(options, env);
  CHECK(s.algorithm == Algorithm::Tree);
  CHECK(s.symmetric_from == std::optional<std::size_t>(1 << 20));
  CHECK(s.check);
  CHECK(s.stores == core::StagedStores::Cache);
  CHECK(s.spin_us == std::optional<int>(3));
  options.algorithm = Algorithm::Ring;
  options.symmetric_from = 4096;
  options.check = false;
  options.staged_stores = "stream";
  s = settings_from(options, env);
  CHECK(s.algorithm == Algorithm::Ring);
  CHECK(s.symmetric_from == std::optional<std::size_t>(4096));
  CHECK_FALSE(s.check);
  CHECK(s.stores == core::StagedStores::Stream);
  options.staged_stores = "fast";
  CHECK_THAT(test::error_of_call([&] { settings_from(options, env); }).what(),
             Catch::Contains("CommOptions.staged_stores"));
  options.staged_stores = "";
  options.mailbox_upto = 4096;
  CHECK_THAT(test::error_of_call([&] { settings_from(options, env); }).what(),
             Catch::Contains("CommOptions.mailbox_upto"));
}

TEST_CASE("tuning: GPU to GPU the device link picks by the kernel's rounds, not the host's link", "[comm][tuning]") {
  // docs/tuning.md#device-link-model: a block sends one message a round,
  // so one- and two-shot's many messages cost rounds that the host's
  // shared memory does not charge; small calls go one-shot with 2 ranks
  // and doubling with more, large ones round the ring.
  const Tuning t = make_tuning(Settings{}, node(8, 16));
  using algo::Algorithm;
  auto pick = [&](int world, std::uint64_t bytes) {
    return algo::choose_algorithm(algo::Collective::AllReduce, bytes, world, t.device_link, true);
  };
  CHECK(pick(2, 8) == Algorithm::OneShot);
  CHECK(pick(2, 64 << 20) == Algorithm::Ring);
  for (int world : {3, 4, 8}) {
    CAPTURE(world);
    CHECK(pick(world, 8) == Algorithm::Doubling);
    CHECK(pick(world, 1 << 10) == Algorithm::Doubling);
    CHECK(pick(world, 64 << 20) == Algorithm::Ring);
  }
  // The host's link, for the same shapes, goes one-shot and two-shot.
  CHECK(algo::choose_algorithm(algo::Collective::AllReduce, 8, 8, t.link, true) == Algorithm::OneShot);
  CHECK(algo::choose_algorithm(algo::Collective::AllReduce, 64 << 20, 8, t.link, true) == Algorithm::TwoShot);

  // KIZUNA_CUDA_LINK replaces it whole.
  const Tuning fitted = make_tuning(settings_from(CommOptions{}, env_of({{"KIZUNA_CUDA_LINK", "1.5,0.25,40"}})), node(4, 4));
  CHECK(fitted.device_link.alpha_us == 1.5);
  CHECK(fitted.device_link.message_us == 0.25);
  CHECK(fitted.device_link.beta_us_per_byte == Approx(1e-3 / 40));
  CHECK_THAT(fitted.describe(), Catch::Contains("GPU to GPU link 1.5 us a round, 40 GB/s, 0.25 us a further message"));
}

TEST_CASE("tuning: describe() prints every rule in one block", "[comm][tuning]") {
  const std::string text = make_tuning(Settings{}, node(2, 2)).describe();
  for (const char* line : {"machine", "algorithm", "mailbox", "symmetric", "staged", "stores", "waiting", "direct",
                           "device", "deadlines", "docs/tuning.md"})
    CHECK_THAT(text, Catch::Contains(line));
  CHECK_THAT(text, Catch::Contains("up to 1 KiB") && Catch::Contains("from 512 KiB") &&
                       Catch::Contains("below 256 KiB while near"));
}
