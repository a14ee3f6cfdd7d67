// run/output.hpp: where one rank's output goes.
//
// RankOutput receives the bytes a worker writes to its stdout and stderr
// pipes, cuts them into lines, and sends each line to the console (stdout
// lines to kizuna-run's stdout, stderr lines to its stderr, each prefixed
// "[rank] "), to its log file (DIR/rank<R>.log, both streams, unprefixed),
// or both, as --log-dir and --tee say. It also keeps the last kTailLines
// lines, which kizuna-run prints when the worker fails, and the last
// communicator status line, for the failure table (status.hpp).
//
// A line is written with one write() call, so lines of different ranks never
// mix within a line. A line longer than kMaxLineBytes is cut; a last line
// without a newline is flushed when its pipe closes. Console write errors
// (a closed terminal, EPIPE) are ignored: the workers keep running.
//
// Ownership: owns its log file descriptor. Threading: one thread (the
// launcher's event loop). Nothing here blocks except the writes themselves.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

#include "status.hpp"

namespace kizuna::run {

struct OutputOptions {
  bool console = true;
  std::string log_dir;  // "" = no files
};

class RankOutput {
 public:
  static constexpr std::size_t kTailLines = 20;
  static constexpr std::size_t kMaxLineBytes = 64 * 1024;

  enum class Stream { Out, Err };

  // Creates (truncates) DIR/rank<rank>.log when options.log_dir is set;
  // throws kizuna::Error(SystemError) naming the path when it cannot.
  RankOutput(int rank, const OutputOptions& options);
  ~RankOutput();
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;

  void write(Stream stream, std::string_view bytes);
  // The pipe of `stream` closed: flush its partial line.
  void close(Stream stream);
  // A line from kizuna-run itself into the log file only ("--- round 1 ---").
  void note(const std::string& line);

  const std::deque<std::string>& tail() const { return tail_; }
  // The last communicator status line this rank printed (status.hpp).
  const std::optional<StatusFields>& status() const { return status_; }
  const std::string& log_path() const { return log_path_; }

 private:
  void emit(Stream stream, std::string_view line);

  int rank_;
  bool console_;
  std::string prefix_;
  std::string log_path_;
  int log_fd_ = -1;
  std::string pending_[2];
  std::deque<std::string> tail_;
  std::optional<StatusFields> status_;
};

// Writes all of `text` to `fd`, retrying on EINTR and short writes; gives up
// silently on any other error.
void write_all(int fd, std::string_view text);

}  // namespace kizuna::run
