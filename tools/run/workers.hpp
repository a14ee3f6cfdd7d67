// run/workers.hpp: this node's workers, as processes.
//
// WorkerGroup starts one process per local rank (fork + execve of a program
// resolved before any fork), reads their output through pipes, reaps them,
// and stops them. It is driven by kizuna-run's event loop: pump() waits for
// at most a given time for output, exits or a signal, and handles what came.
//
// Each worker runs in a process group of its own, so that stopping it also
// stops whatever it started; it gets PR_SET_PDEATHSIG(SIGKILL), so that it
// dies with kizuna-run even when kizuna-run is SIGKILLed (checked against the
// race where kizuna-run died before the prctl); its stdin is /dev/null and
// every other inherited descriptor is closed. kizuna-run makes itself a
// child subreaper, so that a worker's orphaned children are reaped here
// rather than left as zombies.
//
// Signals: kizuna-run blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP in every
// thread and reads them from a signalfd, which pump() polls; workers start
// with an empty mask and default dispositions.
//
// Ownership: owns the pipes and the child processes; the destructor SIGKILLs
// and reaps whatever still runs. Threading: one thread, the one that created
// it (PR_SET_PDEATHSIG follows the thread that forks). Blocking: pump() for at
// most its timeout; start() until each worker has exec'd (at most
// kExecTimeout); stop() for at most the grace period plus kKillTimeout.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "output.hpp"

namespace kizuna::run {

struct WorkerExit {
  int rank = -1;
  int local_rank = -1;
  pid_t pid = -1;
  int exit_code = -1;  // when signal == 0
  int signal = 0;
  bool stopped = false;  // ended by kizuna-run's stop()

  bool ok() const { return signal == 0 && exit_code == 0; }
  // "exited with code 3", "was killed by signal 9 (Killed)"
  std::string how() const;
};

// What every worker runs.
struct WorkerPlan {
  std::string path;               // resolved program
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  int first_rank = 0;             // global rank of local rank 0
  int count = 1;                  // local workers
  std::vector<int> cpus;          // the CPU each worker is pinned to (empty: none)
};

class WorkerGroup {
 public:
  static constexpr std::chrono::milliseconds kExecTimeout{30'000};
  static constexpr std::chrono::milliseconds kKillTimeout{10'000};

  WorkerGroup(WorkerPlan plan, const OutputOptions& output, int signal_fd);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts every worker for `round`; local rank i gets environment[i]
  // ("NAME=value" entries, complete). Throws kizuna::Error(SystemError) when
  // a worker cannot be started (fork, pipes, execve: "cannot execute ...");
  // the ones already started are then stopped.
  void start(int round, const std::vector<std::vector<std::string>>& environment);

  // Starts another worker for `local_rank` in this round (elastic jobs: a
  // replacement for one that died), with `environment`. Throws as start().
  void replace(int local_rank, const std::vector<std::string>& environment);
  // The failure of worker `pid` does not fail the round (elastic jobs: the
  // others went on without it): all_succeeded() passes over it.
  void forgive(pid_t pid);

  // Waits up to `timeout` for worker output, worker exits or a signal, and
  // handles them. Returns SIGINT, SIGTERM or SIGHUP when one arrived, else 0.
  int pump(std::chrono::milliseconds timeout);

  // The first worker of this round that failed, in the order they were reaped.
  const std::optional<WorkerExit>& first_failure() const { return first_failure_; }
  // Every worker of this round has exited, with 0 or forgiven.
  bool all_succeeded() const;
  int running() const;

  // SIGTERM to every running worker's process group, SIGKILL to each group
  // after `grace` (or at once when SIGINT/SIGTERM arrives again meanwhile),
  // then SIGKILL to every process still descended from kizuna-run (what the
  // workers started and left behind, in their groups or not), and reaps
  // them all. Also after a round whose workers all exited. Returns a signal
  // received meanwhile, else 0.
  int stop(std::chrono::milliseconds grace);
  // Processes the last stop() found left behind by workers that had exited.
  int left_behind() const { return left_behind_; }

  const std::vector<WorkerExit>& exits() const { return exits_; }
  const RankOutput& output(int local_rank) const { return *outputs_[local_rank]; }
  std::vector<pid_t> pids() const;

 private:
  struct Worker;

  // Reaps every child that exited (workers, and orphans of workers);
  // returns whether kizuna-run still has children.
  bool reap();
  void spawn(int local_rank, const std::vector<std::string>& environment);
  void drain(Worker& w, bool until_eof);
  void close_pipes(Worker& w);
  void kill_groups(int signal);
  // SIGKILL to every descendant of this process, until none is left or 2 s
  // have passed, reaping them; returns how many were killed.
  int kill_descendants();

  WorkerPlan plan_;
  int signal_fd_;
  int devnull_ = -1;
  std::vector<std::unique_ptr<RankOutput>> outputs_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<WorkerExit> exits_;
  std::optional<WorkerExit> first_failure_;
  std::vector<pid_t> forgiven_;
  int round_ = 0;
  bool stopping_ = false;
  int left_behind_ = 0;
};

// Resolves `program` as execvp would (a name without '/' is looked up in
// PATH); throws kizuna::Error(InvalidArgument) saying why it cannot run.
std::string resolve_program(const std::string& program);

// "SIGTERM", "SIGKILL", ... for the common signals; "signal N" otherwise.
std::string signal_name(int signal);

}  // namespace kizuna::run
