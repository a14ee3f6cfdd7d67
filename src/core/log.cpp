#include "core/log.hpp"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <mutex>

#include "core/check.hpp"
#include "core/env.hpp"

namespace kizuna::core {
namespace {

// -1: not yet initialised from the environment.
std::atomic<int> g_level{-1};
std::atomic<int> g_rank{-1};

struct LogSink {
  std::mutex mutex;
  int fd = 2;
  std::string path_pattern;  // KIZUNA_LOG_FILE, with %r
  int opened_for_rank = -2;
};

LogSink& sink() {
  static LogSink* s = new LogSink();  // never destroyed: logging works during exit
  return *s;
}

int init_level() {
  int level = static_cast<int>(LogLevel::Warn);
  try {
    const Env& env = Env::get();
    level = static_cast<int>(env.log_level);
    std::lock_guard lock(sink().mutex);
    sink().path_pattern = env.log_file;
  } catch (const Error&) {
    // An invalid KIZUNA_* variable is reported by whoever reads the
    // environment for real; logging keeps its default meanwhile.
  }
  int expected = -1;
  if (g_level.compare_exchange_strong(expected, level)) {
    // First initialisation: now that logging works, report what Env noticed.
    try {
      for (const std::string& warning : Env::get().warnings)
        if (level >= static_cast<int>(LogLevel::Warn)) write_log_line(LogLevel::Warn, warning);
    } catch (const Error&) {
    }
  }
  return g_level.load();
}

std::string expand_rank(const std::string& pattern, int rank) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'r') {
      out += rank >= 0 ? std::to_string(rank) : std::string("x");
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// Called with the sink locked: (re)open KIZUNA_LOG_FILE for the current rank.
int sink_fd_locked(int rank) {
  LogSink& s = sink();
  if (s.path_pattern.empty()) return 2;
  if (s.opened_for_rank == rank) return s.fd;
  const std::string path = expand_rank(s.path_pattern, rank);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    const std::string warn = "kizuna: cannot open KIZUNA_LOG_FILE '" + path + "'; logging to stderr\n";
    (void)!::write(2, warn.data(), warn.size());
    s.path_pattern.clear();
    return 2;
  }
  if (s.fd != 2) ::close(s.fd);
  s.fd = fd;
  s.opened_for_rank = rank;
  return fd;
}

}  // namespace

LogLevel parse_log_level(std::string_view text) {
  for (int i = 0; i <= static_cast<int>(LogLevel::Trace); ++i) {
    const auto level = static_cast<LogLevel>(i);
    if (text == name(level)) return level;
  }
  if (text == "warning") return LogLevel::Warn;
  KIZUNA_THROW(ErrorCode::InvalidArgument, "unknown log level '", text,
               "'; accepted: error, warn, info, debug, trace");
}

std::string_view name(LogLevel level) {
  switch (level) {
    case LogLevel::Error: return "error";
    case LogLevel::Warn: return "warn";
    case LogLevel::Info: return "info";
    case LogLevel::Debug: return "debug";
    case LogLevel::Trace: return "trace";
  }
  return "unknown";
}

bool log_enabled(LogLevel level) {
  int threshold = g_level.load(std::memory_order_relaxed);
  if (threshold < 0) [[unlikely]] threshold = init_level();
  return static_cast<int>(level) <= threshold;
}

void set_log_level(LogLevel level) {
  init_level();
  g_level.store(static_cast<int>(level));
}

void set_log_rank(int rank) { g_rank.store(rank); }

void write_log_line(LogLevel level, const std::string& message) {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  tm local{};
  ::localtime_r(&tv.tv_sec, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &local);
  static constexpr char kLetters[] = "EWIDT";
  const int rank = g_rank.load();
  char head[96];
  if (rank >= 0)
    std::snprintf(head, sizeof head, "%s.%03ld kizuna[r%d] %c ", stamp,
                  static_cast<long>(tv.tv_usec / 1000), rank, kLetters[static_cast<int>(level)]);
  else
    std::snprintf(head, sizeof head, "%s.%03ld kizuna[%d] %c ", stamp,
                  static_cast<long>(tv.tv_usec / 1000), static_cast<int>(::getpid()),
                  kLetters[static_cast<int>(level)]);
  std::string line = head;
  line += message;
  line += '\n';
  std::lock_guard lock(sink().mutex);
  const int fd = sink_fd_locked(rank);
  (void)!::write(fd, line.data(), line.size());
}

}  // namespace kizuna::core
