// run/output.cpp: lines, prefixes, log files and tails of workers' output.
#include "output.hpp"

#include <kizuna/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kizuna::run {
namespace {

// mkdir -p: creates `dir` and its missing parents.
void make_directories(const std::string& dir) {
  for (std::size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string part = dir.substr(0, slash);
    if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST)
      throw Error(ErrorCode::SystemError,
                  "--log-dir: cannot create '" + part + "': " + std::strerror(errno));
    if (slash == std::string::npos) return;
  }
}

}  // namespace

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

RankOutput::RankOutput(int rank, const OutputOptions& options)
    : rank_(rank), console_(options.console), prefix_("[" + std::to_string(rank) + "] ") {
  if (options.log_dir.empty()) return;
  make_directories(options.log_dir);
  log_path_ = options.log_dir + "/rank" + std::to_string(rank_) + ".log";
  log_fd_ = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd_ < 0)
    throw Error(ErrorCode::SystemError,
                "--log-dir: cannot create '" + log_path_ + "': " + std::strerror(errno));
}

RankOutput::~RankOutput() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

void RankOutput::write(Stream stream, std::string_view bytes) {
  std::string& pending = pending_[stream == Stream::Out ? 0 : 1];
  while (!bytes.empty()) {
    const auto newline = bytes.find('\n');
    const std::size_t take = newline == std::string_view::npos ? bytes.size() : newline;
    pending.append(bytes.substr(0, take));
    if (newline != std::string_view::npos) {
      emit(stream, pending);
      pending.clear();
      bytes.remove_prefix(take + 1);
    } else {
      bytes = {};
    }
    if (pending.size() >= kMaxLineBytes) {
      emit(stream, pending);
      pending.clear();
    }
  }
}

void RankOutput::close(Stream stream) {
  std::string& pending = pending_[stream == Stream::Out ? 0 : 1];
  if (!pending.empty()) emit(stream, pending);
  pending.clear();
}

void RankOutput::note(const std::string& line) {
  if (log_fd_ >= 0) write_all(log_fd_, line + "\n");
}

void RankOutput::emit(Stream stream, std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (console_) {
    std::string text;
    text.reserve(prefix_.size() + line.size() + 1);
    text.append(prefix_).append(line).push_back('\n');
    write_all(stream == Stream::Out ? STDOUT_FILENO : STDERR_FILENO, text);
  }
  if (log_fd_ >= 0) {
    std::string text(line);
    text.push_back('\n');
    write_all(log_fd_, text);
  }
  if (auto fields = parse_status_line(line)) status_ = std::move(*fields);
  tail_.emplace_back(line);
  if (tail_.size() > kTailLines) tail_.pop_front();
}

}  // namespace kizuna::run
