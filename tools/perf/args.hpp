// perf/args.hpp: the nccl-tests command line, shared by kizuna-perf and the
// comparison harnesses so that all of them take the same flags.
//
// ArgParser is a table of options parsed by CLI11 (common/cli.hpp): each has
// a short form ("-b"), a long form ("--minbytes") or both, and takes a value
// ("-b 8", "-b8", "--minbytes 8", "--minbytes=8"), handed to the option's
// setter; given twice, the last value counts. A setter throws UsageError
// (or any kizuna::Error, turned into one) when its value is bad. parse()
// throws UsageError for an unknown option, a missing value, a stray
// argument or a bad value; the tools print it and exit 2.
//
// add_common_options() registers the flags every tool shares (sizes,
// iterations, warm-up, check, average mode, --json, --csv) on a
// CommonOptions.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/usage.hpp"

namespace CLI {
class App;
}

namespace kizuna::perf {

using tools::UsageError;

class ArgParser {
 public:
  using Setter = std::function<void(std::string_view value)>;

  ArgParser(std::string tool, std::string summary);
  ~ArgParser();

  // An option with a value. `short_name` ("-b") or `long_name`
  // ("--minbytes") may be empty, not both.
  void value(const std::string& short_name, const std::string& long_name, const std::string& metavar,
             const std::string& help, Setter set);

  // Returns false when --help/-h was given (the caller prints usage() and
  // exits 0); throws UsageError otherwise on a bad command line.
  bool parse(int argc, const char* const* argv);

  std::string usage() const;
  const std::string& tool() const { return tool_; }

 private:
  std::string tool_, summary_;
  std::unique_ptr<CLI::App> app_;
};

// The flags every tool shares, with nccl-tests' defaults.
struct CommonOptions {
  std::size_t min_bytes = 32ull << 20;  // -b
  std::size_t max_bytes = 32ull << 20;  // -e
  std::size_t step_bytes = 1ull << 20;  // -i
  std::size_t step_factor = 1;          // -f
  int iters = 20;                       // -n
  int warmup = 5;                       // -w
  int check = 1;                        // -c: each result checked this many times (0: not checked)
  int average = 1;                      // -a: 0 rank 0, 1 mean, 2 min, 3 max across ranks
  std::string json_path;                // --json
  std::string csv_path;                 // --csv

  std::vector<std::size_t> sizes() const;
};

void add_common_options(ArgParser& parser, CommonOptions& options);

// The usual closing check: max >= min.
void validate(const CommonOptions& options);

}  // namespace kizuna::perf
