// run/workers.cpp: fork/exec of the workers, their pipes, reaping, stopping.
//
// Start-up of one worker:
//   parent                         child (only async-signal-safe calls)
//   pipe2 x3 (out, err, status)
//   fork ------------------------> empty signal mask, default dispositions
//   setpgid(pid, pid)              setpgid(0, 0)
//                                  prctl(PR_SET_PDEATHSIG, SIGKILL);
//                                  getppid() != launcher? -> _exit
//                                  stdin=/dev/null, stdout/stderr=pipes,
//                                  status pipe on fd 3 (close-on-exec),
//                                  close every fd above 3
//   read(status) <---------------- execve: success closes fd 3 (EOF);
//     EOF: running                 failure writes errno to fd 3, _exit(127)
//     errno: "cannot execute"
#include "workers.hpp"

#include <kizuna/error.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace kizuna::run {

using Clock = std::chrono::steady_clock;

struct WorkerGroup::Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int fd[2] = {-1, -1};  // stdout, stderr pipes (read ends)
};

namespace {

constexpr std::size_t kReadChunk = 64 * 1024;
constexpr int kMaxDrainReads = 64;

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

int ms(std::chrono::milliseconds d) {
  return static_cast<int>(std::clamp<std::int64_t>(d.count(), 0, 1 << 30));
}

// Everything the child needs, computed before fork.
struct ChildSetup {
  pid_t parent;
  int devnull;
  int out;
  int err;
  int status;
  int max_fd;
  const char* path;
  char* const* argv;
  char* const* envp;
  const cpu_set_t* cpus;  // null: not pinned
};

[[noreturn]] void exec_child(const ChildSetup& s) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGQUIT}) sigaction(sig, &dfl, nullptr);
  setpgid(0, 0);
  // Die with the launcher. If it died before this line, the parent is
  // already someone else and the signal would never come: leave now.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != s.parent) _exit(126);
  if (dup2(s.devnull, 0) < 0 || dup2(s.out, 1) < 0 || dup2(s.err, 2) < 0 || dup2(s.status, 3) < 0) _exit(126);
  fcntl(3, F_SETFD, FD_CLOEXEC);
  if (s.cpus && sched_setaffinity(0, sizeof(cpu_set_t), s.cpus) != 0) {
    const int error = errno;
    ssize_t ignored = write(3, &error, sizeof error);
    (void)ignored;
    _exit(127);
  }
  if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0)
    for (int fd = 4; fd < s.max_fd; ++fd) close(fd);
  execve(s.path, s.argv, s.envp);
  const int error = errno;
  ssize_t ignored = write(3, &error, sizeof error);
  (void)ignored;
  _exit(127);
}

}  // namespace

std::string signal_name(int signal) {
  switch (signal) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return "signal " + std::to_string(signal);
  }
}

std::string WorkerExit::how() const {
  if (signal != 0)
    return "was killed by " + signal_name(signal) + " (signal " + std::to_string(signal) + ": " +
           strsignal(signal) + ")";
  return "exited with code " + std::to_string(exit_code);
}

std::string resolve_program(const std::string& program) {
  auto check = [](const std::string& path, std::string& why) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      why = std::strerror(errno);
      return false;
    }
    if (S_ISDIR(st.st_mode)) {
      why = "it is a directory";
      return false;
    }
    if (::access(path.c_str(), X_OK) != 0) {
      why = std::string(std::strerror(errno)) + " (not executable)";
      return false;
    }
    return true;
  };
  std::string why;
  if (program.find('/') != std::string::npos) {
    if (check(program, why)) return program;
    throw Error(ErrorCode::InvalidArgument, "cannot run '" + program + "': " + why);
  }
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path ? env_path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  for (;;) {
    const std::size_t end = path.find(':', begin);
    std::string dir = path.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    std::string ignored;
    if (check(candidate, ignored)) return candidate;
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  throw Error(ErrorCode::InvalidArgument,
              "cannot run '" + program + "': no executable of that name in PATH (" + path + ")");
}

WorkerGroup::WorkerGroup(WorkerPlan plan, const OutputOptions& output, int signal_fd)
    : plan_(std::move(plan)), signal_fd_(signal_fd) {
  devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull_ < 0) throw Error(ErrorCode::SystemError, errno_text("cannot open /dev/null"));
  for (int i = 0; i < plan_.count; ++i)
    outputs_.push_back(std::make_unique<RankOutput>(plan_.first_rank + i, output));
}

WorkerGroup::~WorkerGroup() {
  if (running() > 0) {
    kill_groups(SIGKILL);
    const auto deadline = Clock::now() + kKillTimeout;
    while (running() > 0 && Clock::now() < deadline) pump(std::chrono::milliseconds(50));
  }
  kill_descendants();
  for (auto& w : workers_) close_pipes(*w);
  close_fd(devnull_);
}

void WorkerGroup::start(int round, const std::vector<std::vector<std::string>>& environment) {
  round_ = round;
  exits_.clear();
  first_failure_.reset();
  forgiven_.clear();
  workers_.clear();
  if (round > 0)
    for (auto& out : outputs_) out->note("--- kizuna-run: restart " + std::to_string(round) + " ---");
  for (int i = 0; i < plan_.count; ++i) spawn(i, environment[i]);
}

void WorkerGroup::replace(int local_rank, const std::vector<std::string>& environment) {
  outputs_[local_rank]->note("--- kizuna-run: a replacement for rank " + std::to_string(plan_.first_rank + local_rank) +
                             " ---");
  spawn(local_rank, environment);
}

void WorkerGroup::forgive(pid_t pid) { forgiven_.push_back(pid); }

void WorkerGroup::spawn(int i, const std::vector<std::string>& environment) {
  std::vector<char*> argv;
  for (const auto& a : plan_.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  rlimit files{};
  const int max_fd = ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < 65536
                         ? static_cast<int>(files.rlim_cur)
                         : 65536;
  {
    std::vector<char*> envp;
    for (const auto& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    auto w = std::make_unique<Worker>();
    w->local_rank = i;
    w->rank = plan_.first_rank + i;
    int out[2], err[2], status[2];
    // Out of descriptors (a large --nproc-per-node under a small ulimit -n):
    // the workers already started are stopped, as for any failed start.
    auto no_pipe = [&](std::initializer_list<int> opened) {
      const std::string message = errno_text("cannot start rank " + std::to_string(w->rank) + ": pipe");
      for (int fd : opened) ::close(fd);
      stop(std::chrono::milliseconds(0));
      throw Error(ErrorCode::SystemError, message);
    };
    if (::pipe2(out, O_CLOEXEC) != 0) no_pipe({});
    if (::pipe2(err, O_CLOEXEC) != 0) no_pipe({out[0], out[1]});
    if (::pipe2(status, O_CLOEXEC) != 0) no_pipe({out[0], out[1], err[0], err[1]});
    cpu_set_t cpu;
    CPU_ZERO(&cpu);
    if (!plan_.cpus.empty()) CPU_SET(plan_.cpus[i], &cpu);
    const ChildSetup setup{::getpid(), devnull_, out[1], err[1], status[1], max_fd, plan_.path.c_str(),
                           argv.data(), envp.data(), plan_.cpus.empty() ? nullptr : &cpu};
    const pid_t pid = ::fork();
    if (pid == 0) exec_child(setup);
    const int fork_errno = errno;
    for (int fd : {out[1], err[1], status[1]}) ::close(fd);
    w->fd[0] = out[0];
    w->fd[1] = err[0];
    if (pid < 0) {
      close_pipes(*w);
      ::close(status[0]);
      errno = fork_errno;
      const std::string message = errno_text("cannot start rank " + std::to_string(w->rank) + ": fork");
      stop(std::chrono::milliseconds(0));
      throw Error(ErrorCode::SystemError, message);
    }
    ::setpgid(pid, pid);  // also in the child; whichever runs first wins the race
    w->pid = pid;
    w->running = true;
    for (int fd : w->fd) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);

    // Wait for execve: EOF on the status pipe, or the child's errno.
    int exec_errno = 0;
    bool decided = false;
    const auto deadline = Clock::now() + kExecTimeout;
    while (!decided) {
      pollfd p{status[0], POLLIN, 0};
      const int ready = ::poll(&p, 1, ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline - Clock::now())));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        exec_errno = -1;  // no word from the child before the deadline
        break;
      }
      const ssize_t n = ::read(status[0], &exec_errno, sizeof exec_errno);
      if (n < 0 && errno == EINTR) continue;
      decided = true;
      if (n <= 0) exec_errno = 0;
    }
    ::close(status[0]);
    workers_.push_back(std::move(w));
    if (exec_errno != 0) {
      const std::string message =
          "cannot start rank " + std::to_string(plan_.first_rank + i) + ": execve(" + plan_.path + ") " +
          (exec_errno < 0 ? "did not happen within " + std::to_string(kExecTimeout.count() / 1000) + " s"
                          : std::string("failed: ") + std::strerror(exec_errno));
      stop(std::chrono::milliseconds(0));
      throw Error(ErrorCode::SystemError, message);
    }
  }
}

int WorkerGroup::running() const {
  return static_cast<int>(std::count_if(workers_.begin(), workers_.end(), [](const auto& w) { return w->running; }));
}

bool WorkerGroup::all_succeeded() const {
  if (exits_.size() != workers_.size()) return false;
  return std::all_of(exits_.begin(), exits_.end(), [this](const WorkerExit& e) {
    return e.ok() || std::find(forgiven_.begin(), forgiven_.end(), e.pid) != forgiven_.end();
  });
}

std::vector<pid_t> WorkerGroup::pids() const {
  std::vector<pid_t> out;
  for (const auto& w : workers_) out.push_back(w->pid);
  return out;
}

int WorkerGroup::pump(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, int>> owners;  // worker and stream of fds[1..]
  fds.push_back({signal_fd_, POLLIN, 0});
  for (auto& w : workers_)
    for (int s = 0; s < 2; ++s)
      if (w->fd[s] >= 0) {
        fds.push_back({w->fd[s], POLLIN, 0});
        owners.emplace_back(w.get(), s);
      }
  int ready = ::poll(fds.data(), fds.size(), ms(timeout));
  if (ready < 0 && errno != EINTR) throw Error(ErrorCode::SystemError, errno_text("poll"));

  int stop_signal = 0;
  if (ready > 0 && (fds[0].revents & POLLIN)) {
    signalfd_siginfo info{};
    while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      if (info.ssi_signo != SIGCHLD) stop_signal = static_cast<int>(info.ssi_signo);
  }
  char buffer[kReadChunk];
  for (std::size_t i = 1; ready > 0 && i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    auto [w, s] = owners[i - 1];
    const auto stream = s == 0 ? RankOutput::Stream::Out : RankOutput::Stream::Err;
    const ssize_t n = ::read(w->fd[s], buffer, sizeof buffer);
    if (n > 0) {
      outputs_[w->local_rank]->write(stream, std::string_view(buffer, static_cast<std::size_t>(n)));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      outputs_[w->local_rank]->close(stream);
      close_fd(w->fd[s]);
    }
  }
  // Reap on every turn, not only on SIGCHLD: signals of the same kind merge.
  reap();
  return stop_signal;
}

void WorkerGroup::drain(Worker& w, bool until_eof) {
  char buffer[kReadChunk];
  for (int s = 0; s < 2; ++s) {
    const auto stream = s == 0 ? RankOutput::Stream::Out : RankOutput::Stream::Err;
    for (int reads = 0; w.fd[s] >= 0 && reads < kMaxDrainReads; ++reads) {
      const ssize_t n = ::read(w.fd[s], buffer, sizeof buffer);
      if (n > 0) {
        outputs_[w.local_rank]->write(stream, std::string_view(buffer, static_cast<std::size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || errno != EAGAIN || !until_eof) break;
    }
  }
}

void WorkerGroup::close_pipes(Worker& w) {
  for (int s = 0; s < 2; ++s) {
    if (w.fd[s] < 0) continue;
    outputs_[w.local_rank]->close(s == 0 ? RankOutput::Stream::Out : RankOutput::Stream::Err);
    close_fd(w.fd[s]);
  }
}

bool WorkerGroup::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid == 0) return true;  // children remain, none has exited
    if (pid < 0) return false;  // ECHILD: no children at all
    auto it = std::find_if(workers_.begin(), workers_.end(),
                           [pid](const auto& w) { return w->pid == pid && w->running; });
    if (it == workers_.end()) continue;  // an orphan of a worker, reaped as subreaper
    Worker& w = **it;
    w.running = false;
    // Everything the worker wrote before it exited is in the pipe now; a
    // child it left behind may hold the pipe open, so read only what is there.
    drain(w, false);
    close_pipes(w);
    WorkerExit e;
    e.rank = w.rank;
    e.local_rank = w.local_rank;
    e.pid = pid;
    if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
    e.stopped = stopping_;
    exits_.push_back(e);
    if (!e.ok() && !e.stopped && !first_failure_) first_failure_ = e;
  }
}

namespace {

// The processes descended from `root`, from /proc (a process's parent is
// the field after its name, which may hold spaces and parentheses: read
// past the last ')').
std::vector<pid_t> descendants_of(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> parent_of;  // (pid, ppid)
  if (DIR* proc = ::opendir("/proc")) {
    while (const dirent* entry = ::readdir(proc)) {
      char* end = nullptr;
      const long pid = std::strtol(entry->d_name, &end, 10);
      if (pid <= 0 || *end != '\0') continue;
      char path[64], stat[512];
      std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
      const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      const ssize_t n = ::read(fd, stat, sizeof stat - 1);
      ::close(fd);
      if (n <= 0) continue;
      stat[n] = '\0';
      const char* close_paren = std::strrchr(stat, ')');
      char state = 0;
      long ppid = 0;
      if (close_paren && std::sscanf(close_paren + 1, " %c %ld", &state, &ppid) == 2)
        parent_of.emplace_back(static_cast<pid_t>(pid), static_cast<pid_t>(ppid));
    }
    ::closedir(proc);
  }
  std::vector<pid_t> found{root};
  for (std::size_t i = 0; i < found.size(); ++i)
    for (const auto& [pid, ppid] : parent_of)
      if (ppid == found[i]) found.push_back(pid);
  found.erase(found.begin());
  return found;
}

}  // namespace

int WorkerGroup::kill_descendants() {
  std::set<pid_t> killed;  // one that is slow to die is found again
  const auto deadline = Clock::now() + std::chrono::milliseconds(2000);
  do {
    reap();  // a zombie is no one to kill
    const std::vector<pid_t> left = descendants_of(::getpid());
    if (left.empty()) break;
    for (pid_t pid : left)
      if (::kill(pid, SIGKILL) == 0) killed.insert(pid);
    pollfd p{signal_fd_, POLLIN, 0};
    ::poll(&p, 1, 20);
  } while (Clock::now() < deadline);
  return static_cast<int>(killed.size());
}

void WorkerGroup::kill_groups(int signal) {
  for (auto& w : workers_)
    if (w->running && ::kill(-w->pid, signal) != 0) ::kill(w->pid, signal);
}

int WorkerGroup::stop(std::chrono::milliseconds grace) {
  int received = 0;
  stopping_ = true;
  if (running() > 0) {
    kill_groups(SIGTERM);
    bool killed = grace.count() == 0;
    if (killed) kill_groups(SIGKILL);
    auto deadline = Clock::now() + grace;
    for (;;) {
      reap();
      if (running() == 0) break;
      const auto now = Clock::now();
      if (!killed && now >= deadline) {
        kill_groups(SIGKILL);
        killed = true;
        deadline = now + kKillTimeout;
      } else if (killed && now >= deadline) {
        break;  // unkillable (uninterruptible sleep): give up waiting rather than hang
      }
      const int sig = pump(std::min(std::chrono::milliseconds(100),
                                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now)));
      if (sig != 0) {
        received = sig;
        if (!killed) {
          kill_groups(SIGKILL);
          killed = true;
          deadline = Clock::now() + kKillTimeout;
        }
      }
    }
  }
  // What the workers started and left behind goes too, found as kizuna-run's
  // descendants rather than by the workers' process groups: a group that has
  // emptied may by now carry another process's number, and what left its
  // group (setsid) is still a descendant. As subreaper kizuna-run reaps
  // those orphans, so no zombie outlives it.
  left_behind_ = kill_descendants();
  const auto deadline = Clock::now() + std::chrono::milliseconds(2000);
  while (reap() && Clock::now() < deadline) {
    pollfd p{signal_fd_, POLLIN, 0};
    ::poll(&p, 1, 20);
    signalfd_siginfo info{};
    while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      if (info.ssi_signo != SIGCHLD) received = static_cast<int>(info.ssi_signo);
  }
  for (auto& w : workers_) close_pipes(*w);
  stopping_ = false;
  return received;
}

}  // namespace kizuna::run
