// core/log.hpp: leveled logging to stderr (or KIZUNA_LOG_FILE).
//
//   KIZUNA_LOG(Warn) << "peer " << rank << " refused: " << reason;
//
// Each line is "YYYY-MM-DD HH:MM:SS.mmm kizuna[r3] W message": wall time,
// the rank once set_log_rank() knows it, and the level letter. A line is
// formatted in the calling thread and written with one write(2), so lines
// from threads and processes never interleave mid-line. The threshold comes
// from KIZUNA_LOG (default warn); a disabled level costs one load and a
// compare, and its operands are not evaluated.
#pragma once

#include <atomic>
#include <sstream>
#include <string>
#include <string_view>

namespace kizuna::core {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3, Trace = 4 };

// "error", "warn", "info", "debug", "trace"; throws InvalidArgument otherwise.
LogLevel parse_log_level(std::string_view text);
std::string_view name(LogLevel level);

bool log_enabled(LogLevel level);
void set_log_level(LogLevel level);
// The rank shown in each line and substituted for %r in KIZUNA_LOG_FILE.
void set_log_rank(int rank);
void write_log_line(LogLevel level, const std::string& message);

// Collects one line; writes it when destroyed.
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  ~LogLine() { write_log_line(level_, out_.str()); }

  template <typename T>
  LogLine& operator<<(const T& value) {
    out_ << value;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream out_;
};

}  // namespace kizuna::core

#define KIZUNA_LOG(level)                                                     \
  if (!::kizuna::core::log_enabled(::kizuna::core::LogLevel::level)) {        \
  } else                                                                      \
    ::kizuna::core::LogLine(::kizuna::core::LogLevel::level)
