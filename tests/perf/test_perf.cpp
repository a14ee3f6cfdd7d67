// kizuna-perf: the tool end to end (ranks as threads) for every collective,
// its JSON and CSV files against its table, its usage errors, and the
// pieces underneath: the closed-form checker (including a corrupted
// buffer, which must be reported), the sizing and bus-bandwidth factors,
// the size sweep and the table's number formats.
#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <kizuna/types.hpp>

#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/reduce.hpp"
#include "perf/collective.hpp"
#include "perf/data.hpp"
#include "perf/report.hpp"
#include "processes.hpp"

using namespace kizuna;
using namespace kizuna::perf;
using namespace std::chrono_literals;

namespace {

const std::string kPerf = std::string(KIZUNA_BINARY_DIR) + "/bin/kizuna-perf";

test::ProcessResult run_perf(const std::vector<std::string>& args) {
  test::ProcessGroup group;
  std::vector<std::string> argv{kPerf};
  argv.insert(argv.end(), args.begin(), args.end());
  group.start(argv, {{"KIZUNA_STORE_TIMEOUT", "60"}, {"KIZUNA_TIMEOUT", "60"}});
  return group.wait(90s).at(0);
}

// kizuna-perf `args` as 2 processes, ranks of one job on this host, with
// `extra` environment variables: their results, rank 0's first, each
// required to have succeeded.
std::vector<test::ProcessResult> run_perf_2_processes(const std::vector<std::string>& args,
                                                      const test::ProcessGroup::Env& extra,
                                                      std::chrono::seconds limit) {
  const std::string port = std::to_string(test::free_port());
  test::ProcessGroup group;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv{kPerf};
    argv.insert(argv.end(), args.begin(), args.end());
    test::ProcessGroup::Env env{{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                                {"MASTER_PORT", port}, {"KIZUNA_STORE_TIMEOUT", "60"}, {"KIZUNA_TIMEOUT", "60"}};
    env.insert(extra.begin(), extra.end());
    group.start(argv, env);
  }
  const auto results = group.wait(limit);
  INFO(results.at(0).output << results.at(1).output);
  REQUIRE(results.at(0).ok());
  REQUIRE(results.at(1).ok());
  return results;
}

std::vector<std::string> split(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// The table's data rows: lines that start with a number, split into words.
std::vector<std::vector<std::string>> table_rows(const std::string& output) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    const auto words = split(line);
    // A row starts with its size in bytes, all digits (a log line's date
    // does not qualify), and has both halves' 13 columns.
    if (words.size() == 13 &&
        std::all_of(words[0].begin(), words[0].end(), [](unsigned char c) { return std::isdigit(c); }))
      rows.push_back(words);
  }
  return rows;
}

bool has_line_with(const std::string& output, const std::vector<std::string>& words) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    auto w = split(line);
    if (!w.empty() && w[0] == "#") w.erase(w.begin());
    if (w == words) return true;
  }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string temp_path(const std::string& name) {
  return "/tmp/kizuna-perf-test-" + std::to_string(::getpid()) + "-" + name;
}

// The table prints 2 decimals, or fewer digits for long times; a value read
// back must be within that rounding of the file's.
bool close_to(const std::string& printed, double exact) {
  const double v = std::stod(printed);
  const double tolerance = exact >= 10000 ? 0.51 : exact >= 100 ? 0.051 : 0.0051;
  return std::fabs(v - exact) <= tolerance + 1e-9 * std::fabs(exact);
}

}  // namespace

TEST_CASE("kizuna-perf checks every collective as 2 and 4 threads", "[perf]") {
  const std::string collective =
      GENERATE("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce");
  const int threads = GENERATE(2, 4);
  const std::string json = temp_path(collective + std::to_string(threads) + ".json");
  const std::string csv = temp_path(collective + std::to_string(threads) + ".csv");
  const test::ProcessResult r = run_perf({"--threads", std::to_string(threads), "--collective", collective,
                                    "-b", "8", "-e", "64K", "-f", "4", "-n", "2", "-w", "1", "-r",
                                    std::to_string(threads - 1), "--json", json, "--csv", csv});
  INFO(r.output);
  REQUIRE(r.ok());

  // nccl-tests' column headers, and its closing lines.
  CHECK(has_line_with(r.output, {"size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                                 "#wrong", "time", "algbw", "busbw", "#wrong"}));
  CHECK(has_line_with(r.output, {"(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "(us)", "(GB/s)", "(GB/s)"}));
  CHECK(has_line_with(r.output, {"Out", "of", "bounds", "values", ":", "0", "OK"}));
  CHECK(r.output.find("# Avg bus bandwidth    : ") != std::string::npos);

  // One row per size of the sweep: 8, 32, 128, 512, 2K, 8K, 32K bytes.
  const auto rows = table_rows(r.output);
  const std::vector<std::size_t> sizes{8, 32, 128, 512, 2048, 8192, 32768};
  REQUIRE(rows.size() == sizes.size());
  const Collective c = *parse_collective(collective);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& w = rows[i];
    INFO("row " << i);
    REQUIRE(w.size() == 13);
    const Sizing s = size_for(c, sizes[i], 4, threads);
    CHECK(std::stoull(w[0]) == s.bytes);
    CHECK(std::stoull(w[1]) == s.count);
    CHECK(w[2] == "float");
    CHECK(w[3] == (has_op(c) ? "sum" : "none"));
    CHECK(std::stoi(w[4]) == (has_root(c) ? threads - 1 : -1));
    CHECK(w[8] == "0");   // out-of-place #wrong
    CHECK(w[12] == "0");  // in-place #wrong
    // busbw = algbw x factor (both rounded to 2 decimals when printed).
    CHECK(std::fabs(std::stod(w[7]) - std::stod(w[6]) * bus_factor(c, threads)) <= 0.02);
  }

  // The JSON file says what the table says.
  const nlohmann::json doc = nlohmann::json::parse(read_file(json));
  CHECK(doc.at("tool").get<std::string>() == "kizuna-perf");
  CHECK(doc.at("collective").get<std::string>() == collective);
  CHECK(doc.at("world_size").get<double>() == threads);
  CHECK(doc.at("wrong").get<double>() == 0);
  REQUIRE(doc.at("results").size() == rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& res = doc.at("results").at(i);
    const auto& w = rows[i];
    INFO("row " << i);
    CHECK(res.at("size").get<double>() == std::stod(w[0]));
    CHECK(res.at("count").get<double>() == std::stod(w[1]));
    CHECK(res.at("type").get<std::string>() == w[2]);
    CHECK(res.at("redop").get<std::string>() == w[3]);
    CHECK(res.at("root").get<double>() == std::stod(w[4]));
    CHECK(close_to(w[5], res.at("out_of_place").at("time_us").get<double>()));
    CHECK(close_to(w[6], res.at("out_of_place").at("algbw").get<double>()));
    CHECK(close_to(w[7], res.at("out_of_place").at("busbw").get<double>()));
    CHECK(res.at("out_of_place").at("wrong").get<double>() == 0);
    CHECK(close_to(w[9], res.at("in_place").at("time_us").get<double>()));
    CHECK(close_to(w[10], res.at("in_place").at("algbw").get<double>()));
    CHECK(close_to(w[11], res.at("in_place").at("busbw").get<double>()));
    CHECK(res.at("in_place").at("wrong").get<double>() == 0);
  }

  // The CSV file: a header and one line per row and placement, same figures.
  std::istringstream lines(read_file(csv));
  std::string header;
  std::getline(lines, header);
  CHECK(header ==
        "tool,collective,algorithm,transport,world_size,size,count,type,redop,root,placement,time_us,"
        "algbw_GBps,busbw_GBps,wrong");
  std::vector<std::vector<std::string>> records;
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::stringstream fs(line);
    for (std::string f; std::getline(fs, f, ',');) fields.push_back(f);
    records.push_back(fields);
  }
  REQUIRE(records.size() == 2 * rows.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& f = records[i];
    const auto& w = rows[i / 2];
    const bool in_place = i % 2 == 1;
    INFO("csv line " << i + 2);
    REQUIRE(f.size() == 15);
    CHECK(f[1] == collective);
    CHECK(f[4] == std::to_string(threads));
    CHECK(f[5] == w[0]);
    CHECK(f[6] == w[1]);
    CHECK(f[10] == (in_place ? "in_place" : "out_of_place"));
    CHECK(close_to(w[in_place ? 9 : 5], std::stod(f[11])));
    CHECK(close_to(w[in_place ? 11 : 7], std::stod(f[13])));
    CHECK(f[14] == "0");
  }
  ::unlink(json.c_str());
  ::unlink(csv.c_str());
}

// Where each word of `line` ends (one past its last character).
std::vector<std::size_t> word_ends(const std::string& line) {
  std::vector<std::size_t> ends;
  for (std::size_t i = 0; i < line.size(); ++i)
    if (line[i] != ' ' && (i + 1 == line.size() || line[i + 1] == ' ')) ends.push_back(i + 1);
  return ends;
}

TEST_CASE("kizuna-perf's column headers sit over their columns, and -c N checks N times", "[perf]") {
  const test::ProcessResult r = run_perf({"--threads", "2", "-b", "8", "-e", "1K", "-f", "4", "-n", "1", "-w", "0",
                                          "-c", "3"});
  INFO(r.output);
  REQUIRE(r.ok());
  CHECK(r.output.find(" validation: 3 ") != std::string::npos);
  std::istringstream in(r.output);
  std::string header, row;
  for (std::string line; std::getline(in, line);) {
    if (header.empty() && line.find("#wrong") != std::string::npos) header = line;
    if (row.empty() && table_rows(line).size() == 1) row = line;
  }
  REQUIRE(!header.empty());
  REQUIRE(!row.empty());
  std::vector<std::size_t> names = word_ends(header);
  names.erase(names.begin());  // the leading "#"
  CHECK(names == word_ends(row));
}

TEST_CASE("kizuna-perf: a results file that cannot be written fails every rank before the sweep", "[perf]") {
  const auto start = std::chrono::steady_clock::now();
  const test::ProcessResult r =
      run_perf({"--threads", "2", "-b", "64M", "-e", "64M", "-n", "100", "--csv", "/nonexistent-dir/results.csv"});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("cannot write /nonexistent-dir/results.csv") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 30s);
}

TEST_CASE("kizuna-perf takes nccl-tests' -t 1 -g 1 under a launcher as one rank per process, and refuses -t 2 there",
          "[perf]") {
  const std::string port = std::to_string(test::free_port());
  auto env_of = [&](int rank) {
    return test::ProcessGroup::Env{{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                     {"MASTER_PORT", port}, {"KIZUNA_STORE_TIMEOUT", "60"}, {"KIZUNA_TIMEOUT", "60"}};
  };
  {
    test::ProcessGroup group;
    for (int r = 0; r < 2; ++r)
      group.start({kPerf, "-t", "1", "-g", "1", "-b", "8", "-e", "64", "-f", "8", "-n", "2", "-w", "1"}, env_of(r));
    const auto results = group.wait(90s);
    INFO(results.at(0).output << results.at(1).output);
    REQUIRE(results.at(0).ok());
    REQUIRE(results.at(1).ok());
    CHECK(results.at(0).output.find("all_reduce, 2 ranks") != std::string::npos);
  }
  test::ProcessGroup group;
  group.start({kPerf, "-t", "2", "-b", "8", "-e", "8"}, env_of(0));
  const test::ProcessResult r = group.wait(90s).at(0);
  INFO(r.output);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("drop -t/--threads") != std::string::npos);
}

TEST_CASE("kizuna-perf checks every type and operator, 3 threads, ring and tree", "[perf]") {
  const std::string algo = GENERATE("ring", "tree");
  const test::ProcessResult r = run_perf({"--threads", "3", "--algo", algo, "-d", "all", "-o", "all", "-b", "4",
                                    "-e", "4K", "-f", "32", "-n", "1", "-w", "0"});
  INFO(r.output);
  REQUIRE(r.ok());
  const auto rows = table_rows(r.output);
  // 10 types x 5 operators, less avg for the 6 integer types; 3 sizes each.
  CHECK(rows.size() == (10 * 5 - 6) * 3);
  for (const auto& w : rows) {
    CHECK(w[8] == "0");
    CHECK(w[12] == "0");
  }
}

TEST_CASE("kizuna-perf -R 2 checks all-reduces on symmetric memory, every type and operator, as processes and threads",
          "[perf]") {
  // KIZUNA_SYMMETRIC_FROM=0: every size takes symmetric memory's own path.
  const std::vector<std::string> sweep{"-R", "2", "--transport", "shm", "-d", "all", "-o", "all", "-b", "4",
                                       "-e", "1M", "-f", "64", "-n", "1", "-w", "1"};
  auto check_rows = [](const std::string& output) {
    const auto rows = table_rows(output);
    // 10 types x 5 operators, less avg for the 6 integer types; 4 sizes each.
    CHECK(rows.size() == (10 * 5 - 6) * 4);
    for (const auto& w : rows) {
      CHECK(w[8] == "0");
      CHECK(w[12] == "0");
    }
    CHECK(output.find("symmetric buffers") != std::string::npos);
  };
  {
    const std::string output = run_perf_2_processes(sweep, {{"KIZUNA_SYMMETRIC_FROM", "0"}}, 90s).at(0).output;
    INFO(output);
    check_rows(output);
  }
  std::vector<std::string> threads{"--threads", "3"};
  threads.insert(threads.end(), sweep.begin(), sweep.end());
  test::ProcessGroup group;
  std::vector<std::string> argv{kPerf};
  argv.insert(argv.end(), threads.begin(), threads.end());
  group.start(argv, {{"KIZUNA_STORE_TIMEOUT", "60"}, {"KIZUNA_TIMEOUT", "60"}, {"KIZUNA_SYMMETRIC_FROM", "0"}});
  const test::ProcessResult r = group.wait(90s).at(0);
  INFO(r.output);
  REQUIRE(r.ok());
  check_rows(r.output);
}

TEST_CASE("kizuna-perf checks staged all-reduces of private buffers, every type and operator, as processes", "[perf]") {
  // KIZUNA_STAGED_FROM=0: every size above the mailboxes' takes the staged
  // path; 4 MiB is many rounds of the staging memory.
  const std::vector<std::string> sweep{"--transport", "shm", "-d", "all", "-o", "all", "-b", "4",
                                       "-e", "4M", "-f", "32", "-n", "1", "-w", "1"};
  const std::string output = run_perf_2_processes(sweep, {{"KIZUNA_STAGED_FROM", "0"}}, 120s).at(0).output;
  INFO(output);
  const auto rows = table_rows(output);
  // 10 types x 5 operators, less avg for the 6 integer types; 5 sizes each.
  CHECK(rows.size() == (10 * 5 - 6) * 5);
  for (const auto& w : rows) {
    CHECK(w[8] == "0");
    CHECK(w[12] == "0");
  }
}

TEST_CASE("kizuna-perf --help and usage errors", "[perf]") {
  const test::ProcessResult help = run_perf({"--help"});
  CHECK(help.exit_code == 0);
  for (const char* flag : {"-b", "-e", "-f", "-i", "-n", "-w", "-c", "-o", "-d", "-a", "--algo",
                           "--transport", "--collective", "--root", "--json", "--csv", "--threads", "--device", "-R"})
    CHECK(help.output.find(flag) != std::string::npos);

  const std::vector<std::vector<std::string>> bad = {
      {"--bogus"},
      {"-b"},
      {"-b", "12X"},
      {"-b", "8", "-e", "4"},
      {"--collective", "all_to_all"},
      {"--algo", "butterfly"},
      {"--transport", "udp"},
      {"--device", "tpu"},
      {"-o", "avg", "-d", "int32"},
      {"-o", "xor"},
      {"-d", "complex64"},
      {"-a", "7"},
      {"-c", "-1"},
      {"-g", "2"},
      {"-R", "1"},
      {"--threads", "0"},
      {"-n", "0"},
      {"stray"},
      {"--threads", "2", "--collective", "broadcast", "--root", "2"},
      {"--versus", "a.txt", "--calibrate", "b.txt"},
      {"--versus", "a.txt", "--algo", "ring"},
      {"--versus", "a.txt", "--collective", "broadcast"},
      {"--rounds", "0"},
      {"--placement-wait", "0"},
      {"--placement-wait", "60s", "--versus", "a.txt"},
  };
  for (const auto& args : bad) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    INFO("kizuna-perf " << joined);
    const test::ProcessResult r = run_perf(args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("kizuna-perf: ") != std::string::npos);
  }
}

TEST_CASE("kizuna-perf --calibrate P --versus P races auto against every forced way, each result checked",
          "[perf]") {
  const std::string profile = temp_path("versus-profile.txt");
  const std::string json = temp_path("versus.json");
  const test::ProcessResult r = run_perf({"--threads", "2", "--transport", "shm", "-b", "8", "-e", "64K", "-f", "64",
                                          "--rounds", "2", "--calibrate", profile, "--versus", profile, "--json",
                                          json});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("wrote section world=2") != std::string::npos);
  CHECK(r.output.find("# wrong elements: 0") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(read_file(json));
  CHECK(j["world"] == 2);
  CHECK(j["wrong"] == 0);
  CHECK(j["sizes"] == nlohmann::json::array({8, 512, 32768}));
  const auto& c = j["contenders"];
  for (const char* name : {"auto", "rules", "mailbox", "ring", "tree", "oneshot", "twoshot", "doubling", "staged"}) {
    INFO(name);
    REQUIRE(c.contains(name));
    REQUIRE(c[name].size() == 3);
    for (std::size_t i = 0; i < 3; ++i) {
      if (std::string(name) == "mailbox" && i == 2) {
        CHECK(c[name][i].empty());  // past the mailboxes' 1 KiB
        continue;
      }
      REQUIRE(c[name][i].size() == 2);  // one time per round
      CHECK(c[name][i][0].get<double>() > 0);
    }
  }
  // Where the CPUs were after each round: one verdict a round.
  REQUIRE(j["placement"].size() == 2);
  for (const auto& p : j["placement"]) {
    const std::string where = p;
    CHECK((where == "near" || where == "far" || where == "unknown"));
  }
  // What auto took at each size: a candidate the profile measured within
  // 5% of the fastest there (comm::kPreferWithin: the rules may keep a
  // near tie).
  REQUIRE(j["took"]["auto"].size() == 3);
  REQUIRE(j["took"]["rules"].size() == 3);
  std::istringstream text(read_file(profile));
  std::vector<std::string> columns;
  std::map<std::uint64_t, std::vector<std::string>> rows;
  for (std::string line; std::getline(text, line);) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    std::vector<std::string> rest;
    for (std::string w; words >> w;) rest.push_back(w);
    if (first == "candidates") columns = rest;
    else if (!first.empty() && std::isdigit(static_cast<unsigned char>(first[0]))) rows[std::stoull(first)] = rest;
  }
  for (std::size_t i = 0; i < 3; ++i) {
    const std::uint64_t bytes = j["sizes"][i];
    const std::string took = j["took"]["auto"][i];
    INFO(bytes << " B: auto took " << took);
    REQUIRE(rows.count(bytes) == 1);
    double fastest = 1e300, chosen = -1;
    for (std::size_t k = 0; k < columns.size(); ++k) {
      if (rows[bytes][k] == "-") continue;
      const double us = std::stod(rows[bytes][k]);
      fastest = std::min(fastest, us);
      if (columns[k] == took) chosen = us;
    }
    REQUIRE(chosen > 0);
    CHECK(chosen <= fastest * 1.05 + 1e-9);
  }
  // "rules" must be auto without a profile: a profile in the environment
  // would make it another "auto".
  test::ProcessGroup group;
  group.start({kPerf, "--threads", "2", "-b", "8", "-e", "8", "--versus", profile}, {{"KIZUNA_TUNING_FILE", profile}});
  const test::ProcessResult refused = group.wait(90s).at(0);
  CHECK(refused.exit_code == 1);
  CHECK(refused.output.find("KIZUNA_TUNING_FILE is set") != std::string::npos);
  std::filesystem::remove(profile);
  std::filesystem::remove(json);
}

TEST_CASE("kizuna-perf without a launcher or --threads says how to start it", "[perf]") {
  if (std::getenv("RANK") || std::getenv("OMPI_COMM_WORLD_RANK") || std::getenv("SLURM_PROCID"))
    return;  // this test runs under a launcher itself
  const test::ProcessResult r = run_perf({"-b", "8", "-e", "8"});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("--threads N") != std::string::npos);
}

TEST_CASE("kizuna-perf --device cuda: a checked sweep where there is a GPU, an error naming why where not", "[perf]") {
  // What the NVIDIA driver lists, as kizuna-run counts it.
  bool gpu = false;
  if (std::filesystem::exists("/proc/driver/nvidia/gpus"))
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus")) gpu = true;
  const test::ProcessResult r =
      run_perf({"--threads", "2", "--device", "cuda", "-b", "8", "-e", "1M", "-f", "32", "-n", "2", "-w", "1"});
  INFO(r.output);
  if (!gpu) {
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("--device cuda: ") != std::string::npos);
    const bool says_why = r.output.find("no CUDA device") != std::string::npos ||
                          r.output.find("CUDA cannot be used here") != std::string::npos ||
                          r.output.find("built without CUDA") != std::string::npos;
    CHECK(says_why);
    return;
  }
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.find("device cuda:0") != std::string::npos);
  const auto rows = table_rows(r.output);
  REQUIRE(rows.size() == 4);  // 8 B, 256 B, 8 KiB, 256 KiB
  for (const auto& row : rows) {
    CHECK(row[8] == "0");
    CHECK(row[12] == "0");
  }
}

TEST_CASE("the closed-form reference agrees with kizuna's reductions for every type and op", "[perf]") {
  const int world = GENERATE(1, 2, 3, 8, 64);
  for (int ti = 0; ti < kNumDataTypes; ++ti) {
    for (int oi = 0; oi < kNumReduceOps; ++oi) {
      const auto t = static_cast<DataType>(ti);
      const auto op = static_cast<ReduceOp>(oi);
      if (op == ReduceOp::Avg && !is_floating(t)) {
        CHECK_THROWS(ClosedForm(t, op, world));
        continue;
      }
      INFO(name(t) << " " << name(op) << " world " << world);
      const ClosedForm data(t, op, world);
      const std::size_t n = 1000, e = size_of(t);
      // Fold the inputs with kizuna's own kernel, in reverse rank order.
      std::vector<unsigned char> acc(n * e), in(n * e), want(n * e);
      data.input(world - 1, 0, n, acc.data());
      for (int r = world - 2; r >= 0; --r) {
        data.input(r, 0, n, in.data());
        core::reduce(acc.data(), in.data(), n, t, op);
      }
      if (op == ReduceOp::Avg) core::scale(acc.data(), n, t, world);
      data.reduced(0, n, want.data());
      CHECK(std::memcmp(acc.data(), want.data(), n * e) == 0);
      CHECK(data.wrong_reduced(acc.data(), 0, n) == 0);
    }
  }
}

TEST_CASE("the checker reports a corrupted buffer, element by element", "[perf]") {
  const ClosedForm data(DataType::Float32, ReduceOp::Sum, 4);
  const std::size_t n = 10000;  // several reference blocks
  std::vector<float> buf(n);
  data.reduced(0, n, buf.data());
  REQUIRE(data.wrong_reduced(buf.data(), 0, n) == 0);

  buf[17] += 1.0f;
  buf[5000] = std::nanf("");
  buf[n - 1] = -buf[n - 1] - 1.0f;
  std::string first;
  CHECK(data.wrong_reduced(buf.data(), 0, n, &first) == 3);
  CHECK(first.find("index 17: got 0x") == 0);

  // An offset view: the same elements checked as a slice starting at 5000.
  CHECK(data.wrong_reduced(buf.data() + 5000, 5000, n - 5000) == 2);

  // Inputs: one rank's data in another rank's place is wrong almost everywhere.
  std::vector<std::int32_t> mine(n), theirs(n);
  const ClosedForm ints(DataType::Int32, ReduceOp::Sum, 4);
  ints.input(1, 0, n, mine.data());
  ints.input(2, 0, n, theirs.data());
  CHECK(ints.wrong_input(mine.data(), 1, 0, n) == 0);
  CHECK(ints.wrong_input(theirs.data(), 1, 0, n) > n - 10);
}

TEST_CASE("16-bit float conversions round to nearest even", "[perf]") {
  CHECK(float_to_half(0.0f) == 0x0000);
  CHECK(float_to_half(-0.0f) == 0x8000);
  CHECK(float_to_half(1.0f) == 0x3c00);
  CHECK(float_to_half(-2.0f) == 0xc000);
  CHECK(float_to_half(0.5f) == 0x3800);
  CHECK(float_to_half(65504.0f) == 0x7bff);
  CHECK(float_to_half(65536.0f) == 0x7c00);
  CHECK(float_to_half(1.0f + 1.0f / 2048) == 0x3c00);      // tie, to even
  CHECK(float_to_half(1.0f + 3.0f / 2048) == 0x3c02);      // tie, to even (up)
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(float_to_bfloat16(1.0f) == 0x3f80);
  CHECK(float_to_bfloat16(-4.0f) == 0xc080);
  CHECK(float_to_bfloat16(1.0f + 1.0f / 256) == 0x3f80);  // tie, to even
  CHECK(float_to_bfloat16(1.0f + 3.0f / 256) == 0x3f82);
}

TEST_CASE("sizing and bus bandwidth follow nccl-tests", "[perf]") {
  CHECK(bus_factor(Collective::AllReduce, 4) == Approx(1.5));
  CHECK(bus_factor(Collective::AllGather, 4) == Approx(0.75));
  CHECK(bus_factor(Collective::ReduceScatter, 2) == Approx(0.5));
  CHECK(bus_factor(Collective::Broadcast, 8) == 1.0);
  CHECK(bus_factor(Collective::Reduce, 8) == 1.0);

  Sizing s = size_for(Collective::AllReduce, 1000, 4, 3);
  CHECK((s.count == 250 && s.send_count == 250 && s.recv_count == 250 && s.bytes == 1000));
  // A rank's part: 1000 / 4 / 3 = 83 floats, down to whole 16-byte units.
  s = size_for(Collective::AllGather, 1000, 4, 3);
  CHECK((s.count == 80 && s.send_count == 80 && s.recv_count == 240 && s.bytes == 960));
  s = size_for(Collective::ReduceScatter, 1000, 4, 3);
  CHECK((s.count == 80 && s.send_count == 240 && s.recv_count == 80 && s.bytes == 960));
  s = size_for(Collective::AllGather, 1000, 8, 3);  // 41 doubles, in pairs
  CHECK((s.count == 40 && s.recv_count == 120));
  s = size_for(Collective::ReduceScatter, 8, 4, 2);  // less than a unit each: nothing, as in nccl-tests
  CHECK((s.count == 0 && s.bytes == 0));

  CHECK(size_sweep(8, 64, 2, 0) == std::vector<std::size_t>{8, 16, 32, 64});
  CHECK(size_sweep(8, 100, 2, 0) == std::vector<std::size_t>{8, 16, 32, 64});
  CHECK(size_sweep(10, 40, 1, 10) == std::vector<std::size_t>{10, 20, 30, 40});
  CHECK(size_sweep(0, 64, 2, 0) == std::vector<std::size_t>{0});
  CHECK(size_sweep(64, 8, 2, 0).empty());
  // Near the top of size_t the next size would overflow: the sweep ends.
  const std::size_t top = std::numeric_limits<std::size_t>::max();
  CHECK(size_sweep(3, top, 3, 0).size() == 40);  // 3^40 < 2^64 < 3^41
  CHECK(size_sweep(top - 5, top, 1, 4) == std::vector<std::size_t>{top - 5, top - 1});

  CHECK(format_time(12.345) == "  12.35");
  CHECK(format_time(123.45) == "  123.5");
  CHECK(format_time(12345.6) == "  12346");

  const Measurement m = measurement(1'000'000, 0.001, 1.5, 0);
  CHECK(m.time_us == Approx(1000));
  CHECK(m.algbw == Approx(1.0));
  CHECK(m.busbw == Approx(1.5));
  CHECK(nccl_type_name("float32") == "float");
  CHECK(nccl_type_name("float16") == "half");
  CHECK(nccl_type_name("bfloat16") == "bfloat16");
}
