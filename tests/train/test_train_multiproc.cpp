// kizuna-train as a program: two ranks as processes (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, as kizuna-run sets them) train one epoch on a
// subset of Fashion-MNIST and must reach a stated test accuracy; the
// metrics file, the checkpoint and --resume; usage errors and a missing
// data set; --elastic with a rank killed, and replaced; under kizuna-run,
// rank 0 killed.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "processes.hpp"

using namespace kizuna::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

const std::string kTrain = std::string(KIZUNA_BINARY_DIR) + "/bin/kizuna-train";
const std::string kRun = std::string(KIZUNA_BINARY_DIR) + "/bin/kizuna-run";
const std::string kData = "/usr/share/datasets/fashion-mnist";

std::vector<ProcessResult> run_ranks(int n, const std::vector<std::string>& args) {
  ProcessGroup group;
  const std::string port = std::to_string(free_port());
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> argv{kTrain};
    argv.insert(argv.end(), args.begin(), args.end());
    group.start(argv, {{"RANK", std::to_string(r)},
                       {"WORLD_SIZE", std::to_string(n)},
                       {"LOCAL_RANK", std::to_string(r)},
                       {"LOCAL_WORLD_SIZE", std::to_string(n)},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", port}});
  }
  return group.wait(240s);
}

ProcessResult run_alone(const std::vector<std::string>& args) {
  ProcessGroup group;
  std::vector<std::string> argv{kTrain};
  argv.insert(argv.end(), args.begin(), args.end());
  group.start(argv, {});
  return group.wait(120s)[0];
}

std::string describe(const std::vector<ProcessResult>& results) {
  std::string out;
  for (std::size_t r = 0; r < results.size(); ++r)
    out += "--- rank " + std::to_string(r) + " exit " + std::to_string(results[r].exit_code) + " signal " +
           std::to_string(results[r].signal) + (results[r].hung ? " HUNG" : "") + "\n" + results[r].output;
  return out;
}

double number_after(const std::string& text, const std::string& label) {
  const std::regex re(label + " ([0-9.]+)");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stod(m[1]);
}

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/kizuna-train-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("two ranks learn Fashion-MNIST well above chance in one epoch", "[multiproc][train]") {
  // One epoch on the first 12,000 training images (6,000 per rank, global
  // batch 64), a 128-unit hidden layer, tested on the first 2,000 test
  // images: about 0.82 here; we require 0.75 (chance is 0.10).
  INFO("Fashion-MNIST must be installed: apt-get install dataset-fashion-mnist (scripts/deps.sh does)");
  REQUIRE(fs::exists(kData + "/train-images-idx3-ubyte.gz"));
  TempDir dir;
  const std::string metrics = (dir.path / "metrics.csv").string();
  const std::string checkpoint = (dir.path / "run.ckpt").string();
  const std::vector<std::string> args{"--train-subset", "12000", "--test-subset", "2000", "--hidden", "128",
                                      "--epochs", "1", "--batch-size", "32", "--lr", "0.1",
                                      "--metrics", metrics, "--checkpoint", checkpoint};
  const auto results = run_ranks(2, args);
  INFO(describe(results));
  REQUIRE(results[0].ok());
  REQUIRE(results[1].ok());
  const double accuracy = number_after(results[0].output, "final test accuracy");
  CHECK(accuracy >= 0.75);
  CHECK_THAT(results[0].output, Catch::Contains("2 ranks (RANK/WORLD_SIZE)"));
  // Rank 1 trains silently; rank 0 reports.
  CHECK(results[1].output.find("test accuracy") == std::string::npos);

  std::ifstream csv(metrics);
  std::string header, line;
  std::getline(csv, header);
  CHECK(header == "step,epoch,train_loss,test_loss,test_accuracy,samples_per_s,comm_wait_s,lr");
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  CHECK(rows >= 10);
  CHECK(fs::exists(checkpoint));

  SECTION("--resume from the finished run's checkpoint has nothing left to do") {
    std::vector<std::string> again = args;
    again.push_back("--resume");
    const auto second = run_ranks(2, again);
    INFO(describe(second));
    REQUIRE(second[0].ok());
    CHECK_THAT(second[0].output, Catch::Contains("resumed from") && Catch::Contains("nothing to do"));
    CHECK(number_after(second[0].output, "final test accuracy") == accuracy);
    // The metrics are the first run's, kept.
    std::ifstream kept(metrics);
    int kept_rows = -1;  // less the header
    while (std::getline(kept, line)) ++kept_rows;
    CHECK(kept_rows == rows);
  }
}

TEST_CASE("kizuna-train --resume appends to its metrics, and refuses another run's file", "[multiproc][train]") {
  TempDir dir;
  const std::string metrics = (dir.path / "metrics.csv").string();
  const std::string checkpoint = (dir.path / "run.ckpt").string();
  // Epochs of a second or so, so that the run can be killed after the
  // first checkpoint and before its end.
  const std::vector<std::string> args{"--data", "random", "--random-samples", "2000000", "--hidden", "16",
                                      "--batch-size", "256", "--epochs", "3", "--metrics", metrics,
                                      "--checkpoint", checkpoint, "--resume", "--measure-overlap", "0"};
  auto steps_in = [&] {
    std::ifstream csv(metrics);
    std::string line;
    std::getline(csv, line);
    std::vector<long long> steps;
    while (std::getline(csv, line))
      if (!line.empty()) steps.push_back(std::stoll(line.substr(0, line.find(','))));
    return steps;
  };
  {
    ProcessGroup group;
    const std::string port = std::to_string(free_port());
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> argv{kTrain};
      argv.insert(argv.end(), args.begin(), args.end());
      group.start(argv, {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(r)},
                         {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}});
    }
    const auto give_up = std::chrono::steady_clock::now() + 120s;
    while (!fs::exists(checkpoint) && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(fs::exists(checkpoint));
    group.kill(0, SIGKILL);
    group.kill(1, SIGKILL);
    const auto killed = group.wait(30s);
    INFO(describe(killed));
    if (killed[0].ok()) {
      WARN("the run finished before it could be killed: nothing to resume");
      return;
    }
  }
  const auto before = steps_in();
  REQUIRE_FALSE(before.empty());
  const auto resumed = run_ranks(2, args);
  INFO(describe(resumed));
  REQUIRE(resumed[0].ok());
  CHECK_THAT(resumed[0].output, Catch::Contains("resumed from"));
  const long long from = static_cast<long long>(number_after(resumed[0].output, R"(\(step)"));
  const auto after = steps_in();
  // The first run's rows up to the checkpoint, then the resumed run's: one
  // history, in order, none of the killed run's later rows left.
  REQUIRE(after.size() > 2);
  std::size_t kept = 0;
  while (kept < before.size() && before[kept] <= from) ++kept;
  REQUIRE(kept > 0);
  CHECK(std::equal(before.begin(), before.begin() + static_cast<std::ptrdiff_t>(kept), after.begin()));
  CHECK(std::is_sorted(after.begin(), after.end()));
  CHECK(after.back() > before.back());
  // A file that is not this run's metrics is refused, and left as it was.
  { std::ofstream other(metrics); other << "time,value\n1,2\n"; }
  const auto third = run_ranks(2, args);
  INFO(describe(third));
  CHECK_FALSE(third[0].ok());
  CHECK_THAT(third[0].output, Catch::Contains("is not a kizuna-train metrics file"));
  std::ifstream left(metrics);
  std::string first_line;
  std::getline(left, first_line);
  CHECK(first_line == "time,value");
}

TEST_CASE("kizuna-train on the random regression set with bf16 and compression", "[multiproc][train]") {
  const auto results = run_ranks(2, {"--data", "random", "--hidden", "32", "--epochs", "2", "--batch-size", "16",
                                     "--precision", "bf16", "--compress", "bf16", "--optimizer", "adamw"});
  INFO(describe(results));
  REQUIRE(results[0].ok());
  REQUIRE(results[1].ok());
  const double mse = number_after(results[0].output, R"(final test loss \(mse\))");
  // Independent standard-normal targets: the best possible MSE is about 1.
  CHECK(mse > 0.5);
  CHECK(mse < 2.0);
}

TEST_CASE("kizuna-train reports bad usage and a missing data set", "[train]") {
  const ProcessResult bad_flag = run_alone({"--epochs", "0"});
  CHECK(bad_flag.exit_code == 2);
  CHECK_THAT(bad_flag.output, Catch::Contains("--epochs") && Catch::Contains("usage: kizuna-train"));
  const ProcessResult bad_value = run_alone({"--precision", "fp8"});
  CHECK(bad_value.exit_code == 2);
  CHECK_THAT(bad_value.output, Catch::Contains("fp32, bf16 or fp16"));
  const ProcessResult unknown = run_alone({"--no-such-flag"});
  CHECK(unknown.exit_code == 2);
  const ProcessResult no_data = run_alone({"--data-dir", "/nonexistent/fashion"});
  CHECK(no_data.exit_code == 1);
  CHECK_THAT(no_data.output, Catch::Contains("dataset-fashion-mnist"));
  // Under a launcher, rank 0 loads and the others hear of its failure.
  const auto ranks = run_ranks(2, {"--data-dir", "/nonexistent/fashion"});
  INFO(describe(ranks));
  CHECK(ranks[0].exit_code == 1);
  CHECK(ranks[1].exit_code == 1);
  CHECK_THAT(ranks[1].output, Catch::Contains("rank 0 could not load") && Catch::Contains("dataset-fashion-mnist"));
  const ProcessResult help = run_alone({"--help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::Contains("--bucket-mb") && Catch::Contains("--precision"));
}

namespace {

struct ElasticRun {
  std::vector<ProcessResult> results;  // the 4 ranks, then the replacement if any
  double accuracy = -1;                // rank 0's final test accuracy
  std::string log;
};

// 4 ranks of kizuna-train --elastic on 24,000 Fashion-MNIST images, 3
// epochs (about 2 s here). With `kill`, rank 2 is SIGKILLed 100 ms after
// rank 0 has reported its first 20 steps; with
// `replace` too, a process with KIZUNA_JOIN=1 is started in its place, as
// kizuna-run --elastic does.
ElasticRun run_elastic(bool kill, bool replace) {
  const std::vector<std::string> args{kTrain, "--train-subset", "24000", "--test-subset", "2000", "--epochs", "3",
                                      "--batch-size", "32", "--lr", "0.1", "--seed", "7", "--log-every", "20",
                                      "--measure-overlap", "0", "--elastic"};
  ProcessGroup group;
  const std::string port = std::to_string(free_port());
  auto env = [&](int r) {
    return ProcessGroup::Env{{"RANK", std::to_string(r)},       {"WORLD_SIZE", "4"},
                             {"LOCAL_RANK", std::to_string(r)}, {"LOCAL_WORLD_SIZE", "4"},
                             {"MASTER_ADDR", "127.0.0.1"},     {"MASTER_PORT", port}};
  };
  for (int r = 0; r < 4; ++r) group.start(args, env(r));
  if (kill) {
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    while (group.output(0).find("epoch 1/3 step") == std::string::npos && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
    std::this_thread::sleep_for(100ms);
    group.kill(2, SIGKILL);
    if (replace) {
      auto e = env(2);
      e["KIZUNA_JOIN"] = "1";
      group.start(args, e);
    }
  }
  ElasticRun run;
  run.results = group.wait(240s);
  run.accuracy = number_after(run.results[0].output, "final test accuracy");
  run.log = describe(run.results);
  return run;
}

}  // namespace

TEST_CASE("kizuna-train --elastic: a rank killed mid-training, the others finish as accurate as an undisturbed run",
          "[multiproc][train][elastic]") {
  REQUIRE(fs::exists(kData + "/train-images-idx3-ubyte.gz"));
  const ElasticRun calm = run_elastic(false, false);
  INFO(calm.log);
  for (int r = 0; r < 4; ++r) REQUIRE(calm.results[r].ok());
  const ElasticRun shrunk = run_elastic(true, false);
  const ElasticRun replaced = run_elastic(true, true);
  std::printf("ELASTIC | undisturbed %.4f | rank 2 killed, 3 go on %.4f | rank 2 killed and replaced %.4f |\n",
              calm.accuracy, shrunk.accuracy, replaced.accuracy);
  for (const ElasticRun* run : {&shrunk, &replaced}) {
    INFO(run->log);
    // The kill must land in training, not after it.
    REQUIRE(run->results[2].signal == SIGKILL);
    CHECK(run->results[2].signal == SIGKILL);
    for (int r : {0, 1, 3}) CHECK(run->results[r].ok());
    CHECK_THAT(run->results[0].output, Catch::Contains("shrank from 4 to 3 ranks"));
    // The same run but for a rank lost and the global batch smaller for a
    // while. On this small run (3 epochs of 24,000 images, 2,000 tested)
    // where the kill lands moves the accuracy by up to half a point either
    // way; a point is the bound here. docs/trainer.md#elastic-training has
    // the full-size comparison against the issue's half point.
    CHECK(std::abs(run->accuracy - calm.accuracy) <= 0.01);
  }
  INFO(replaced.log);
  REQUIRE(replaced.results.size() == 5);
  CHECK(replaced.results[4].ok());
  CHECK_THAT(replaced.results[0].output, Catch::Contains("grew from 3 to 4 ranks"));
}

namespace {

// The child of `parent` whose environment holds `entry` (e.g. "RANK=0"), or 0.
pid_t child_with(pid_t parent, const std::string& entry) {
  for (const auto& d : fs::directory_iterator("/proc")) {
    const std::string name = d.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(d.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream env(d.path() / "environ");
    for (std::string var; std::getline(env, var, '\0');)
      if (var == entry) return static_cast<pid_t>(std::stol(name));
  }
  return 0;
}

}  // namespace

TEST_CASE("kizuna-train --elastic under kizuna-run: rank 0 killed, rank 1 reports on and keeps the metrics",
          "[multiproc][train][elastic]") {
  REQUIRE(fs::exists(kData + "/train-images-idx3-ubyte.gz"));
  // kizuna-run hosts the store, so rank 0 may die like any other.
  const fs::path metrics = fs::temp_directory_path() / ("kizuna-elastic-" + std::to_string(::getpid()) + ".csv");
  ProcessGroup job;
  job.start({kRun, "--nproc-per-node", "4", "--elastic", "2:4", "--", kTrain, "--train-subset", "24000",
             "--test-subset", "2000", "--epochs", "3", "--batch-size", "32", "--lr", "0.1", "--seed", "7",
             "--log-every", "20", "--measure-overlap", "0", "--elastic", "--metrics", metrics.string()},
            {});
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (job.output(0).find("[0] epoch 1/3 step") == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(100ms);
  const pid_t rank0 = child_with(job.pid(0), "RANK=0");
  REQUIRE(rank0 > 0);
  ::kill(rank0, SIGKILL);
  const std::vector<ProcessResult> r = job.wait(240s);
  const std::string out = r[0].output;
  INFO(out);
  REQUIRE(r[0].ok());
  CHECK_THAT(out, Catch::Contains("kizuna-run: rank 0 (local rank 0") && Catch::Contains("the other 3 go on"));
  CHECK_THAT(out, Catch::Contains("[1] kizuna-train: lost a rank; shrank from 4 to 3 ranks"));
  CHECK_THAT(out, Catch::Contains("[1] epoch 3.00: test loss"));
  CHECK_THAT(out, Catch::Contains("[1] kizuna-train: final test accuracy 0.8"));
  // One history: rank 0's rows, then rank 1's from where it took over, in
  // step order, with the 3 evaluations.
  std::ifstream in(metrics);
  std::string line;
  std::getline(in, line);
  CHECK(line.rfind("step,epoch,", 0) == 0);
  long long previous = -1;
  int rows = 0, evaluations = 0;
  while (std::getline(in, line)) {
    const long long step = std::stoll(line.substr(0, line.find(',')));
    CHECK(step >= previous);
    previous = step;
    ++rows;
    // test rows: step,epoch,,test_loss,test_accuracy,...
    const std::size_t c2 = line.find(',', line.find(',') + 1);
    if (line.compare(c2, 2, ",,") == 0) ++evaluations;
  }
  CHECK(rows > 20);
  CHECK(evaluations == 3);
  fs::remove(metrics);
}
