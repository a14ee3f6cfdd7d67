// comm/comm_impl.hpp: what a Communicator is made of, and who does what.
//
// Communicator::Impl is shared by the public object, the worker thread and
// the Work handles of queued calls; its methods live in one file per
// responsibility:
//
//   communicator.cpp   the public API: argument checks (comm/call.hpp),
//                      creation, split, abort
//   shrink.cpp         shrink: the survivors agree on the failed ranks
//                      (comm/agreement.hpp) and build a new communicator
//   grow.cpp           grow and join: processes join a running group
//   setup.cpp          creation's body: settings, bootstrap, the tuning
//                      table, symmetric memory, mailboxes, staging, device
//   dispatch.cpp       the queue and the worker; a caller that runs its own
//                      call (the mailboxes' and small calls' direct way);
//                      host sends and receives handed to comm/p2p.hpp
//   execute.cpp        running one task: the common pre-step, the route,
//                      then the route's own way (comm/route.hpp)
//   device_calls.cpp   calls on device buffers: GPU to GPU, or staged
//   failure.cpp        a failed call: the stuck-rank report, telling the
//                      peers, failing what is queued
//
// Threading: calls arrive on any thread. Tasks run one at a time, under
// exec_mutex, on the worker or on a caller that waits (run_inline) or runs
// its own call at once (try_direct, try_small); the queue and the
// sequence gate are under queue_mutex (see `gate`). The error state is
// under error_mutex and read through `broken`.
#pragma once

#include <kizuna/comm.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "algo/schedule.hpp"
#include "comm/bootstrap.hpp"
#include "comm/call.hpp"
#include "comm/device_backend.hpp"
#include "comm/device_steps.hpp"
#include "comm/executor.hpp"
#include "comm/history.hpp"
#include "comm/mailbox.hpp"
#include "comm/p2p.hpp"
#include "comm/route.hpp"
#include "comm/staged_call.hpp"
#include "comm/symmetric.hpp"
#include "comm/tuning.hpp"
#include "comm/work_state.hpp"
#include "core/futex_mutex.hpp"

namespace kizuna {

namespace comm {

// Sequence-number spaces of message tags: collectives count up from 1;
// KIZUNA_CHECK's fingerprints have their own space so they never disturb
// the collectives' agreement on sequence numbers. (Point to point travels
// apart: comm/p2p.hpp.)
inline constexpr std::uint64_t kCheckTag = 1ull << 62;

// One call on its way: queued, running, or done.
struct Task {
  Call call;
  Buffers buffers = Buffers::Host;
  Route route = Route::Schedule;  // decided as it starts to run (execute)
  std::uint64_t seq = 0;          // collectives only
  std::uint64_t history_id = 0;
  std::chrono::steady_clock::time_point queued_at;
  std::shared_ptr<kizuna::detail::WorkState> work;  // null for a direct call until it needs one
  // Started and left part-run (a direct call that yielded): what it runs,
  // kept alive until it ends, and the deadline it runs to.
  bool running = false;
  std::shared_ptr<const algo::RankSchedule> schedule;
  RunLabel label;
  std::chrono::steady_clock::time_point deadline;
  // A part of a device call staged through host memory: the call, and
  // which of its parts this task reduces (each part a task of its own,
  // with its own seq).
  std::shared_ptr<StagedCall> staged;
  std::size_t part = 0;
  std::string part_label;
  // Symmetric buffers: their allocations, kept mapped until it has run.
  std::shared_ptr<const void> pinned_input, pinned_output;
};

}  // namespace comm

struct Communicator::Impl : std::enable_shared_from_this<Communicator::Impl> {
  using Clock = std::chrono::steady_clock;
  using Task = comm::Task;

  // --- identity, settings and what creation set up (setup.cpp)
  CommOptions options;
  int rank = 0;
  int world = 1;
  std::string name;
  comm::Tuning tuning;
  comm::ProfileKey profile_key;  // which section of a tuning profile fits (buffers: private)
  comm::Topology topology;
  std::unique_ptr<comm::ShmSegments> shm;  // before links: it must outlive them
  std::vector<std::unique_ptr<transport::Link>> links;
  std::unique_ptr<comm::Executor> executor;
  std::unique_ptr<comm::SymmetricMemory> symmetric;  // one node sharing memory; else null
  std::shared_ptr<void> mailbox_memory;               // declared first: it outlives the mailbox
  std::unique_ptr<comm::Mailbox> mailbox;             // null where there is none
  std::unique_ptr<comm::DeviceBackend> device;        // null: a CPU communicator
  std::shared_ptr<comm::P2pEngine> p2p;               // host sends and receives (comm/p2p.hpp)
  comm::Paths paths;
  comm::History history;
  comm::LiveProgress live;
  std::uint64_t dump_handle = 0;
  int split_count = 0;
  int shrink_count = 0;
  // The name of the communicator this one descends from by shrink() and
  // grow(), or its own: where processes join it (grow.cpp).
  std::string group;

  // `profile`: whether rank 0's tuning profile may decide (false while
  // calibrating, whose communicators each force one candidate).
  static std::shared_ptr<Impl> create(const CommOptions& options, bool profile = true);
  // "kizuna/comm<N>", N counting this process's communicators of that
  // store (CommOptions::name).
  static std::string default_name(const Store* store);
  // How long set-up may take: CommOptions.setup_timeout, else
  // KIZUNA_STORE_TIMEOUT (creation, shrink, grow and join alike).
  static std::chrono::milliseconds setup_timeout(const CommOptions& options);
  void set_up_executor();
  void set_up_node_memory(const comm::NodeWait& wait, Clock::time_point deadline);
  void set_up_device(Clock::duration setup);
  ~Impl();

  // --- the queue and the worker (dispatch.cpp)
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<std::shared_ptr<Task>> queue;
  bool stopping = false;
  // Waking the worker for every call costs two thread switches per call,
  // most of a small all-reduce's time when ranks outnumber cores. So a
  // call wakes it only when the last call was not run by a caller that
  // waited for it at once (callers_wait false), when it sleeps without a
  // deadline (worker_asleep) or when it naps long (worker_napping_long);
  // otherwise it finds the call at its next nap's end
  // (docs/tuning.md#direct-calls).
  bool callers_wait = false;
  bool worker_asleep = false;
  // The worker's naps while callers wait: tuning.worker_nap while calls
  // are being queued, doubling up to tuning.awake while none is (callers
  // run theirs directly, and a wake-up every nap would take a core from
  // them). A call queued during a long nap wakes it (worker_napping_long).
  Clock::duration worker_nap_now{};
  bool worker_napping_long = false;
  std::uint64_t queued_count = 0;  // calls queued so far
  std::atomic<Clock::time_point> last_enqueue{};
  // The last call queued (under queue_mutex): point-to-point calls start
  // once it is done.
  std::weak_ptr<detail::WorkState> last_queued;
  // The next collective's sequence number, shifted left by one, and in the
  // lowest bit whether try_small's way is closed: it is open while
  // callers wait for their calls at once (callers_wait), nothing is queued
  // and the communicator is not stopping. Changed under queue_mutex, but
  // for try_small, which takes a number from an open gate with one
  // compare-exchange instead of the queue's lock (with exec_mutex held, so
  // that nothing runs meanwhile): a thread that queues a call closes the
  // gate before it takes a number, so a call taken that way never runs
  // ahead of one queued before it.
  std::atomic<std::uint64_t> gate{(1 << 1) | 1};  // number 1, closed
  core::FutexMutex exec_mutex;                     // held while a task runs
  // The communicator whose exec_mutex this thread holds, if any: a Work's
  // callback, which runs while its task's thread still holds it, may call
  // and wait on the same communicator (a torch future's callback does),
  // and its calls then run on this thread, without taking the lock again.
  static thread_local const Impl* holding_exec;
  struct HoldingExec {
    const Impl* previous;
    explicit HoldingExec(const Impl* impl) : previous(holding_exec) { holding_exec = impl; }
    ~HoldingExec() { holding_exec = previous; }
    HoldingExec(const HoldingExec&) = delete;
    HoldingExec& operator=(const HoldingExec&) = delete;
  };
  std::thread worker;
  std::atomic<std::thread::id> inline_runner{};  // the thread in run_inline, if any

  Work submit(const comm::Call& call);
  Work submit_p2p(const comm::Call& call, int tag);
  // A send or receive as the point-to-point engine takes it, with a Work.
  static comm::P2pOp p2p_op(const comm::Call& call, int tag, Clock::time_point deadline);
  std::optional<Work> try_small(const comm::Call& call);
  std::optional<Work> try_direct(Task& t);
  Work queue_part_run(Task t, std::unique_lock<core::FutexMutex>& exec);
  void push_queued(const std::vector<std::shared_ptr<Task>>& tasks);
  void start();
  void shutdown();
  void worker_loop();
  void close_gate() { gate.fetch_or(1, std::memory_order_relaxed); }
  void open_gate() { gate.fetch_and(~std::uint64_t{1}, std::memory_order_relaxed); }
  std::unique_lock<core::FutexMutex> take_exec_briefly();
  void run_inline(const std::shared_ptr<Task>& task);
  void run_through(const std::shared_ptr<Task>& task, bool at_once);
  void record_queued(Task& t, bool direct = false);
  void make_work(const std::shared_ptr<Task>& task);

  // --- running one task (execute.cpp)
  // (collective, algorithm, root, count, element size, block stride): see
  // schedule_key().
  using ScheduleKey = std::tuple<int, int, int, std::uint64_t, std::uint64_t, std::uint64_t>;
  // Schedules of recent calls: training repeats the same few shapes, and a
  // small all-reduce should not pay for building its schedule every time.
  std::map<ScheduleKey, std::shared_ptr<const algo::RankSchedule>> schedules;
  // The last collective's plan (plan_for).
  struct Plan {
    algo::Collective collective = algo::Collective::AllReduce;
    int root = 0;
    std::uint64_t count = 0;
    std::size_t elem = 0;
    comm::Buffers buffers = comm::Buffers::Host;  // whose table chose (comm/route.hpp)
    comm::Placement placement = comm::Placement::Unknown;  // and at which placement
    algo::Algorithm algorithm = algo::Algorithm::Ring;
    std::shared_ptr<const algo::RankSchedule> schedule;  // null: no plan yet
  } last_plan;
  std::vector<unsigned char> scratch;

  bool symmetric_may_count(const comm::Call& call) const;
  comm::Buffers kind_of(const comm::Call& call) const;
  comm::Buffers classify(Task& t) const;
  comm::Route route_for(const Task& t) const;
  bool run_task(Task& t, Clock::duration patience = comm::Executor::kHoldOn);
  bool execute(Task& t, Clock::duration patience);
  void verify_fingerprints(const Task& t, Clock::time_point deadline, comm::RunLabel what);
  bool run_mailbox(Task& t, Clock::duration patience);
  bool run_symmetric(Task& t);
  bool run_schedule(Task& t, Clock::duration patience);
  const Plan& plan_for(const comm::Call& call, comm::Buffers buffers);
  bool start_schedule(Task& t, const Plan& p, Clock::duration patience);
  void run_p2p(Task& t, Clock::time_point deadline);
  void finish_collective(const Task& t);
  algo::Algorithm choose(const comm::Call& call, comm::Buffers buffers, comm::Placement placement) const;
  // Where the CPUs are, as every rank agrees for the call about to run
  // (SymmetricMemory::agreed_placement; Unknown without symmetric memory).
  // Read it only where calls run in order: by the call's runner, under the
  // executor's lock, with every earlier call of this rank done.
  comm::Placement placement_now() const {
    return symmetric ? symmetric->agreed_placement() : comm::Placement::Unknown;
  }
  algo::ScheduleRequest request_for(const comm::Call& call, algo::Algorithm a, std::uint64_t count) const;
  static ScheduleKey schedule_key(const algo::ScheduleRequest& req);
  std::shared_ptr<const algo::RankSchedule> schedule_for(const algo::ScheduleRequest& req);
  bool holds_result(const comm::Call& call) const;
  comm::RunLabel label(const Task& t, std::string_view algorithm) const;

  // --- device calls (device_calls.cpp)
  // Device collectives run GPU to GPU (device->launch) when every rank's
  // device joined at creation. Their schedules, encoded, by ScheduleKey,
  // under direct_mutex.
  std::atomic<int> direct_in_flight{0};
  std::mutex direct_mutex;
  std::uint64_t direct_seq = 0;
  std::map<ScheduleKey, std::pair<std::vector<kernels::DeviceStep>, std::uint64_t>> direct_tables;
  std::mutex stage_mutex;  // held while a staged call is enqueued (see enqueue_device)

  Work submit_device(const comm::Call& call, DeviceStream stream);
  Work launch_direct(const comm::Call& call, const comm::StageRequest& r);
  Work enqueue_device(const comm::Call& call, comm::StageRequest r);

  // --- failures (failure.cpp)
  mutable std::mutex error_mutex;  // set once, when the communicator becomes unusable
  std::exception_ptr fatal;
  std::atomic<bool> broken{false};
  // The rank whose loss made it unusable (PeerLost, seen here or in a
  // peer's notice), or -1: what shrink() brings as this rank's suspect.
  std::atomic<int> lost_rank{-1};
  // After a timeout, the other ranks follow their stuck-rank reports
  // through the store, which this process may host: shutdown() keeps it up
  // until then (steady_clock ticks; set by whichever thread ran the task).
  std::atomic<Clock::rep> keep_store_until{0};

  std::string report(std::size_t limit = comm::History::kSize) const;
  [[noreturn]] void throw_unusable() const;
  Error explain_timeout(const Error& e, std::uint64_t seq);
  Error call_error(const std::exception& raw, const Task& t);
  void fail(const Error& e);
  void fail_queued(const std::exception_ptr& error);
  void watch_peers();
};

}  // namespace kizuna
