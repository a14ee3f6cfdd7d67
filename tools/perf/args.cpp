#include "args.hpp"

#include "collective.hpp"
#include "common/cli.hpp"
#include "core/env.hpp"

namespace kizuna::perf {

namespace {

// Sizes ("8", "1K", "64M", "4KiB") and integers, as the KIZUNA_* variables.
std::size_t bytes(std::string_view flag, std::string_view text) {
  return static_cast<std::size_t>(core::parse_size(flag, text));
}
int integer(std::string_view flag, std::string_view text, int min, int max) {
  return static_cast<int>(core::parse_int(flag, text, min, max));
}

}  // namespace

ArgParser::ArgParser(std::string tool, std::string summary)
    : tool_(std::move(tool)), summary_(std::move(summary)), app_(std::make_unique<CLI::App>()) {
  app_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  tools::add_help(*app_, "print this help and exit");
}

ArgParser::~ArgParser() = default;

void ArgParser::value(const std::string& short_name, const std::string& long_name, const std::string& metavar,
                      const std::string& help, Setter set) {
  const std::string names = short_name + (short_name.empty() || long_name.empty() ? "" : ",") + long_name;
  tools::add_value(*app_, names, metavar, help, [set = std::move(set)](const std::string& v) { set(v); });
}

bool ArgParser::parse(int argc, const char* const* argv) {
  if (!tools::parse(*app_, argc, argv)) return false;
  tools::reject_extras(*app_);
  return true;
}

std::string ArgParser::usage() const {
  return "usage: " + tool_ + " [options]\n\n" + summary_ + "\n\noptions:\n" + tools::option_table(*app_, 33);
}

std::vector<std::size_t> CommonOptions::sizes() const {
  return size_sweep(min_bytes, max_bytes, step_factor, step_bytes);
}

void add_common_options(ArgParser& p, CommonOptions& o) {
  p.value("-b", "--minbytes", "SIZE", "smallest size in bytes (8, 1K, 64M; default 32M)",
          [&o](std::string_view v) { o.min_bytes = bytes("-b", v); });
  p.value("-e", "--maxbytes", "SIZE", "largest size in bytes (default 32M)",
          [&o](std::string_view v) { o.max_bytes = bytes("-e", v); });
  p.value("-i", "--stepbytes", "SIZE", "increment between sizes when -f is 1 (default 1M)",
          [&o](std::string_view v) {
            o.step_bytes = bytes("-i", v);
            if (o.step_bytes == 0) throw UsageError("-i must be > 0");
          });
  p.value("-f", "--stepfactor", "N", "multiplication factor between sizes (default 1: use -i)",
          [&o](std::string_view v) { o.step_factor = static_cast<std::size_t>(integer("-f", v, 1, 1 << 20)); });
  p.value("-n", "--iters", "N", "timed iterations per size (default 20)",
          [&o](std::string_view v) { o.iters = integer("-n", v, 1, 1 << 30); });
  p.value("-w", "--warmup_iters", "N", "warm-up iterations per size (default 5)",
          [&o](std::string_view v) { o.warmup = integer("-w", v, 0, 1 << 30); });
  p.value("-c", "--check", "N", "check every result N times, up to the first wrong one; 0: not at all (default 1)",
          [&o](std::string_view v) { o.check = integer("-c", v, 0, 1 << 20); });
  p.value("-a", "--average", "0|1|2|3",
          "time reported: 0 rank 0's, 1 mean, 2 min, 3 max across ranks (default 1)",
          [&o](std::string_view v) { o.average = integer("-a", v, 0, 3); });
  p.value("", "--json", "FILE", "also write the results as JSON",
          [&o](std::string_view v) { o.json_path = std::string(v); });
  p.value("", "--csv", "FILE", "also write the results as CSV",
          [&o](std::string_view v) { o.csv_path = std::string(v); });
}

void validate(const CommonOptions& o) {
  if (o.max_bytes < o.min_bytes)
    throw UsageError("-e (" + std::to_string(o.max_bytes) + ") is smaller than -b (" +
                     std::to_string(o.min_bytes) + ")");
}

}  // namespace kizuna::perf
