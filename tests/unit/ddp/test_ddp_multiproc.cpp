// The Reducer with ranks as processes over loopback TCP: the worker
// (ddp_worker.cpp) runs one rank each.
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>
#include <netinet/in.h>
#include <sys/socket.h>

#include "processes.hpp"

using namespace kizuna::test;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = std::string(KIZUNA_BINARY_DIR) + "/tests/unit/ddp/kizuna-test-ddp-worker";

std::vector<ProcessResult> run(int n, const std::string& scenario) {
  ProcessGroup group;
  const std::string port = std::to_string(free_port());
  for (int r = 0; r < n; ++r)
    group.start({kWorker, scenario}, {{"RANK", std::to_string(r)},
                                      {"WORLD_SIZE", std::to_string(n)},
                                      {"LOCAL_RANK", std::to_string(r)},
                                      {"LOCAL_WORLD_SIZE", std::to_string(n)},
                                      {"MASTER_ADDR", "127.0.0.1"},
                                      {"MASTER_PORT", port},
                                      {"KIZUNA_STORE_TIMEOUT", "60"},
                                      {"KIZUNA_TIMEOUT", "60"}});
  return group.wait(120s);
}

std::string describe(const std::vector<ProcessResult>& results) {
  std::string out;
  for (std::size_t r = 0; r < results.size(); ++r)
    out += "--- rank " + std::to_string(r) + " exit " + std::to_string(results[r].exit_code) +
           " signal " + std::to_string(results[r].signal) + (results[r].hung ? " HUNG" : "") + "\n" +
           results[r].output;
  return out;
}

}  // namespace

TEST_CASE("processes: every rank ends with the mean, with and without compression",
          "[ddp][multiproc]") {
  const int n = GENERATE(2, 3, 4);
  const auto results = run(n, "mean");
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.ok());
    CHECK(r.output.find(": ok") != std::string::npos);
  }
}

TEST_CASE("processes: a mismatched registration is a Mismatch on every process", "[ddp][multiproc]") {
  const auto results = run(3, "mismatch");
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.exit_code == 10 + static_cast<int>(kizuna::ErrorCode::Mismatch));
    CHECK(r.output.find("parameter #4 is 'layer2.weight'") != std::string::npos);
    CHECK(r.output.find("on ranks 0, 2") != std::string::npos);
    CHECK(r.output.find("shape [1, ") != std::string::npos);
  }
}
