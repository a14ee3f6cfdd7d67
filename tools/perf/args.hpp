// perf/args.hpp: the nccl-tests command line, shared by kizuna-perf and the
// comparison harnesses so that all of them take the same flags.
//
// ArgParser is a small table of options: each has a short form ("-b"), a
// long form ("--minbytes") or both, and either takes a value ("-b 8",
// "-b8", "--minbytes 8", "--minbytes=8") or is a plain flag. A value is
// handed to the option's setter, which throws UsageError (or any
// kizuna::Error, turned into one) when it is bad. parse() throws UsageError
// for an unknown option, a missing value, a stray argument or a bad value;
// the tools print it with usage() and exit 2.
//
// add_common_options() registers the flags every tool shares (sizes,
// iterations, warm-up, check, average mode, --json, --csv) on a
// CommonOptions.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kizuna::perf {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ArgParser {
 public:
  using Setter = std::function<void(std::string_view value)>;

  ArgParser(std::string tool, std::string summary);

  // An option with a value. `short_name` ("-b") or `long_name`
  // ("--minbytes") may be empty, not both.
  void value(std::string short_name, std::string long_name, std::string metavar, std::string help,
             Setter set);
  // An option without a value.
  void flag(std::string short_name, std::string long_name, std::string help,
            std::function<void()> set);

  // Returns false when --help/-h was given (the caller prints usage() and
  // exits 0); throws UsageError otherwise on a bad command line.
  bool parse(int argc, const char* const* argv);

  std::string usage() const;
  const std::string& tool() const { return tool_; }

 private:
  struct Option {
    std::string short_name, long_name, metavar, help;
    Setter set;                 // with a value
    std::function<void()> on;   // without
  };
  const Option* find(std::string_view name) const;
  static void apply(const Option& o, std::string_view value);

  std::string tool_, summary_;
  std::vector<Option> options_;
};

// "8", "1K", "64M", "1G", "4KiB": bytes (binary multiples). UsageError
// naming `what` otherwise.
std::size_t parse_bytes(std::string_view what, std::string_view text);
long long parse_integer(std::string_view what, std::string_view text, long long min, long long max);

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
