// tests/support/job.hpp: one command run by a test (kizuna-run,
// mpirun, ip, kizuna-store serve), watched from outside.
//
// Job forks the command into a process group of its own, with the test's
// environment plus `set` and minus `unset`, and its stdout and stderr in a
// temporary file that output() reads at any time (to find a port or a
// message while it runs). wait() reaps it; at the deadline the whole group
// is SIGKILLed and the result says it hung, so a test never hangs on a
// child. The destructor does the same to a job nobody waited for.
//
// Helpers: find_tool() finds a system command (ip, nft, tc), run_command()
// runs one to completion, wait_for() polls a condition until a deadline
// (never a timed assertion: the deadline only stops a hang), alive() asks
// the kernel whether a pid still exists, and read_pid_files() collects what
// the test workers wrote.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kizuna::test {

struct JobResult {
  int exit_code = -1;  // when signal == 0
  int signal = 0;
  bool hung = false;
  std::string output;
  bool ok() const { return !hung && signal == 0 && exit_code == 0; }
};

class Job {
 public:
  using Env = std::map<std::string, std::string>;

  Job(const std::vector<std::string>& argv, const Env& set = {}, const std::vector<std::string>& unset = {}) {
    char path[] = "/tmp/kizuna-job-XXXXXX";
    const int fd = ::mkstemp(path);
    log_ = path;
    // Everything the child needs is built before fork.
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      bool drop = set.count(name) != 0;
      for (const auto& u : unset) drop = drop || u == name;
      if (!drop) env.push_back(entry);
    }
    for (const auto& [k, v] : set) env.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> copy = argv;
    for (auto& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
    ::close(fd);
  }

  ~Job() {
    if (pid_ > 0 && !reaped_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::unlink(log_.c_str());
  }

  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) { ::kill(pid_, sig); }

  std::string output() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Reaps the job; at the deadline SIGKILLs its process group first.
  JobResult wait(std::chrono::milliseconds timeout) {
    JobResult r;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    for (;;) {
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        r.hung = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    reaped_ = true;
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    r.output = output();
    return r;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string log_;
};

// The path of a system tool (ip, nft, tc), or "" when it is not installed.
inline std::string find_tool(const std::string& name) {
  for (const char* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"})
    if (::access((std::string(dir) + "/" + name).c_str(), X_OK) == 0) return std::string(dir) + "/" + name;
  return "";
}

// Runs argv to completion (30 s at most); true on exit 0. `output` gets what
// it printed, or "exit N" when it printed nothing.
inline bool run_command(const std::vector<std::string>& argv, std::string& output) {
  Job job(argv);
  const JobResult r = job.wait(std::chrono::seconds(30));
  output = r.output.empty() ? "exit " + std::to_string(r.exit_code) : r.output;
  while (!output.empty() && output.back() == '\n') output.pop_back();
  return r.ok();
}

// Polls `condition` every 20 ms until it holds (true) or the deadline passes (false).
inline bool wait_for(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// Whether a process with this pid exists (a zombie counts: it is not gone).
inline bool alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

// The pids the test workers wrote: "<rank>.pid" files holding one or more
// pids (the worker's, then any child it started), by rank.
inline std::map<int, std::vector<pid_t>> read_pid_files(const std::string& dir) {
  std::map<int, std::vector<pid_t>> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 5 || name.substr(name.size() - 4) != ".pid") continue;
    std::ifstream in(dir + "/" + name);
    pid_t pid = 0;
    auto& pids = out[std::atoi(name.c_str())];
    while (in >> pid) pids.push_back(pid);
  }
  ::closedir(d);
  return out;
}

// A fresh empty directory under /tmp, removed with its contents by the destructor.
class TempDir {
 public:
  TempDir() {
    char path[] = "/tmp/kizuna-launcher-XXXXXX";
    path_ = ::mkdtemp(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kizuna::test
