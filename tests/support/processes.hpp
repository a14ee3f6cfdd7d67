// tests/support/processes.hpp: ranks as processes, for multi-process tests.
//
// ProcessGroup starts N copies of a program, each with its own environment
// (RANK, WORLD_SIZE, ... set by the caller) and its stdout+stderr captured in
// a temporary file; wait() reaps them all, SIGKILLing whatever is still
// running at the deadline (and reporting it as hung), so a test can never
// hang on a child.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kizuna::test {

// A loopback port the kernel just handed out, free again: rank 0's store
// binds it right after (the usual, small race of MASTER_PORT pickers).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct ProcessResult {
  int exit_code = -1;  // valid when signal == 0
  int signal = 0;      // the signal that ended it, or 0
  bool hung = false;   // still running at the deadline (then SIGKILLed)
  std::string output;  // stdout and stderr
  std::chrono::milliseconds elapsed{0};
  bool ok() const { return !hung && signal == 0 && exit_code == 0; }
};

class ProcessGroup {
 public:
  using Env = std::map<std::string, std::string>;

  ~ProcessGroup() {
    for (auto& p : procs_)
      if (p.running) ::kill(p.pid, SIGKILL), ::waitpid(p.pid, nullptr, 0);
    for (auto& p : procs_) ::unlink(p.log.c_str());
  }

  // Starts argv with the parent's environment plus `env`.
  int start(const std::vector<std::string>& argv, const Env& env) {
    Proc p;
    char path[] = "/tmp/kizuna-proc-XXXXXX";
    const int fd = ::mkstemp(path);
    p.log = path;
    p.started = std::chrono::steady_clock::now();
    p.pid = ::fork();
    if (p.pid == 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(fd);
    p.running = true;
    procs_.push_back(p);
    return static_cast<int>(procs_.size()) - 1;
  }

  pid_t pid(int index) const { return procs_[index].pid; }
  void kill(int index, int sig) { ::kill(procs_[index].pid, sig); }
  // What process `index` has written so far.
  std::string output(int index) const {
    std::ifstream in(procs_[index].log);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // Reaps every process; the ones still running at `deadline` are killed.
  std::vector<ProcessResult> wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<ProcessResult> results(procs_.size());
    for (;;) {
      bool any = false;
      for (std::size_t i = 0; i < procs_.size(); ++i) {
        Proc& p = procs_[i];
        if (!p.running) continue;
        int status = 0;
        if (::waitpid(p.pid, &status, WNOHANG) == p.pid) {
          p.running = false;
          record(results[i], status, p);
        } else {
          any = true;
        }
      }
      if (!any) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        for (std::size_t i = 0; i < procs_.size(); ++i) {
          Proc& p = procs_[i];
          if (!p.running) continue;
          ::kill(p.pid, SIGKILL);
          int status = 0;
          ::waitpid(p.pid, &status, 0);
          p.running = false;
          record(results[i], status, p);
          results[i].hung = true;
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return results;
  }

 private:
  struct Proc {
    pid_t pid = -1;
    bool running = false;
    std::string log;
    std::chrono::steady_clock::time_point started;
  };

  static void record(ProcessResult& r, int status, const Proc& p) {
    r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - p.started);
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    std::ifstream in(p.log);
    std::stringstream text;
    text << in.rdbuf();
    r.output = text.str();
  }

  std::vector<Proc> procs_;
};

}  // namespace kizuna::test
