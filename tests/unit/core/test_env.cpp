// Env: every variable, with good and bad values; and docs/env.md lists them all.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <kizuna/error.hpp>

#include "core/env.hpp"

using namespace kizuna;
using namespace kizuna::core;
using namespace std::chrono_literals;

namespace {

Env parse(std::map<std::string, std::string> vars) {
  std::vector<std::string> names;
  for (const auto& [k, v] : vars) names.push_back(k);
  return Env::parse(
      [vars](const std::string& n) -> std::optional<std::string> {
        auto it = vars.find(n);
        if (it == vars.end()) return std::nullopt;
        return it->second;
      },
      names);
}

std::string error_of(std::map<std::string, std::string> vars) {
  try {
    parse(std::move(vars));
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::InvalidArgument);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Env defaults", "[env]") {
  const Env env = parse({});
  CHECK(env.log_level == LogLevel::Warn);
  CHECK(env.log_file.empty());
  CHECK(env.timeout == 300s);
  CHECK(env.store_timeout == 60s);
  CHECK(env.warnings.empty());
}

TEST_CASE("KIZUNA_LOG", "[env]") {
  CHECK(parse({{"KIZUNA_LOG", "debug"}}).log_level == LogLevel::Debug);
  CHECK(parse({{"KIZUNA_LOG", "ERROR"}}).log_level == LogLevel::Error);
  CHECK(parse({{"KIZUNA_LOG", "trace"}}).log_level == LogLevel::Trace);
  const std::string what = error_of({{"KIZUNA_LOG", "loud"}});
  CHECK(what.find("KIZUNA_LOG='loud'") != std::string::npos);
  CHECK(what.find("error, warn, info, debug, trace") != std::string::npos);
}

TEST_CASE("KIZUNA_LOG_FILE", "[env]") {
  CHECK(parse({{"KIZUNA_LOG_FILE", "/tmp/kz-%r.log"}}).log_file == "/tmp/kz-%r.log");
}

TEST_CASE("KIZUNA_TIMEOUT and KIZUNA_STORE_TIMEOUT take durations", "[env]") {
  CHECK(parse({{"KIZUNA_TIMEOUT", "30"}}).timeout == 30s);
  CHECK(parse({{"KIZUNA_TIMEOUT", "1.5s"}}).timeout == 1500ms);
  CHECK(parse({{"KIZUNA_TIMEOUT", "250ms"}}).timeout == 250ms);
  CHECK(parse({{"KIZUNA_TIMEOUT", "2m"}}).timeout == 120s);
  CHECK(parse({{"KIZUNA_STORE_TIMEOUT", "5"}}).store_timeout == 5s);
  for (const char* bad : {"", "0", "-3", "soon", "10 parsecs", "1e400"}) {
    CAPTURE(bad);
    const std::string what = error_of({{"KIZUNA_TIMEOUT", bad}});
    CHECK(what.find("KIZUNA_TIMEOUT='") != std::string::npos);
    CHECK(what.find("positive number of seconds") != std::string::npos);
  }
  CHECK(error_of({{"KIZUNA_STORE_TIMEOUT", "x"}}).find("KIZUNA_STORE_TIMEOUT") != std::string::npos);
}

TEST_CASE("unknown KIZUNA_ variables warn with a suggestion", "[env]") {
  const Env env = parse({{"KIZUNA_TIMOUT", "3"}, {"KIZUNA_ZZZZZZZZZZZZ", "1"}, {"OTHER", "1"}});
  REQUIRE(env.warnings.size() == 2);
  CHECK(env.warnings[0].find("KIZUNA_TIMOUT") != std::string::npos);
  CHECK(env.warnings[0].find("did you mean KIZUNA_TIMEOUT?") != std::string::npos);
  CHECK(env.warnings[1].find("did you mean") == std::string::npos);
}

TEST_CASE("value parsers", "[env]") {
  CHECK(parse_size("X", "4096") == 4096);
  CHECK(parse_size("X", "64K") == 65536);
  CHECK(parse_size("X", "4MiB") == 4u << 20);
  CHECK(parse_size("X", "1g") == 1u << 30);
  CHECK_THROWS_AS(parse_size("X", "4Q"), Error);
  CHECK_THROWS_AS(parse_size("X", "99999999999999999999"), Error);
  CHECK(parse_bool("X", "on"));
  CHECK_FALSE(parse_bool("X", "0"));
  CHECK_THROWS_AS(parse_bool("X", "maybe"), Error);
  CHECK(parse_int("X", "7", 0, 10) == 7);
  CHECK_THROWS_AS(parse_int("X", "11", 0, 10), Error);
  CHECK_THROWS_AS(parse_int("X", "7x", 0, 10), Error);
}

TEST_CASE("every variable Env reads is one it knows, so none is reported unknown and ignored", "[env]") {
  std::vector<std::string> read;
  const Env env = Env::parse(
      [&read](const std::string& name) -> std::optional<std::string> {
        read.push_back(name);
        return std::nullopt;
      },
      {});
  CHECK(env.warnings.empty());
  REQUIRE_FALSE(read.empty());
  const auto& known = Env::known_variables();
  for (const std::string& name : read) {
    CAPTURE(name);
    CHECK(std::find(known.begin(), known.end(), name) != known.end());
  }
}

TEST_CASE("docs/env.md lists every variable Env reads", "[env]") {
  std::ifstream in(std::string(KIZUNA_SOURCE_DIR) + "/docs/env.md");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  for (std::string_view name : Env::known_variables()) {
    CAPTURE(name);
    CHECK(text.str().find("`" + std::string(name) + "`") != std::string::npos);
  }
}

TEST_CASE("KIZUNA_STORE_TOKEN, KIZUNA_ALGO, KIZUNA_SLICE_BYTES, KIZUNA_CHECK, KIZUNA_SOCKET_IFNAME",
          "[env]") {
  CHECK(parse({{"KIZUNA_STORE_TOKEN", "s3cret"}}).store_token == "s3cret");
  CHECK(parse({}).algo == Algorithm::Auto);
  CHECK(parse({{"KIZUNA_ALGO", "ring"}}).algo == Algorithm::Ring);
  CHECK(parse({{"KIZUNA_ALGO", "Tree"}}).algo == Algorithm::Tree);
  CHECK(parse({{"KIZUNA_ALGO", "oneshot"}}).algo == Algorithm::OneShot);
  CHECK(parse({{"KIZUNA_ALGO", "twoshot"}}).algo == Algorithm::TwoShot);
  CHECK(parse({{"KIZUNA_ALGO", "doubling"}}).algo == Algorithm::Doubling);
  CHECK(error_of({{"KIZUNA_ALGO", "butterfly"}}).find("accepted: auto, ring, tree, oneshot, twoshot, doubling") !=
        std::string::npos);
  CHECK(parse({}).slice_bytes == 512 * 1024);
  CHECK(parse({{"KIZUNA_SLICE_BYTES", "1M"}}).slice_bytes == 1 << 20);
  CHECK(error_of({{"KIZUNA_SLICE_BYTES", "1"}}).find("4K .. 64M") != std::string::npos);
  CHECK(error_of({{"KIZUNA_SLICE_BYTES", "lots"}}).find("KIZUNA_SLICE_BYTES") != std::string::npos);
  CHECK_FALSE(parse({}).check);
  CHECK(parse({{"KIZUNA_CHECK", "1"}}).check);
  CHECK(error_of({{"KIZUNA_CHECK", "2"}}).find("KIZUNA_CHECK='2'") != std::string::npos);
  CHECK(parse({{"KIZUNA_SOCKET_IFNAME", "eth0"}}).socket_ifname == "eth0");
  CHECK(error_of({{"KIZUNA_SOCKET_IFNAME", "an-interface-name-too-long"}}).find("KIZUNA_SOCKET_IFNAME") !=
        std::string::npos);
}

TEST_CASE("KIZUNA_TRANSPORT, KIZUNA_SHM_BYTES, KIZUNA_SPIN_US, KIZUNA_YIELD_US", "[env]") {
  CHECK(parse({}).transport == Transport::Auto);
  CHECK(parse({{"KIZUNA_TRANSPORT", "shm"}}).transport == Transport::Shm);
  CHECK(parse({{"KIZUNA_TRANSPORT", "TCP"}}).transport == Transport::Tcp);
  CHECK(error_of({{"KIZUNA_TRANSPORT", "rdma"}}).find("accepted: auto, tcp, shm") != std::string::npos);
  CHECK(parse({}).shm_bytes == 1 << 20);
  CHECK(parse({{"KIZUNA_SHM_BYTES", "4M"}}).shm_bytes == 4 << 20);
  CHECK(error_of({{"KIZUNA_SHM_BYTES", "1K"}}).find("64K .. 1G") != std::string::npos);
  CHECK(parse({}).spin_us == -1);
  CHECK(parse({{"KIZUNA_SPIN_US", "auto"}}).spin_us == -1);
  CHECK(parse({{"KIZUNA_SPIN_US", "20"}}).spin_us == 20);
  CHECK(error_of({{"KIZUNA_SPIN_US", "-1"}}).find("KIZUNA_SPIN_US") != std::string::npos);
  CHECK(parse({}).yield_us == -1);
  CHECK(parse({{"KIZUNA_YIELD_US", "AUTO"}}).yield_us == -1);
  CHECK(parse({{"KIZUNA_YIELD_US", "0"}}).yield_us == 0);
  CHECK(parse({{"KIZUNA_YIELD_US", "1000000"}}).yield_us == 1000000);
  CHECK(error_of({{"KIZUNA_YIELD_US", "1000001"}}).find("KIZUNA_YIELD_US") != std::string::npos);
  CHECK(error_of({{"KIZUNA_YIELD_US", "soon"}}).find("KIZUNA_YIELD_US") != std::string::npos);
}

TEST_CASE("KIZUNA_CUDA_LINK takes a round's us, a further message's us and GB/s, and refuses the rest", "[env]") {
  CHECK_FALSE(parse({}).cuda_link.has_value());
  const auto link = parse({{"KIZUNA_CUDA_LINK", " 3.4,3.8,20 "}}).cuda_link;
  REQUIRE(link.has_value());
  CHECK((*link)[0] == 3.4);
  CHECK((*link)[1] == 3.8);
  CHECK((*link)[2] == 20.0);
  CHECK(parse({{"KIZUNA_CUDA_LINK", "2,0,100"}}).cuda_link.has_value());  // a further message may be free
  CHECK(parse({{"KIZUNA_CUDA_LINK", "3.4, 3.8, 3"}}).cuda_link == std::array<double, 3>{3.4, 3.8, 3.0});
  for (const char* bad : {"", "3.4", "3.4,3.8", "3.4,3.8,20,1", "0,1,1", "1,-1,1", "1,1,0", "a,b,c", "1;1;1",
                          "inf,1,1", "1,1,1x"}) {
    CAPTURE(bad);
    CHECK(error_of({{"KIZUNA_CUDA_LINK", bad}}).find("KIZUNA_CUDA_LINK") != std::string::npos);
  }
}

TEST_CASE("KIZUNA_CUDA_CHANNELS and KIZUNA_CUDA_SLOT_BYTES shape the GPU FIFOs, within range", "[env]") {
  CHECK(parse({}).cuda_channels == 0);
  CHECK(parse({}).cuda_slot_bytes == 0);
  CHECK(parse({{"KIZUNA_CUDA_CHANNELS", "32"}}).cuda_channels == 32);
  CHECK(error_of({{"KIZUNA_CUDA_CHANNELS", "33"}}).find("KIZUNA_CUDA_CHANNELS") != std::string::npos);
  CHECK(error_of({{"KIZUNA_CUDA_CHANNELS", "0"}}).find("KIZUNA_CUDA_CHANNELS") != std::string::npos);
  CHECK(parse({{"KIZUNA_CUDA_SLOT_BYTES", "512K"}}).cuda_slot_bytes == 512u << 10);
  CHECK(error_of({{"KIZUNA_CUDA_SLOT_BYTES", "1K"}}).find("4K .. 16M, a multiple of 256") != std::string::npos);
  CHECK(error_of({{"KIZUNA_CUDA_SLOT_BYTES", "5000"}}).find("a multiple of 256") != std::string::npos);
}

TEST_CASE("KIZUNA_PORT_RANGE is LOW-HIGH within 1..65535", "[env]") {
  CHECK(parse({}).port_low == 0);
  const Env e = parse({{"KIZUNA_PORT_RANGE", "40000-40999"}});
  CHECK(e.port_low == 40000);
  CHECK(e.port_high == 40999);
  CHECK(parse({{"KIZUNA_PORT_RANGE", "5000-5000"}}).port_high == 5000);
  for (const char* bad : {"40999-40000", "40000", "0-10", "1-65536", "a-b", "-"})
    CHECK(error_of({{"KIZUNA_PORT_RANGE", bad}}).find("LOW-HIGH with 1 <= LOW <= HIGH <= 65535") != std::string::npos);
}

TEST_CASE("KIZUNA_STAGED_FROM and KIZUNA_STAGING_BYTES", "[env]") {
  CHECK(parse({}).staged_from == -1);
  CHECK(parse({{"KIZUNA_STAGED_FROM", "Auto"}}).staged_from == -1);
  CHECK(parse({{"KIZUNA_STAGED_FROM", "0"}}).staged_from == 0);
  CHECK(parse({{"KIZUNA_STAGED_FROM", "2M"}}).staged_from == 2 << 20);
  CHECK(error_of({{"KIZUNA_STAGED_FROM", "-1"}}).find("KIZUNA_STAGED_FROM") != std::string::npos);
  CHECK(parse({}).staging_bytes == -1);
  CHECK(parse({{"KIZUNA_STAGING_BYTES", "0"}}).staging_bytes == 0);
  CHECK(parse({{"KIZUNA_STAGING_BYTES", "256K"}}).staging_bytes == 256 << 10);
  CHECK(parse({{"KIZUNA_STAGING_BYTES", "1G"}}).staging_bytes == 1 << 30);
  for (const char* bad : {"1K", "2G", "lots"}) {
    CAPTURE(bad);
    CHECK(error_of({{"KIZUNA_STAGING_BYTES", bad}}).find("KIZUNA_STAGING_BYTES") != std::string::npos);
  }
}

TEST_CASE("KIZUNA_STAGED_STORES", "[env]") {
  CHECK(parse({}).staged_stores == StagedStores::Auto);
  CHECK(parse({{"KIZUNA_STAGED_STORES", "auto"}}).staged_stores == StagedStores::Auto);
  CHECK(parse({{"KIZUNA_STAGED_STORES", "Cache"}}).staged_stores == StagedStores::Cache);
  CHECK(parse({{"KIZUNA_STAGED_STORES", " stream "}}).staged_stores == StagedStores::Stream);
  CHECK(error_of({{"KIZUNA_STAGED_STORES", "nt"}}).find("KIZUNA_STAGED_STORES") != std::string::npos);
}

TEST_CASE("KIZUNA_TCP_CONGESTION", "[env]") {
  CHECK(parse({}).tcp_congestion == "auto");
  CHECK(parse({{"KIZUNA_TCP_CONGESTION", "system"}}).tcp_congestion == "system");
  CHECK(parse({{"KIZUNA_TCP_CONGESTION", " CUBIC "}}).tcp_congestion == "cubic");
  CHECK(parse({{"KIZUNA_TCP_CONGESTION", "bbr"}}).tcp_congestion == "bbr");
  for (const char* bad : {"", "re-no", "cubic;rm", "a-congestion-control-name"}) {
    CAPTURE(bad);
    const std::string what = error_of({{"KIZUNA_TCP_CONGESTION", bad}});
    CHECK(what.find("KIZUNA_TCP_CONGESTION='") != std::string::npos);
    CHECK(what.find("accepted: auto, system") != std::string::npos);
  }
}

TEST_CASE("KIZUNA_STORE_PREFIX", "[env]") {
  CHECK(parse({}).store_prefix.empty());
  CHECK(parse({{"KIZUNA_STORE_PREFIX", "run1a2b/round3"}}).store_prefix == "run1a2b/round3");
  CHECK(parse({{"KIZUNA_STORE_PREFIX", "job"}}).store_prefix == "job");
  for (const char* bad : {"", "/run", "run/", "run//round0", "has space", "tab\there"}) {
    CAPTURE(bad);
    const std::string what = error_of({{"KIZUNA_STORE_PREFIX", bad}});
    CHECK(what.find("KIZUNA_STORE_PREFIX='") != std::string::npos);
    CHECK(what.find("not a key prefix") != std::string::npos);
  }
  CHECK(error_of({{"KIZUNA_STORE_PREFIX", std::string(513, 'a')}}).find("1 to 512") != std::string::npos);
  CHECK(parse({{"KIZUNA_STORE_PREFIX", "x"}}).warnings.empty());
}

TEST_CASE("KIZUNA_DUMP_ON_SIGNAL", "[env]") {
  CHECK_FALSE(parse({}).dump_on_signal);
  CHECK(parse({{"KIZUNA_DUMP_ON_SIGNAL", "1"}}).dump_on_signal);
  CHECK(error_of({{"KIZUNA_DUMP_ON_SIGNAL", "sometimes"}}).find("KIZUNA_DUMP_ON_SIGNAL") != std::string::npos);
}

TEST_CASE("KIZUNA_TUNING_FILE", "[env]") {
  CHECK(parse({}).tuning_file.empty());
  CHECK(parse({{"KIZUNA_TUNING_FILE", "/etc/kizuna/tuning.txt"}}).tuning_file == "/etc/kizuna/tuning.txt");
  CHECK(error_of({{"KIZUNA_TUNING_FILE", ""}}).find("KIZUNA_TUNING_FILE is set but empty") != std::string::npos);
}

TEST_CASE("KIZUNA_DEVICE", "[env]") {
  CHECK(parse({}).device == "cpu");
  CHECK(parse({{"KIZUNA_DEVICE", "cuda"}}).device == "cuda");
  CHECK(parse({{"KIZUNA_DEVICE", "cuda"}}).device_index == -1);
  CHECK(parse({{"KIZUNA_DEVICE", "CUDA:3"}}).device_index == 3);
  for (const char* bad : {"tpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x"}) {
    CAPTURE(bad);
    CHECK(error_of({{"KIZUNA_DEVICE", bad}}).find("accepted: cpu, cuda, cuda:N") != std::string::npos);
  }
}
