#include "core/env.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <tuple>

#include "core/check.hpp"

extern char** environ;

namespace kizuna::core {
namespace {

constexpr std::string_view kPrefix = "KIZUNA_";

std::string trim_lower(std::string_view text) {
  std::string out;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Levenshtein distance, for "did you mean" on misspelt variable names.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Splits "1.5ms" into the number and the unit.
std::pair<std::string, std::string> split_unit(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  return {text.substr(0, i), text.substr(i)};
}

}  // namespace

std::chrono::milliseconds parse_duration(std::string_view variable, std::string_view text) {
  const std::string value = trim_lower(text);
  const auto [number, unit] = split_unit(value);
  double scale = -1;
  if (unit.empty() || unit == "s" || unit == "sec") scale = 1000;
  else if (unit == "ms") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60'000;
  else if (unit == "h") scale = 3'600'000;
  char* end = nullptr;
  const double amount = number.empty() ? -1 : std::strtod(number.c_str(), &end);
  const bool parsed = !number.empty() && end == number.c_str() + number.size();
  if (scale < 0 || !parsed || !(amount > 0) || amount * scale > 1e12)
    KIZUNA_THROW(ErrorCode::InvalidArgument, variable, "='", text,
                 "' is not a duration; accepted: a positive number of seconds, or with a unit "
                 "(500ms, 30s, 2m, 1h)");
  return std::chrono::milliseconds(std::max<std::int64_t>(1, std::llround(amount * scale)));
}

std::uint64_t parse_size(std::string_view variable, std::string_view text) {
  const std::string value = trim_lower(text);
  const auto [number, unit] = split_unit(value);
  std::uint64_t scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") scale = 1ull << 10;
  else if (unit == "m" || unit == "mb" || unit == "mib") scale = 1ull << 20;
  else if (unit == "g" || unit == "gb" || unit == "gib") scale = 1ull << 30;
  std::uint64_t amount = 0;
  const auto result = std::from_chars(number.data(), number.data() + number.size(), amount);
  const bool parsed = !number.empty() && result.ec == std::errc() &&
                      result.ptr == number.data() + number.size();
  if (scale == 0 || !parsed || amount > (~0ull) / scale)
    KIZUNA_THROW(ErrorCode::InvalidArgument, variable, "='", text,
                 "' is not a size; accepted: a number of bytes, or with K, M, G (binary "
                 "multiples, e.g. 512K, 4MiB)");
  return amount * scale;
}

std::pair<std::string, int> parse_device(std::string_view variable, std::string_view text) {
  const std::string value = trim_lower(text);
  if (value == "cpu") return {"cpu", -1};
  if (value == "cuda" || value == "gpu") return {"cuda", -1};
  if (value.rfind("cuda:", 0) == 0) {
    const std::string index = value.substr(5);
    int n = -1;
    const auto r = std::from_chars(index.data(), index.data() + index.size(), n);
    if (!index.empty() && r.ec == std::errc() && r.ptr == index.data() + index.size() && n >= 0 && n < 1024)
      return {"cuda", n};
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, variable, "='", text,
               "' is not a device; accepted: cpu, cuda, cuda:N");
}

bool parse_bool(std::string_view variable, std::string_view text) {
  const std::string value = trim_lower(text);
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off") return false;
  KIZUNA_THROW(ErrorCode::InvalidArgument, variable, "='", text,
               "' is not a boolean; accepted: 1/0, true/false, yes/no, on/off");
}

std::int64_t parse_auto_size(std::string_view variable, std::string_view text, std::uint64_t min,
                             std::uint64_t max, std::string_view accepted, bool zero_too) {
  if (trim_lower(text) == "auto") return -1;
  const std::uint64_t bytes = parse_size(variable, text);
  if (!(zero_too && bytes == 0) && (bytes < min || bytes > max))
    KIZUNA_THROW(ErrorCode::InvalidArgument, variable, "='", text, "' is out of range; accepted: ", accepted);
  return static_cast<std::int64_t>(bytes);
}

StagedStores parse_staged_stores(std::string_view variable, std::string_view text) {
  const std::string value = trim_lower(text);
  if (value == "auto") return StagedStores::Auto;
  if (value == "cache") return StagedStores::Cache;
  if (value == "stream") return StagedStores::Stream;
  KIZUNA_THROW(ErrorCode::InvalidArgument, variable, "='", text, "' is not accepted; expected auto, cache or stream");
}

std::pair<int, int> parse_port_range(std::string_view variable, std::string_view text) {
  const auto bad = [&] {
    KIZUNA_THROW(ErrorCode::InvalidArgument, variable, "='", text,
                 "' is not a port range; accepted: LOW-HIGH with 1 <= LOW <= HIGH <= 65535 (e.g. 40000-40999)");
  };
  const std::string value = trim_lower(text);
  const auto dash = value.find('-');
  if (dash == std::string::npos) bad();
  int low = 0, high = 0;
  try {
    low = static_cast<int>(parse_int(variable, value.substr(0, dash), 1, 65535));
    high = static_cast<int>(parse_int(variable, value.substr(dash + 1), 1, 65535));
  } catch (const Error&) {
    bad();
  }
  if (low > high) bad();
  return {low, high};
}

std::int64_t parse_int(std::string_view variable, std::string_view text, std::int64_t min,
                       std::int64_t max) {
  const std::string value = trim_lower(text);
  std::int64_t out = 0;
  const auto result = std::from_chars(value.data(), value.data() + value.size(), out);
  if (value.empty() || result.ec != std::errc() || result.ptr != value.data() + value.size() ||
      out < min || out > max)
    KIZUNA_THROW(ErrorCode::InvalidArgument, variable, "='", text,
                 "' is not accepted; expected an integer in [", min, ", ", max, "]");
  return out;
}

std::array<double, 3> parse_link(std::string_view variable, std::string_view text) {
  std::string value = trim_lower(text);
  std::erase(value, ' ');  // "3.4, 3.8, 3" as well
  std::array<double, 3> out{};
  const char* p = value.data();
  const char* end = value.data() + value.size();
  bool ok = true;
  for (std::size_t i = 0; i < out.size() && ok; ++i) {
    if (i > 0) ok = p < end && *p++ == ',';
    const auto result = std::from_chars(p, end, out[i]);
    ok = ok && result.ec == std::errc() && std::isfinite(out[i]);
    p = result.ptr;
  }
  ok = ok && p == end && out[0] > 0 && out[1] >= 0 && out[2] > 0;
  if (!ok)
    KIZUNA_THROW(ErrorCode::InvalidArgument, variable, "='", text,
                 "' is not accepted; expected ALPHA_US,MU_US,GBPS: a round's microseconds (> 0), a further "
                 "message's (>= 0) and the bandwidth in GB/s (> 0), e.g. 3.4,3.8,3");
  return out;
}

const std::vector<std::string_view>& Env::known_variables() {
  static const std::vector<std::string_view> names{
      "KIZUNA_LOG",
      "KIZUNA_LOG_FILE",
      "KIZUNA_TIMEOUT",
      "KIZUNA_STORE_TIMEOUT",
      "KIZUNA_STORE",
      "KIZUNA_STORE_TOKEN",
      "KIZUNA_STORE_PREFIX",
      "KIZUNA_ALGO",
      "KIZUNA_SLICE_BYTES",
      "KIZUNA_CHECK",
      "KIZUNA_SOCKET_IFNAME",
      "KIZUNA_TRANSPORT",
      "KIZUNA_SHM_BYTES",
      "KIZUNA_SYMMETRIC_FROM",
      "KIZUNA_MAILBOX_UPTO",
      "KIZUNA_STAGED_FROM",
      "KIZUNA_STAGING_BYTES",
      "KIZUNA_STAGED_STORES",
      "KIZUNA_TUNING_FILE",
      "KIZUNA_TCP_CONGESTION",
      "KIZUNA_SPIN_US",
      "KIZUNA_YIELD_US",
      "KIZUNA_DUMP_ON_SIGNAL",
      "KIZUNA_DEVICE",
      "KIZUNA_CUDA_IPC",
      "KIZUNA_CUDA_STREAM_WAIT",
      "KIZUNA_CUDA_CHANNELS",
      "KIZUNA_PORT_RANGE",
      "KIZUNA_CUDA_SLOT_BYTES",
      "KIZUNA_CUDA_LINK",
      "KIZUNA_JOIN",
  };
  return names;
}

Env Env::parse(const Lookup& lookup, const std::vector<std::string>& names) {
  Env env;
  if (auto v = lookup("KIZUNA_LOG")) {
    try {
      env.log_level = parse_log_level(trim_lower(*v));
    } catch (const Error&) {
      KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_LOG='", *v,
                   "' is not a log level; accepted: error, warn, info, debug, trace");
    }
  }
  if (auto v = lookup("KIZUNA_LOG_FILE")) env.log_file = *v;
  if (auto v = lookup("KIZUNA_TIMEOUT")) env.timeout = parse_duration("KIZUNA_TIMEOUT", *v);
  if (auto v = lookup("KIZUNA_STORE_TIMEOUT"))
    env.store_timeout = parse_duration("KIZUNA_STORE_TIMEOUT", *v);
  if (auto v = lookup("KIZUNA_STORE_TOKEN")) env.store_token = *v;
  if (auto v = lookup("KIZUNA_STORE_PREFIX")) {
    const bool printable = std::all_of(v->begin(), v->end(), [](char c) { return c > ' ' && c < 127; });
    if (v->empty() || v->size() > 512 || !printable || v->front() == '/' || v->back() == '/' ||
        v->find("//") != std::string::npos)
      KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_STORE_PREFIX='", *v,
                   "' is not a key prefix; accepted: 1 to 512 printable characters without spaces, "
                   "not starting or ending with '/' and without '//' (e.g. run7/round0)");
    env.store_prefix = *v;
  }
  if (auto v = lookup("KIZUNA_ALGO")) {
    const std::string value = trim_lower(*v);
    if (value == "auto") env.algo = Algorithm::Auto;
    else if (value == "ring") env.algo = Algorithm::Ring;
    else if (value == "tree") env.algo = Algorithm::Tree;
    else if (value == "oneshot") env.algo = Algorithm::OneShot;
    else if (value == "twoshot") env.algo = Algorithm::TwoShot;
    else if (value == "doubling") env.algo = Algorithm::Doubling;
    else
      KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_ALGO='", *v,
                   "' is not an algorithm; accepted: auto, ring, tree, oneshot, twoshot, doubling");
  }
  if (auto v = lookup("KIZUNA_SLICE_BYTES")) {
    env.slice_bytes = parse_size("KIZUNA_SLICE_BYTES", *v);
    if (env.slice_bytes < 4096 || env.slice_bytes > (64u << 20))
      KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_SLICE_BYTES='", *v,
                   "' is out of range; accepted: 4K .. 64M");
  }
  if (auto v = lookup("KIZUNA_CHECK")) env.check = parse_bool("KIZUNA_CHECK", *v);
  if (auto v = lookup("KIZUNA_JOIN")) env.join = parse_bool("KIZUNA_JOIN", *v);
  if (auto v = lookup("KIZUNA_SOCKET_IFNAME")) {
    if (v->empty() || v->size() > 15)
      KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_SOCKET_IFNAME='", *v,
                   "' is not an interface name (1 to 15 characters, e.g. eth0)");
    env.socket_ifname = *v;
  }
  if (auto v = lookup("KIZUNA_TRANSPORT")) {
    const std::string value = trim_lower(*v);
    if (value == "auto") env.transport = Transport::Auto;
    else if (value == "tcp") env.transport = Transport::Tcp;
    else if (value == "shm") env.transport = Transport::Shm;
    else
      KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_TRANSPORT='", *v,
                   "' is not a transport; accepted: auto, tcp, shm");
  }
  if (auto v = lookup("KIZUNA_SHM_BYTES")) {
    env.shm_bytes = parse_size("KIZUNA_SHM_BYTES", *v);
    if (env.shm_bytes < (64u << 10) || env.shm_bytes > (1u << 30))
      KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_SHM_BYTES='", *v,
                   "' is out of range; accepted: 64K .. 1G");
  }
  if (auto v = lookup("KIZUNA_SYMMETRIC_FROM"))
    env.symmetric_from = parse_auto_size("KIZUNA_SYMMETRIC_FROM", *v, 0, 1ull << 62, "auto or 0 .. 4E");
  if (auto v = lookup("KIZUNA_MAILBOX_UPTO"))
    env.mailbox_upto = parse_auto_size("KIZUNA_MAILBOX_UPTO", *v, 0, 1024, "auto or 0 .. 1K (0: no mailboxes)");
  if (auto v = lookup("KIZUNA_STAGED_FROM"))
    env.staged_from = parse_auto_size("KIZUNA_STAGED_FROM", *v, 0, 1ull << 62, "auto or 0 .. 4E");
  if (auto v = lookup("KIZUNA_STAGING_BYTES"))
    env.staging_bytes = parse_auto_size("KIZUNA_STAGING_BYTES", *v, 64u << 10, 1u << 30,
                                        "auto, 0 (no staging) or 64K .. 1G", true);
  if (auto v = lookup("KIZUNA_TUNING_FILE")) {
    if (v->empty())
      KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_TUNING_FILE is set but empty; accepted: the path of a profile "
                   "written by kizuna-perf --calibrate");
    env.tuning_file = *v;
  }
  if (auto v = lookup("KIZUNA_STAGED_STORES")) env.staged_stores = parse_staged_stores("KIZUNA_STAGED_STORES", *v);
  if (auto v = lookup("KIZUNA_TCP_CONGESTION")) {
    const std::string value = trim_lower(*v);
    const bool name = !value.empty() && value.size() <= 15 &&
                      std::all_of(value.begin(), value.end(), [](char c) {
                        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                      });
    if (!name)
      KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_TCP_CONGESTION='", *v,
                   "' is not a congestion control; accepted: auto, system, or a kernel algorithm "
                   "name (1 to 15 letters, digits or '_', e.g. reno, cubic, bbr)");
    env.tcp_congestion = value;
  }
  if (auto v = lookup("KIZUNA_SPIN_US")) {
    if (trim_lower(*v) != "auto") env.spin_us = static_cast<int>(parse_int("KIZUNA_SPIN_US", *v, 0, 1'000'000));
  }
  if (auto v = lookup("KIZUNA_YIELD_US")) {
    if (trim_lower(*v) != "auto") env.yield_us = static_cast<int>(parse_int("KIZUNA_YIELD_US", *v, 0, 1'000'000));
  }
  if (auto v = lookup("KIZUNA_DUMP_ON_SIGNAL")) env.dump_on_signal = parse_bool("KIZUNA_DUMP_ON_SIGNAL", *v);
  if (auto v = lookup("KIZUNA_DEVICE")) std::tie(env.device, env.device_index) = parse_device("KIZUNA_DEVICE", *v);
  if (auto v = lookup("KIZUNA_CUDA_IPC")) env.cuda_ipc = parse_bool("KIZUNA_CUDA_IPC", *v);
  if (auto v = lookup("KIZUNA_CUDA_STREAM_WAIT"))
    env.cuda_stream_wait = parse_bool("KIZUNA_CUDA_STREAM_WAIT", *v);
  if (auto v = lookup("KIZUNA_PORT_RANGE"))
    std::tie(env.port_low, env.port_high) = parse_port_range("KIZUNA_PORT_RANGE", *v);
  if (auto v = lookup("KIZUNA_CUDA_CHANNELS"))
    env.cuda_channels = static_cast<int>(parse_int("KIZUNA_CUDA_CHANNELS", *v, 1, 32));
  if (auto v = lookup("KIZUNA_CUDA_SLOT_BYTES")) {
    env.cuda_slot_bytes = parse_size("KIZUNA_CUDA_SLOT_BYTES", *v);
    if (env.cuda_slot_bytes < 4096 || env.cuda_slot_bytes > (16u << 20) || env.cuda_slot_bytes % 256 != 0)
      KIZUNA_THROW(ErrorCode::InvalidArgument, "KIZUNA_CUDA_SLOT_BYTES='", *v,
                   "' is out of range; accepted: 4K .. 16M, a multiple of 256");
  }

  if (auto v = lookup("KIZUNA_CUDA_LINK")) env.cuda_link = parse_link("KIZUNA_CUDA_LINK", *v);

  const auto& known = known_variables();
  for (const std::string& name : names) {
    if (name.rfind(kPrefix, 0) != 0) continue;
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string_view closest;
    std::size_t best = 4;  // suggest only names within 3 edits
    for (std::string_view candidate : known) {
      const std::size_t d = edit_distance(name, candidate);
      if (d < best) best = d, closest = candidate;
    }
    std::string warning = "unknown environment variable " + name + " is ignored";
    if (!closest.empty()) warning += " (did you mean " + std::string(closest) + "?)";
    env.warnings.push_back(std::move(warning));
  }
  return env;
}

const Env& Env::get() {
  static std::once_flag once;
  static Env env;
  static std::exception_ptr error;
  std::call_once(once, [] {
    try {
      env = parse(process_lookup(), process_variable_names());
    } catch (...) {
      error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
  return env;
}

Env::Lookup process_lookup() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::vector<std::string> process_variable_names() {
  std::vector<std::string> names;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    names.emplace_back(text.substr(0, text.find('=')));
  }
  return names;
}

}  // namespace kizuna::core
