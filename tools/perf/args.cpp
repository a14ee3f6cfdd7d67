#include "args.hpp"

#include <kizuna/error.hpp>

#include <charconv>
#include <cstdio>

#include "core/env.hpp"
#include "collective.hpp"

namespace kizuna::perf {

ArgParser::ArgParser(std::string tool, std::string summary)
    : tool_(std::move(tool)), summary_(std::move(summary)) {
  flag("-h", "--help", "print this help and exit", [] {});
}

void ArgParser::value(std::string short_name, std::string long_name, std::string metavar,
                      std::string help, Setter set) {
  options_.push_back({std::move(short_name), std::move(long_name), std::move(metavar),
                      std::move(help), std::move(set), nullptr});
}

void ArgParser::flag(std::string short_name, std::string long_name, std::string help,
                     std::function<void()> set) {
  options_.push_back({std::move(short_name), std::move(long_name), "", std::move(help), nullptr,
                      std::move(set)});
}

const ArgParser::Option* ArgParser::find(std::string_view name) const {
  for (const Option& o : options_)
    if ((!o.short_name.empty() && name == o.short_name) || (!o.long_name.empty() && name == o.long_name))
      return &o;
  return nullptr;
}

void ArgParser::apply(const Option& o, std::string_view value) {
  const std::string& shown = o.long_name.empty() ? o.short_name : o.long_name;
  try {
    o.set(value);
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw UsageError(shown + ": " + e.what());
  }
}

bool ArgParser::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") return false;
    if (arg.size() < 2 || arg[0] != '-')
      throw UsageError("unexpected argument '" + std::string(arg) + "'");
    std::string_view name = arg;
    std::string_view inline_value;
    bool has_inline = false;
    if (arg.rfind("--", 0) == 0) {
      if (const auto eq = arg.find('='); eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        inline_value = arg.substr(eq + 1);
        has_inline = true;
      }
    } else if (arg.size() > 2 && !find(arg)) {
      // "-b8": a short option glued to its value.
      name = arg.substr(0, 2);
      inline_value = arg.substr(2);
      has_inline = true;
    }
    const Option* o = find(name);
    if (!o) throw UsageError("unknown option '" + std::string(name) + "'");
    if (o->on) {
      if (has_inline) throw UsageError(std::string(name) + " takes no value");
      o->on();
      continue;
    }
    if (!has_inline) {
      if (i + 1 >= argc) throw UsageError(std::string(name) + " needs a value");
      inline_value = argv[++i];
    }
    apply(*o, inline_value);
  }
  return true;
}

std::string ArgParser::usage() const {
  std::string out = "usage: " + tool_ + " [options]\n\n" + summary_ + "\n\noptions:\n";
  for (const Option& o : options_) {
    std::string names = o.short_name;
    if (!o.long_name.empty()) names += (names.empty() ? "" : ", ") + o.long_name;
    if (!o.metavar.empty()) names += " " + o.metavar;
    char line[512];
    std::snprintf(line, sizeof line, "  %-30s %s\n", names.c_str(), o.help.c_str());
    out += line;
  }
  return out;
}

std::size_t parse_bytes(std::string_view what, std::string_view text) {
  try {
    return static_cast<std::size_t>(core::parse_size(what, text));
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

long long parse_integer(std::string_view what, std::string_view text, long long min, long long max) {
  long long v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size() || v < min || v > max)
    throw UsageError(std::string(what) + "='" + std::string(text) + "' is not an integer in [" +
                     std::to_string(min) + ", " + std::to_string(max) + "]");
  return v;
}

std::vector<std::size_t> CommonOptions::sizes() const {
  return size_sweep(min_bytes, max_bytes, step_factor, step_bytes);
}

void add_common_options(ArgParser& p, CommonOptions& o) {
  p.value("-b", "--minbytes", "SIZE", "smallest size in bytes (8, 1K, 64M; default 32M)",
          [&o](std::string_view v) { o.min_bytes = parse_bytes("-b", v); });
  p.value("-e", "--maxbytes", "SIZE", "largest size in bytes (default 32M)",
          [&o](std::string_view v) { o.max_bytes = parse_bytes("-e", v); });
  p.value("-i", "--stepbytes", "SIZE", "increment between sizes when -f is 1 (default 1M)",
          [&o](std::string_view v) {
            o.step_bytes = parse_bytes("-i", v);
            if (o.step_bytes == 0) throw UsageError("-i must be > 0");
          });
  p.value("-f", "--stepfactor", "N", "multiplication factor between sizes (default 1: use -i)",
          [&o](std::string_view v) { o.step_factor = static_cast<std::size_t>(parse_integer("-f", v, 1, 1 << 20)); });
  p.value("-n", "--iters", "N", "timed iterations per size (default 20)",
          [&o](std::string_view v) { o.iters = static_cast<int>(parse_integer("-n", v, 1, 1 << 30)); });
  p.value("-w", "--warmup_iters", "N", "warm-up iterations per size (default 5)",
          [&o](std::string_view v) { o.warmup = static_cast<int>(parse_integer("-w", v, 0, 1 << 30)); });
  p.value("-c", "--check", "N", "check every result N times, up to the first wrong one; 0: not at all (default 1)",
          [&o](std::string_view v) { o.check = static_cast<int>(parse_integer("-c", v, 0, 1 << 20)); });
  p.value("-a", "--average", "0|1|2|3",
          "time reported: 0 rank 0's, 1 mean, 2 min, 3 max across ranks (default 1)",
          [&o](std::string_view v) { o.average = static_cast<int>(parse_integer("-a", v, 0, 3)); });
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
