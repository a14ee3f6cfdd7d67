// kizuna-run: the launcher, what torchrun is to PyTorch.
//
//   kizuna-run [--nproc-per-node N|auto] [--nnodes M] [--node-rank K]
//              [--master-addr A] [--master-port P] [--max-restarts R]
//              [--log-dir DIR] [--tee] [--timeout S] [--] program [args...]
//
// One kizuna-run per node starts that node's workers and watches them:
//
//   node 0's kizuna-run                      node K's kizuna-run
//   hosts the store (run/rendezvous.hpp) <-- connects, retrying (--timeout)
//   checks every node's settings ----------> waits for the verdict
//   reserves round 0's MASTER_PORT --------> waits for it
//   round 0: starts workers                  round 0: starts workers
//     torchrun's RANK, ..., MASTER_PORT (for torch's own store), and
//     KIZUNA_STORE, KIZUNA_STORE_PREFIX=run<id>/round0
//   event loop: worker output -> "[rank] line"; exits; signals; the store's
//   news from other nodes (a failure, "over")
//   a worker fails -> stop the others, say who and how, restart (round 1,
//   a fresh prefix and MASTER_PORT) while --max-restarts allows; the other nodes see the
//   failure through the store and restart too
//   all workers exit 0 -> exit barrier: wait for every node's "done"
//
// Signals (SIGCHLD, SIGINT, SIGTERM, SIGHUP) are blocked in every thread and
// read from a signalfd in the event loop; SIGINT/SIGTERM/SIGHUP stop every
// worker. The launcher is a child subreaper, so orphans of workers are reaped
// here, and each worker dies with it (PR_SET_PDEATHSIG).
//
// Exit status: 0 every worker succeeded; 1 a worker failed with no restarts
// left, or the rendezvous failed; 2 bad usage (a flag or a KIZUNA_*
// variable); 128+N stopped by signal N.
#include <kizuna/error.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "common/usage.hpp"
#include "run/blame.hpp"
#include "run/options.hpp"
#include "run/output.hpp"
#include "run/rendezvous.hpp"
#include "run/status.hpp"
#include "run/workers.hpp"

extern char** environ;

namespace {

using namespace kizuna;
using namespace kizuna::run;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// SIGTERM first; SIGKILL when a worker is still there this much later.
constexpr milliseconds kStopGrace{5'000};
constexpr milliseconds kFailGrace{3'000};  // for the others to fail on their own after the first

// The variables kizuna-run sets for every worker (docs/launcher.md): the
// ones torchrun sets, so that a torch script runs unchanged, and kizuna's.
const std::set<std::string> kWorkerVariables = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
    "KIZUNA_STORE", "KIZUNA_STORE_PREFIX",
};

std::string g_tag = "kizuna-run";
int g_signal_fd = -1;

void say(const std::string& line) { write_all(STDERR_FILENO, g_tag + ": " + line + "\n"); }

// Waits up to `timeout` for a signal; reaps whatever child exited meanwhile
// (orphans of workers). Returns SIGINT, SIGTERM or SIGHUP, or 0.
int wait_signal(milliseconds timeout) {
  pollfd p{g_signal_fd, POLLIN, 0};
  ::poll(&p, 1, static_cast<int>(timeout.count()));
  int stop = 0;
  signalfd_siginfo info{};
  while (::read(g_signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
    if (info.ssi_signo != SIGCHLD) stop = static_cast<int>(info.ssi_signo);
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  return stop;
}

// "0,1,2,3"
std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (int c : cpus) out += (out.empty() ? "" : ",") + std::to_string(c);
  return out;
}

void idle(milliseconds timeout) {
  if (const int sig = wait_signal(timeout)) throw Interrupted{sig};
}

// kizuna-run's environment without the variables it sets itself.
std::vector<std::string> inherited_environment() {
  std::vector<std::string> out;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    if (!kWorkerVariables.count(text.substr(0, text.find('=')))) out.push_back(text);
  }
  return out;
}

struct Outcome {
  enum Kind { Success, LocalFailure, RemoteFailure, Over, Signal, StoreLost, BarrierTimeout };
  Kind kind = Success;
  std::string text;
  int signal = 0;
};

class Launcher {
 public:
  explicit Launcher(const RunOptions& options) : o_(options) {}

  int run() {
    const std::string path = resolve_program(o_.program[0]);
    Rendezvous rdzv(o_, idle);
    rdzv.agree();
    WorkerPlan plan{path, o_.program, o_.node_rank * o_.nproc_per_node, o_.nproc_per_node,
                    binding(o_.bind, o_.nproc_per_node)};
    WorkerGroup group(plan, OutputOptions{o_.log_dir.empty() || o_.tee, o_.log_dir}, g_signal_fd);
    const int world = o_.nnodes * o_.nproc_per_node;
    // Said to the other nodes in front of what this one reports.
    const std::string nodes = o_.nnodes > 1 ? "node " + std::to_string(o_.node_rank) + ": " : "";
    say("starting " + std::to_string(o_.nproc_per_node) + " worker" + (o_.nproc_per_node == 1 ? "" : "s") +
        " (ranks " + std::to_string(plan.first_rank) + "-" + std::to_string(plan.first_rank + plan.count - 1) +
        " of " + std::to_string(world) + (o_.nnodes > 1 ? " on " + std::to_string(o_.nnodes) + " nodes" : "") +
        (o_.nproc_source.empty() ? "" : "; " + o_.nproc_source) + "), store " + rdzv.store_address() + ", run " + rdzv.run_id() +
        (o_.log_dir.empty() ? "" : ", output in " + o_.log_dir + "/rank<R>.log") +
        (plan.cpus.empty() ? "" : ", bound to CPUs " + cpu_list(plan.cpus)));

    const std::vector<std::string> inherited = inherited_environment();
    inherited_ = inherited;
    for (int round = 0;; ++round) {
      try {
        group.start(round, environments(inherited, rdzv, round));
      } catch (const Error& e) {
        say(e.what());
        give_up(rdzv, nodes + e.what());
        return 1;
      } catch (const Interrupted& i) {  // waiting for node 0's MASTER_PORT
        say("got " + signal_name(i.signal) + " before round " + std::to_string(round) + "'s workers started");
        give_up(rdzv, nodes + "kizuna-run got " + signal_name(i.signal));
        return 128 + i.signal;
      }
      Outcome outcome = supervise(group, rdzv, round);
      if (outcome.kind == Outcome::Success && rdzv.multi_node()) outcome = exit_barrier(rdzv, round);
      if (outcome.kind == Outcome::Success) {
        // What the workers left running goes, as after a failure.
        const int late = group.stop(std::chrono::milliseconds(0));
        if (group.left_behind() > 0)
          say("killed " + std::to_string(group.left_behind()) + " process" +
              (group.left_behind() == 1 ? "" : "es") + " the workers left running");
        if (late != 0) {
          give_up(rdzv, nodes + "kizuna-run got " + signal_name(late));
          return 128 + late;
        }
        try {
          rdzv.leave(o_.timeout);
        } catch (...) {
          // Finished anyway: a node that cannot say goodbye changes nothing.
        }
        if (lost_ > 0)
          say("every worker still in the job exited with code 0 (" + std::to_string(lost_) + " lost, " +
              std::to_string(replacements_) + " replaced along the way)");
        else
          say("all " + std::to_string(world) + " workers exited with code 0");
        return 0;
      }

      std::string failure;
      switch (outcome.kind) {
        case Outcome::LocalFailure: failure = report_local_failure(group, rdzv, round); break;
        case Outcome::RemoteFailure:
          failure = outcome.text;
          say("another node failed: " + outcome.text);
          break;
        case Outcome::Over: say("the job is over: " + outcome.text); break;
        case Outcome::Signal: say("got " + signal_name(outcome.signal) + ": stopping the workers"); break;
        case Outcome::StoreLost: say("lost the job's store at " + rdzv.store_address() + ": " + outcome.text); break;
        case Outcome::BarrierTimeout: say(outcome.text); break;
        case Outcome::Success: break;
      }
      int sig = 0;
      if (outcome.kind == Outcome::LocalFailure || outcome.kind == Outcome::RemoteFailure)
        sig = let_workers_fail(group);
      // Stopped in any case; at once when a signal came while they were let fail.
      const int late = stop_workers(group, sig != 0);
      if (sig == 0) sig = late;
      if (sig != 0 && outcome.kind != Outcome::Signal) {
        outcome.kind = Outcome::Signal;
        outcome.signal = sig;
      }
      if (outcome.kind == Outcome::LocalFailure || outcome.kind == Outcome::RemoteFailure)
        print_status_table(group);
      // The rank whose failure ended the job, now that the others have
      // failed too: not always the first one reaped (run/blame.hpp).
      if (outcome.kind == Outcome::LocalFailure) failure = cause_of(group, failure);

      const bool failed = outcome.kind == Outcome::LocalFailure || outcome.kind == Outcome::RemoteFailure;
      if (failed && round < o_.max_restarts && o_.elastic_min == 0) {
        say("restarting the workers (restart " + std::to_string(round + 1) + " of " +
            std::to_string(o_.max_restarts) + ", store prefix " + rdzv.round_prefix(round + 1) + ")");
        continue;
      }
      if (failed) {
        say("job failed: " + failure +
            (o_.max_restarts > 0 ? " (all " + std::to_string(o_.max_restarts) + " restarts used)" : ""));
        give_up(rdzv, failure);
        return 1;
      }
      if (outcome.kind == Outcome::Signal) {
        give_up(rdzv, nodes + "kizuna-run got " + signal_name(outcome.signal));
        return 128 + outcome.signal;
      }
      give_up(rdzv, outcome.text);
      return 1;
    }
  }

 private:
  std::vector<std::vector<std::string>> environments(const std::vector<std::string>& inherited,
                                                     Rendezvous& rdzv, int round) const {
    std::vector<std::vector<std::string>> out;
    const int world = o_.nnodes * o_.nproc_per_node;
    const int master_port = rdzv.master_port(round);
    for (int local = 0; local < o_.nproc_per_node; ++local) {
      std::vector<std::string> env = inherited;
      const int rank = o_.node_rank * o_.nproc_per_node + local;
      env.push_back("RANK=" + std::to_string(rank));
      env.push_back("LOCAL_RANK=" + std::to_string(local));
      env.push_back("WORLD_SIZE=" + std::to_string(world));
      env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(o_.nproc_per_node));
      env.push_back("NODE_RANK=" + std::to_string(o_.node_rank));
      // torchrun's names: a node is a "group", and every worker plays the
      // one role, "default", so role ranks are the ranks.
      env.push_back("GROUP_RANK=" + std::to_string(o_.node_rank));
      env.push_back("GROUP_WORLD_SIZE=" + std::to_string(o_.nnodes));
      env.push_back("ROLE_NAME=default");
      env.push_back("ROLE_RANK=" + std::to_string(rank));
      env.push_back("ROLE_WORLD_SIZE=" + std::to_string(world));
      // Where rank 0 may start a store of its own: torch's env:// starts its
      // TCPStore there. Not kizuna's store, which torch cannot speak to.
      env.push_back("MASTER_ADDR=" + o_.store_host());
      env.push_back("MASTER_PORT=" + std::to_string(master_port));
      // False: no agent store at MASTER_PORT, so rank 0 hosts the TCPStore
      // (True, inherited from a torchrun above us, would make every rank a
      // client of a store nobody hosts). The run id makes
      // torch.distributed.is_torchelastic_launched() true, which libraries
      // read as "the launcher's variables are there".
      env.push_back("TORCHELASTIC_USE_AGENT_STORE=False");
      env.push_back("TORCHELASTIC_RUN_ID=" + rdzv.run_id());
      env.push_back("TORCHELASTIC_RESTART_COUNT=" + std::to_string(round));
      env.push_back("TORCHELASTIC_MAX_RESTARTS=" + std::to_string(o_.max_restarts));
      env.push_back("KIZUNA_STORE=" + rdzv.store_address());
      env.push_back("KIZUNA_STORE_PREFIX=" + rdzv.round_prefix(round));
      if (!o_.port_range.empty()) {  // the flag over the environment's
        std::erase_if(env, [](const std::string& e) { return e.rfind("KIZUNA_PORT_RANGE=", 0) == 0; });
        env.push_back("KIZUNA_PORT_RANGE=" + o_.port_range);
      }
      out.push_back(std::move(env));
    }
    return out;
  }

  // --elastic: worker `e` failed. While at least MIN others run, the job
  // goes on (the workers shrink their communicator themselves) and, while
  // --max-restarts allows, a replacement starts with KIZUNA_JOIN=1 to join
  // them; false when too few are left.
  bool go_on_without(WorkerGroup& group, const WorkerExit& e, Rendezvous& rdzv, int round) {
    const int running = group.running();
    char when[32];
    std::snprintf(when, sizeof when, " at %.1f s", std::chrono::duration<double>(Clock::now() - began_).count());
    const std::string who = "rank " + std::to_string(e.rank) + " (local rank " + std::to_string(e.local_rank) +
                            ", pid " + std::to_string(e.pid) + ") " + e.how() + when;
    const std::string bounds = std::to_string(o_.elastic_min) + ":" + std::to_string(o_.elastic_max);
    if (running < o_.elastic_min) {
      say(who + "; only " + std::to_string(running) + " worker" + (running == 1 ? "" : "s") +
          " left, fewer than --elastic " + bounds + " allows");
      return false;
    }
    group.forgive(e.pid);
    ++lost_;
    std::string said = who + "; the other " + std::to_string(running) + " go on (--elastic " + bounds + ")";
    if (replacements_ < o_.max_restarts) {
      std::vector<std::string> env = environments(inherited_, rdzv, round).at(e.local_rank);
      env.push_back("KIZUNA_JOIN=1");
      try {
        group.replace(e.local_rank, env);
        ++replacements_;
        said += "; started a replacement that joins them (" + std::to_string(replacements_) + " of " +
                std::to_string(o_.max_restarts) + ")";
      } catch (const Error& error) {
        said += std::string("; could not start a replacement: ") + error.what();
      }
    }
    say(said);
    return true;
  }

  // Runs the event loop until this round is decided.
  Outcome supervise(WorkerGroup& group, Rendezvous& rdzv, int round) {
    auto next_check = Clock::now();
    std::size_t seen = 0;  // exits looked at (--elastic)
    for (;;) {
      const int sig = group.pump(rdzv.multi_node() ? Rendezvous::kPollInterval : milliseconds(1000));
      if (sig != 0) return {Outcome::Signal, "", sig};
      if (o_.elastic_min > 0) {
        for (; seen < group.exits().size(); ++seen) {
          const WorkerExit e = group.exits()[seen];
          if (e.ok() || e.stopped) continue;
          if (!go_on_without(group, e, rdzv, round)) return {Outcome::LocalFailure, ""};
        }
      } else if (group.first_failure()) {
        return {Outcome::LocalFailure, ""};
      }
      if (group.all_succeeded()) return {Outcome::Success, ""};
      if (rdzv.multi_node() && Clock::now() >= next_check) {
        try {
          if (auto why = rdzv.over()) return {Outcome::Over, *why};
          if (auto what = rdzv.failure(round)) return {Outcome::RemoteFailure, *what};
        } catch (const Error& e) {
          return {Outcome::StoreLost, e.what()};
        }
        next_check = Clock::now() + 2 * Rendezvous::kPollInterval;
      }
    }
  }

  // This node's workers all succeeded: wait for every other node's.
  Outcome exit_barrier(Rendezvous& rdzv, int round) {
    const auto deadline = Clock::now() + o_.timeout;
    try {
      rdzv.mark_done(round);
      for (;;) {
        if (rdzv.all_done(round)) return {Outcome::Success, ""};
        if (auto why = rdzv.over()) return {Outcome::Over, *why};
        if (auto what = rdzv.failure(round)) return {Outcome::RemoteFailure, *what};
        if (Clock::now() >= deadline)
          return {Outcome::BarrierTimeout, "this node's workers finished, but the other nodes' did not within --timeout " +
                                               std::to_string(o_.timeout.count() / 1000) + " s"};
        if (const int sig = wait_signal(Rendezvous::kPollInterval)) return {Outcome::Signal, "", sig};
      }
    } catch (const Error& e) {
      return {Outcome::StoreLost, e.what()};
    }
  }

  std::string report_local_failure(const WorkerGroup& group, Rendezvous& rdzv, int round) {
    const WorkerExit& f = *group.first_failure();
    const std::string where = o_.nnodes > 1 ? " on node " + std::to_string(o_.node_rank) : "";
    say("rank " + std::to_string(f.rank) + " (local rank " + std::to_string(f.local_rank) + ", pid " +
        std::to_string(f.pid) + ") " + f.how());
    const auto& tail = group.output(f.local_rank).tail();
    if (tail.empty()) {
      say("rank " + std::to_string(f.rank) + " printed nothing");
    } else {
      std::string text = g_tag + ": last " + std::to_string(tail.size()) + " line" + (tail.size() == 1 ? "" : "s") +
                         " of rank " + std::to_string(f.rank) + ":\n";
      for (const auto& line : tail) text += "  [" + std::to_string(f.rank) + "] " + line + "\n";
      write_all(STDERR_FILENO, text);
    }
    const std::string failure = "rank " + std::to_string(f.rank) + where + " " + f.how();
    try {
      rdzv.report_failure(round, failure);
    } catch (const Error& e) {
      say("cannot tell the other nodes: " + std::string(e.what()));
    }
    return failure;
  }

  // The failure to name in the job's last line: blame() over the workers
  // that failed on their own; `first` (the first reaped) when that names it.
  std::string cause_of(const WorkerGroup& group, const std::string& first) const {
    std::vector<Failed> failures;
    for (const WorkerExit& e : group.exits()) {
      if (e.ok() || e.stopped) continue;
      Failed f;
      f.rank = e.rank;
      f.how = e.how();
      const auto& tail = group.output(e.local_rank).tail();
      f.lines.assign(tail.begin(), tail.end());
      if (const auto& status = group.output(e.local_rank).status()) f.status = *status;
      failures.push_back(std::move(f));
    }
    if (failures.empty()) return first;
    const std::string where = o_.nnodes > 1 ? " on node " + std::to_string(o_.node_rank) : "";
    return describe(blame(failures), where);
  }

  // A collective's failure reaches every rank within a second or two (abort
  // notices, timeouts that expire together): give the other workers that
  // long to fail on their own and say where they were, before stopping
  // them. Returns a stop signal received meanwhile, else 0.
  static int let_workers_fail(WorkerGroup& group) {
    const auto deadline = Clock::now() + kFailGrace;
    while (group.running() > 0 && Clock::now() < deadline)
      if (const int sig = group.pump(milliseconds(100))) return sig;
    return 0;
  }

  // Where each local rank was: its exit and its communicator's status line.
  void print_status_table(const WorkerGroup& group) const {
    std::vector<StatusRow> rows;
    for (int local = 0; local < o_.nproc_per_node; ++local) {
      StatusRow row;
      row.rank = o_.node_rank * o_.nproc_per_node + local;
      row.exit = "still running";
      for (const WorkerExit& e : group.exits())
        if (e.local_rank == local) row.exit = e.stopped ? "stopped by kizuna-run" : e.how();
      row.status = group.output(local).status();
      rows.push_back(std::move(row));
    }
    const std::string table = status_table(rows);
    if (table.empty()) return;  // no collective failed
    const std::string where = o_.nnodes > 1 ? " on node " + std::to_string(o_.node_rank) : "";
    write_all(STDERR_FILENO, g_tag + ": where each rank" + where + " was:\n" + table);
  }

  // Stops what still runs; reports the workers that failed on their own
  // besides the first. Returns a stop signal received meanwhile.
  int stop_workers(WorkerGroup& group, bool at_once = false) {
    const int running = group.running();
    if (running > 0)
      say("stopping " + std::to_string(running) + " worker" + (running == 1 ? "" : "s") +
          (at_once ? " (SIGTERM, then SIGKILL at once: a signal came)"
                   : " (SIGTERM, then SIGKILL after " + std::to_string(kStopGrace.count() / 1000) + " s)"));
    const int sig = group.stop(at_once ? std::chrono::milliseconds(0) : kStopGrace);
    const auto& first = group.first_failure();
    for (const WorkerExit& e : group.exits())
      if (!e.ok() && !e.stopped && (!first || e.pid != first->pid))
        say("rank " + std::to_string(e.rank) + " also " + e.how());
    return sig;
  }

  // Tells the other nodes the job is over, and lets them read it before
  // node 0 takes the store away.
  void give_up(Rendezvous& rdzv, const std::string& why) {
    if (!rdzv.multi_node()) return;
    try {
      rdzv.announce_over(why);
      rdzv.leave(Rendezvous::kLeaveTimeout);
    } catch (...) {
      // The store is gone or a second signal came: nothing left to tell.
    }
  }

  const RunOptions& o_;
  std::vector<std::string> inherited_;  // the environment every worker starts from
  int lost_ = 0;                        // --elastic: workers the job went on without
  int replacements_ = 0;                // --elastic: replacements started
  const Clock::time_point began_ = Clock::now();  // for "when" in --elastic's lines
};

// Descriptors 0-2 open, so that no pipe lands there and a worker's stdout
// is never closed by accident.
void ensure_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", O_RDWR);
}

}  // namespace

int main(int argc, char** argv) {
  RunOptions options;
  try {
    options = parse_options(argc, argv);
  } catch (const tools::UsageError& e) {
    std::fprintf(stderr, "kizuna-run: %s\n%s(kizuna-run --help describes every flag)\n", e.what(), usage_line());
    return tools::kUsageExit;
  }
  if (options.help) {
    std::printf("%s\n%s", usage_line(), help_text().c_str());
    return 0;
  }
  if (options.nnodes > 1) g_tag = "kizuna-run[node " + std::to_string(options.node_rank) + "]";
  ensure_standard_descriptors();

  // Before any thread exists (the store server starts some), so that every
  // thread inherits the mask and the signals queue for the signalfd.
  // A signal the caller set to be ignored (nohup's SIGHUP, SIGINT for a
  // script's background job) stays ignored: blocked, it would still queue
  // for the signalfd and stop the job.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGCHLD);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaddset(&signals, sig);
  }
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a closed console must not kill the launcher
  g_signal_fd = ::signalfd(-1, &signals, SFD_NONBLOCK | SFD_CLOEXEC);
  if (g_signal_fd < 0) {
    say(std::string("signalfd: ") + std::strerror(errno));
    return 1;
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  try {
    tools::check_environment();  // a bad KIZUNA_* variable fails here, before any worker
    return Launcher(options).run();
  } catch (const tools::UsageError& e) {
    say(e.what());
    return tools::kUsageExit;
  } catch (const Interrupted& i) {
    say("stopped by " + signal_name(i.signal) + " before the workers started");
    return 128 + i.signal;
  } catch (const Error& e) {
    say(e.what());
    return 1;
  }
}
