// Ranks as processes over loopback TCP: correctness, the C ABI, a rank
// SIGKILLed mid all-reduce, mismatched calls under KIZUNA_CHECK=1, and two
// split groups running different collectives at once. (A stopped rank, and
// kills of every collective x algorithm x transport: tests/faults.)
#include <catch2/catch.hpp>

#include <kizuna/error.hpp>
#include <netinet/in.h>
#include <sys/socket.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "processes.hpp"

using namespace kizuna::test;
using namespace std::chrono_literals;

namespace {

const std::string kWorker = std::string(KIZUNA_BINARY_DIR) + "/tests/multiproc/kizuna-test-worker";
const std::string kCWorker = std::string(KIZUNA_BINARY_DIR) + "/tests/multiproc/kizuna-test-c-worker";

void launch(ProcessGroup& group, int n, const std::vector<std::string>& argv,
            const ProcessGroup::Env& extra = {}) {
  const std::string port = std::to_string(free_port());
  for (int r = 0; r < n; ++r) {
    ProcessGroup::Env env{{"RANK", std::to_string(r)},
                          {"WORLD_SIZE", std::to_string(n)},
                          {"LOCAL_RANK", std::to_string(r)},
                          {"LOCAL_WORLD_SIZE", std::to_string(n)},
                          {"MASTER_ADDR", "127.0.0.1"},
                          {"MASTER_PORT", port},
                          {"KIZUNA_STORE_TIMEOUT", "60"}};
    for (const auto& [k, v] : extra) env[k] = v;
    group.start(argv, env);
  }
}

std::string describe(const std::vector<ProcessResult>& results) {
  std::string out;
  for (std::size_t r = 0; r < results.size(); ++r)
    out += "--- rank " + std::to_string(r) + " exit " + std::to_string(results[r].exit_code) +
           " signal " + std::to_string(results[r].signal) + (results[r].hung ? " HUNG" : "") + "\n" +
           results[r].output;
  return out;
}

int code_exit(kizuna::ErrorCode c) { return 10 + static_cast<int>(c); }

}  // namespace

TEST_CASE("processes run all-reduce and all-gather correctly with every algorithm", "[multiproc]") {
  const int n = GENERATE(2, 3, 4);
  const std::string transport = GENERATE("tcp", "shm");
  CAPTURE(n, transport);
  ProcessGroup group;
  launch(group, n, {kWorker, "check"}, {{"KIZUNA_TRANSPORT", transport}});
  const auto results = group.wait(240s);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("processes run staged device collectives on an emulated device", "[multiproc]") {
  ProcessGroup group;
  launch(group, 3, {kWorker, "staged"});
  const auto results = group.wait(240s);
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.ok());
    CHECK(r.output.find("staged on emulated device (host memory): ok") != std::string::npos);
  }
}

TEST_CASE("a C program runs across 4 processes through kizuna.h", "[multiproc]") {
  ProcessGroup group;
  launch(group, 4, {kCWorker});
  const auto results = group.wait(120s);
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.ok());
    CHECK(r.output.find(": ok") != std::string::npos);
  }
}

TEST_CASE("a rank SIGKILLed mid all-reduce: every survivor gets PeerLost naming it", "[multiproc]") {
  const int victim = GENERATE(2, 0);  // rank 0 also hosts the store
  const std::string transport = GENERATE("tcp", "shm");
  CAPTURE(victim, transport);
  ProcessGroup group;
  launch(group, 4, {kWorker, "loop"}, {{"KIZUNA_TIMEOUT", "60"}, {"KIZUNA_TRANSPORT", transport}});
  std::this_thread::sleep_for(1500ms);  // let them connect and start looping
  const auto killed_at = std::chrono::steady_clock::now();
  group.kill(victim, SIGKILL);
  const auto results = group.wait(50s);  // well below the 60 s collective deadline
  INFO(describe(results));
  const auto detected = std::chrono::steady_clock::now() - killed_at;
  WARN("survivors exited " << std::chrono::duration_cast<std::chrono::milliseconds>(detected).count()
                           << " ms after the kill");
  for (int r = 0; r < 4; ++r) {
    if (r == victim) {
      CHECK(results[r].signal == SIGKILL);
      continue;
    }
    CAPTURE(r);
    CHECK_FALSE(results[r].hung);
    CHECK(results[r].exit_code == code_exit(kizuna::ErrorCode::PeerLost));
    CHECK(results[r].output.find("lost rank " + std::to_string(victim)) != std::string::npos);
  }
  // the job's shared memory was unlinked at set-up: nothing is left behind
  // (segments are named /kizuna-<pid>-<communicator>-<rank>)
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    for (int r = 0; r < 4; ++r)
      CHECK(entry.path().filename().string().rfind("kizuna-" + std::to_string(group.pid(r)) + "-", 0) != 0);
}

TEST_CASE("KIZUNA_CHECK=1: a mismatched count is a Mismatch on every process", "[multiproc]") {
  ProcessGroup group;
  launch(group, 3, {kWorker, "mismatch"}, {{"KIZUNA_CHECK", "1"}, {"KIZUNA_TIMEOUT", "60"}});
  const auto results = group.wait(60s);
  INFO(describe(results));
  for (const auto& r : results) {
    CHECK(r.exit_code == code_exit(kizuna::ErrorCode::Mismatch));
    CHECK(r.output.find("rank 1 called all_reduce(count 999, float32, sum) #2") != std::string::npos);
    CHECK(r.output.find("ranks 0, 2 called all_reduce(count 1000, float32, sum) #2") != std::string::npos);
  }
}

TEST_CASE("split groups run different collectives concurrently", "[multiproc]") {
  ProcessGroup group;
  launch(group, 4, {kWorker, "split"});
  const auto results = group.wait(120s);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("KIZUNA_DUMP_ON_SIGNAL: SIGUSR1 prints a live rank's recent collectives", "[multiproc]") {
  ProcessGroup group;
  launch(group, 3, {kWorker, "loop"}, {{"KIZUNA_TIMEOUT", "60"}, {"KIZUNA_DUMP_ON_SIGNAL", "1"}});
  std::this_thread::sleep_for(1500ms);
  group.kill(1, SIGSTOP);  // the others soon wait for it
  std::this_thread::sleep_for(500ms);
  group.kill(0, SIGUSR1);
  std::this_thread::sleep_for(500ms);
  for (int r = 0; r < 3; ++r) group.kill(r, SIGKILL);
  const auto results = group.wait(30s);
  INFO(describe(results));
  CHECK(results[0].output.find("recent calls, oldest first") != std::string::npos);
  CHECK(results[0].output.find("all_reduce float32 x1048576") != std::string::npos);
  CHECK(results[0].output.find(": done in ") != std::string::npos);
  CHECK(results[0].output.find(": running, step ") != std::string::npos);
}
