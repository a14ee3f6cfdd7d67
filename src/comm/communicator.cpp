// Communicator: the queue, the worker, fault handling and the collective
// entry points. Schedules come from algo/, bytes move through the executor
// over the links that bootstrap opened.
#include <kizuna/comm.hpp>
#include <kizuna/store.hpp>
#include <kizuna/prefix_store.hpp>
#include <kizuna/tcp_store.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "algo/cost_model.hpp"
#include "algo/schedule.hpp"
#include "comm/bootstrap.hpp"
#include "comm/device_backend.hpp"
#include "comm/device_parts.hpp"
#include "comm/device_steps.hpp"
#include "comm/executor.hpp"
#include "comm/fingerprint.hpp"
#include "comm/history.hpp"
#include "comm/mailbox.hpp"
#include "comm/signal_dump.hpp"
#include "comm/staged_call.hpp"
#include "comm/symmetric.hpp"
#include "comm/work_state.hpp"
#include "core/asymmetric_fence.hpp"
#include "core/check.hpp"
#include "core/coarse_clock.hpp"
#include "core/env.hpp"
#include "core/futex_mutex.hpp"
#include "core/launch_env.hpp"
#include "core/log.hpp"
#include "core/reduce.hpp"
#include "transport/shm/shm_link.hpp"
#include "transport/tcp/interface.hpp"

namespace kizuna {

using Clock = std::chrono::steady_clock;
using algo::Collective;

namespace {

// Sequence-number spaces of message tags: collectives count up from 1;
// point-to-point and KIZUNA_CHECK's fingerprints have their own spaces so
// they never disturb the collectives' agreement on sequence numbers.
constexpr std::uint64_t kCheckTag = 1ull << 62;
constexpr std::uint64_t kP2pTag = 1ull << 63;

// How long the worker leaves a freshly queued call to a caller that may be
// about to wait for it (see worker_loop).
constexpr std::chrono::microseconds kInlineGrace{50};
// How many times a caller looks again for exec_mutex, yielding between
// looks, before it leaves its call to the worker (see take_exec_briefly).
constexpr int kExecTries = 32;
// While callers run their own calls, the worker is not woken per call: it
// naps this long between looks at the queue, for as long as calls keep
// coming (kAwake since the last one), and then sleeps until woken.
constexpr std::chrono::microseconds kWorkerNap{1000};
constexpr std::chrono::milliseconds kAwake{50};
// While device calls are in flight, the idle worker looks this often for a
// peer whose connection closed: their kernels see only their deadline.
constexpr std::chrono::milliseconds kPeerWatch{100};
// The largest collective a waiting caller may run directly, in its own
// thread, before it is queued (see Impl::try_direct): beyond this the
// queue's cost is a small part of the call's.
constexpr std::size_t kDirectBytes = 64 << 10;
// Staging memory per rank, two halves of one round each, for all-reduces
// of private buffers on one node (comm/symmetric.hpp). Measured, 4 ranks
// on 2 cores, 1 and 16 MiB, 5 alternations: 256 KiB or 512 KiB 2.0-2.2
// and 1.6-1.8 GB/s, 1 MiB 1.9-2.1 and 1.5-1.6, 2 MiB 1.5-1.8 and 1.4: the
// rounds of the smaller ones stay in the second-level caches.
constexpr std::size_t kStagingBytes = 512 << 10;
// A device call GPU to GPU runs as parts of at least this size, one block
// each (comm/device_parts.hpp); a guess until measured on a GPU.
constexpr std::size_t kDirectPartBytes = 1 << 20;
// A device call staged through host memory runs as parts of at least this
// size, at most kStagedParts of them, so that the copies to and from the
// device overlap the host collective (comm/staged_call.hpp): a part's
// copy over the host bus takes a fraction of its collective's time.
constexpr std::size_t kStagedPartBytes = 4 << 20;
constexpr int kStagedParts = 64;

// How long a failing rank spends telling its peers why.
constexpr std::chrono::milliseconds kAbortGrace{300};

// What tells stores apart for default_name: a TCP store by its server (a
// store re-created against the same server goes on counting, so that a new
// communicator never meets the keys an earlier one left there), a prefix
// store by its prefix and base, any other by its address (an in-process
// store starts empty).
std::string store_identity(const Store* store) {
  if (const auto* tcp = dynamic_cast<const TcpStore*>(store))
    return "tcp " + tcp->host() + ":" + std::to_string(tcp->port());
  if (const auto* prefixed = dynamic_cast<const PrefixStore*>(store))
    return "prefix " + prefixed->prefix() + " " + store_identity(prefixed->base().get());
  char address[32];
  std::snprintf(address, sizeof address, "at %p", static_cast<const void*>(store));
  return address;
}

std::string default_name(const Store* store) {
  static std::mutex mutex;
  static std::map<std::string, int> created;
  const std::string identity = store_identity(store);
  std::lock_guard lock(mutex);
  return "kizuna/comm" + std::to_string(created[identity]++);
}

// The address to listen on: KIZUNA_SOCKET_IFNAME's, else the one that
// routes to the store's host (a TcpStore's, else MASTER_ADDR's), else loopback.
std::string choose_local_address(Store* store) {
  const core::Env& env = core::Env::get();
  std::string towards;
  if (const auto* tcp = dynamic_cast<const TcpStore*>(store)) towards = tcp->host();
  if (towards.empty() || towards == "*" || towards == "0.0.0.0")
    towards = core::LaunchEnv::from_process().store_host;
  if (towards.empty() || towards == "*" || towards == "0.0.0.0") towards = "127.0.0.1";
  return transport::local_address_for(towards, env.socket_ifname);
}

}  // namespace

struct Task {
  enum class Kind { Collective, Send, Recv };
  Kind kind = Kind::Collective;
  Collective collective = Collective::AllReduce;
  const void* input = nullptr;
  void* output = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;  // root, or the peer of a send/recv
  std::uint64_t seq = 0;
  std::uint64_t history_id = 0;
  std::chrono::steady_clock::time_point queued_at;
  std::shared_ptr<detail::WorkState> work;  // null for a direct call until it needs one
  // A collective the executor has started and left part-run (a direct call
  // that yielded): what it runs, kept alive until it ends.
  bool running = false;
  std::shared_ptr<const algo::RankSchedule> schedule;
  comm::RunLabel label;
  // A device call staged through host memory: the call, and which of its
  // parts this task reduces (a part of a staged call that has several
  // is a task of its own, with its own seq).
  std::shared_ptr<comm::StagedCall> staged;
  std::size_t part = 0;
  std::string part_label;
  // An all-reduce on symmetric memory, decided when it is called: its
  // buffers' allocations, kept mapped until it has run.
  bool symmetric = false;
  std::shared_ptr<const void> pinned_input, pinned_output;
  // The same algorithm on private buffers, through the staging memory.
  bool symmetric_staged = false;
  // A call through the mailboxes (an all-reduce or a barrier), once
  // started: its deadline.
  bool mailbox = false;
  std::chrono::steady_clock::time_point deadline;
};

struct Communicator::Impl : std::enable_shared_from_this<Communicator::Impl> {
  CommOptions options;
  int rank = 0;
  int world = 1;
  std::string name;
  std::chrono::milliseconds timeout{};
  Algorithm algo_override = Algorithm::Auto;
  std::uint64_t slice_bytes = 0;
  bool check = false;
  algo::LinkModel link_model;
  bool single_host = false;    // the cost model may pick one- or two-shot (one node)
  bool hierarchical = false;   // all-reduce goes node-local first (several nodes, shared memory)

  comm::Topology topology;
  std::unique_ptr<comm::ShmSegments> shm;  // before links: it must outlive them
  std::vector<std::unique_ptr<transport::Link>> links;
  std::unique_ptr<comm::Executor> executor;
  // Symmetric memory (comm/symmetric.hpp): on one node joined by shared
  // memory; null elsewhere.
  std::unique_ptr<comm::SymmetricMemory> symmetric;
  std::size_t symmetric_from = 0;  // the smallest all-reduce that takes it, in bytes
  std::size_t staged_from = 0;     // the same with private buffers, through the staging memory
  std::size_t staged_near_from = 0;  // and while the ranks agree their CPUs are near (see execute)
  // The mailboxes (comm/mailbox.hpp) for all-reduces of up to mailbox_upto
  // bytes, in memory of symmetric memory's kind; null where there is none.
  std::shared_ptr<void> mailbox_memory;  // declared first: it outlives the mailbox
  std::unique_ptr<comm::Mailbox> mailbox;
  std::size_t mailbox_upto = 0;
  std::unique_ptr<comm::DeviceBackend> device;  // null: a CPU communicator
  // (collective, algorithm, root, count, element size): see schedule_key().
  using ScheduleKey = std::tuple<int, int, int, std::uint64_t, std::uint64_t>;
  // Device collectives run GPU to GPU (device->launch) rather than staged:
  // every rank's device joined at creation. Their schedules, encoded, by
  // ScheduleKey, under direct_mutex.
  bool direct = false;
  std::atomic<int> direct_in_flight{0};
  std::mutex direct_mutex;
  std::uint64_t direct_seq = 0;
  std::map<ScheduleKey, std::pair<std::vector<kernels::DeviceStep>, std::uint64_t>> direct_tables;
  std::mutex stage_mutex;  // held while a staged call is enqueued (see enqueue_device)
  comm::History history;
  comm::LiveProgress live;
  std::uint64_t dump_handle = 0;
  std::vector<unsigned char> scratch;
  std::vector<std::uint64_t> p2p_sent, p2p_received;
  // Schedules of recent calls: training repeats the same few shapes, and a
  // small all-reduce should not pay for building its schedule every time.
  std::map<ScheduleKey, std::shared_ptr<const algo::RankSchedule>> schedules;

  // Queue: tasks in call order, run by the worker or by a waiting caller.
  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<std::shared_ptr<Task>> queue;
  bool stopping = false;
  // Waking the worker for every call costs two thread switches per call,
  // which is most of a small all-reduce's time when ranks outnumber cores.
  // So enqueue() wakes it only when the last call was not run by a caller
  // that waited for it at once (callers_wait false) or when it sleeps
  // without a deadline (worker_asleep); otherwise it finds the call at its
  // next nap's end.
  bool callers_wait = false;
  bool worker_asleep = false;
  std::atomic<Clock::time_point> last_enqueue{};
  // The next collective's sequence number, shifted left by one, and in the
  // lowest bit whether try_mailbox's way is closed: it is open while
  // callers wait for their calls at once (callers_wait), nothing is queued
  // and the communicator is not stopping. Changed under queue_mutex, but
  // for try_mailbox, which takes a number from an open gate with one
  // compare-exchange instead of the queue's lock (with exec_mutex held, so
  // that nothing runs meanwhile): a thread that queues a call closes the
  // gate before it takes a number, so a call taken that way never runs
  // ahead of one queued before it.
  std::atomic<std::uint64_t> gate{(1 << 1) | 1};  // number 1, closed
  core::FutexMutex exec_mutex;  // held while a task runs
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

  // Set once, when the communicator becomes unusable.
  mutable std::mutex error_mutex;
  std::exception_ptr fatal;
  std::atomic<bool> broken{false};
  // After a timeout, the other ranks follow their stuck-rank reports
  // through the store, which this process may host: shutdown() keeps it up
  // until then (steady_clock ticks; set by whichever thread ran the task).
  std::atomic<Clock::rep> keep_store_until{0};
  int split_count = 0;

  ~Impl() {
    comm::unregister_dump(dump_handle);
    shutdown();
  }

  std::string report(std::size_t limit = comm::History::kSize) const {
    return "kizuna: rank " + std::to_string(rank) + " of " + name + " (" + std::to_string(world) +
           " ranks), recent calls, oldest first:" + history.report(live, "", limit);
  }

  // The worker holds a reference of its own until it ends (see shutdown).
  void start() {
    worker = std::thread([self = shared_from_this()] { self->worker_loop(); });
  }

  void shutdown() {
    {
      std::lock_guard lock(queue_mutex);
      if (stopping) return;
      stopping = true;
      close_gate();
    }
    queue_cv.notify_all();
    // A thread that cannot wait for the worker (the worker itself, or one
    // running calls inline, whose exec_mutex the worker may be waiting for:
    // both happen when a Work callback held the last reference to the
    // Communicator) lets it go instead. The worker runs out the queue, ends,
    // and drops its reference; the last one's release destroys the Impl.
    const auto me = std::this_thread::get_id();
    if (worker.joinable()) {
      if (me == worker.get_id() || me == inline_runner.load())
        worker.detach();
      else
        worker.join();
    }
    for (auto& link : links)
      if (link) link->interrupt();
    std::this_thread::sleep_until(Clock::time_point(Clock::duration(keep_store_until.load())));
  }

  void worker_loop() {
    for (;;) {
      {
        std::unique_lock lock(queue_mutex);
        for (;;) {
          if (stopping && queue.empty()) return;
          const Clock::time_point now = Clock::now();
          if (!queue.empty()) {
            // A call queued a moment ago is most likely about to be waited
            // for: leave it to its caller (Work::wait runs it inline,
            // without two thread switches) for a few tens of microseconds,
            // asleep, so as not to take a core from the caller or a peer.
            const Clock::time_point until = queue.front()->queued_at + kInlineGrace;
            if (stopping || now >= until) break;
            queue_cv.wait_until(lock, until);
          } else if (callers_wait && now - last_enqueue.load(std::memory_order_relaxed) < kAwake) {
            queue_cv.wait_until(lock, now + kWorkerNap);
          } else if (direct_in_flight.load() > 0 && !broken.load()) {
            worker_asleep = true;  // a call queued now wakes it, as below
            queue_cv.wait_until(lock, now + kPeerWatch);
            worker_asleep = false;
            if (queue.empty() && !stopping) {
              lock.unlock();
              watch_peers();
              lock.lock();
            }
          } else {
            worker_asleep = true;
            queue_cv.wait(lock, [&] {
              return stopping || !queue.empty() || (direct_in_flight.load() > 0 && !broken.load());
            });
            worker_asleep = false;
          }
        }
      }
      // exec_mutex is taken only to run, so a caller's run_inline finds it
      // free unless a call is really running.
      std::unique_lock exec(exec_mutex);
      std::shared_ptr<Task> task;
      {
        std::lock_guard lock(queue_mutex);
        if (queue.empty()) continue;  // its caller ran it meanwhile
        task = queue.front();
        queue.pop_front();
        callers_wait = false;
        close_gate();
      }
      const HoldingExec holding(this);
      run_task(*task);
    }
  }

  // With device calls in flight and no host call running: a peer whose
  // connection closed has died, and the kernels waiting for it would only
  // see their deadline. Fail the communicator with PeerLost naming it, and
  // stop the kernels; their Works end with that error.
  void watch_peers() {
    if (holding_exec == this) return;
    std::unique_lock exec(exec_mutex, std::try_to_lock);
    if (!exec || broken.load()) return;
    for (auto& link : links) {
      if (!link || !link->peer_closed()) continue;
      const Error e(ErrorCode::PeerLost, "lost rank " + std::to_string(link->peer()) + " of " + name +
                                             ": its connection closed while device collectives were in flight "
                                             "on rank " + std::to_string(rank));
      {
        std::lock_guard lock(error_mutex);
        if (broken.exchange(true)) return;
        fatal = std::make_exception_ptr(e);
      }
      KIZUNA_LOG(Error) << e.what();
      device->abort();
      return;
    }
  }

  // The gate's lowest bit (see `gate`), under queue_mutex.
  void close_gate() { gate.fetch_or(1, std::memory_order_relaxed); }
  void open_gate() { gate.fetch_and(~std::uint64_t{1}, std::memory_order_relaxed); }

  // exec_mutex for a caller about to run its call itself, unless a call is
  // really running. The worker also holds it for a moment after a call
  // ends (it finishes the Work while holding it, and drops the task): a
  // caller woken by that finish and calling again at once must not take
  // the worker's moment for a running call, or its call is left to the
  // worker after kInlineGrace, and the next one again (measured: 150 us a
  // call for a whole sweep size, on one rank in a third of 2-rank runs).
  std::unique_lock<core::FutexMutex> take_exec_briefly() {
    std::unique_lock exec(exec_mutex, std::try_to_lock);
    for (int tries = 0; !exec && tries < kExecTries; ++tries) {
      std::this_thread::yield();
      exec.try_lock();
    }
    return exec;
  }

  // Work::wait() on a queued task: unless a call is running, run it here,
  // with the calls queued before it (calls run in order).
  void run_inline(const std::shared_ptr<Task>& task) {
    // A callback waiting on this thread, which runs this communicator's
    // calls already: run the new ones here (the one that called back is
    // finished, the executor idle).
    if (holding_exec == this) {
      run_through(task, false);
      return;
    }
    std::unique_lock exec = take_exec_briefly();
    if (!exec) return;
    const HoldingExec holding(this);
    inline_runner.store(std::this_thread::get_id());
    struct Done {
      std::atomic<std::thread::id>& runner;
      ~Done() { runner.store(std::thread::id()); }
    } done{inline_runner};
    // A caller that waits as soon as it calls (a blocking pattern) lets the
    // worker sleep through its calls; one that waits later, as DDP's
    // finalize() does for its last bucket, says nothing about the calls it
    // does not wait for, which still need the worker woken.
    run_through(task, Clock::now() - task->queued_at < kInlineGrace);
  }

  // Runs the queue up to and including `task` (unless something else ran
  // it meanwhile). The caller holds exec_mutex.
  void run_through(const std::shared_ptr<Task>& task, bool at_once) {
    for (;;) {
      std::shared_ptr<Task> next;
      {
        std::lock_guard lock(queue_mutex);
        if (std::find(queue.begin(), queue.end(), task) == queue.end()) return;
        next = queue.front();
        queue.pop_front();
        if (at_once) callers_wait = true;
        if (callers_wait && queue.empty()) open_gate();
      }
      run_task(*next);
      if (next == task) return;
    }
  }

  // Records a call being queued, under queue_mutex. A direct call's time
  // is only a record's, to a few milliseconds (the clock costs a tenth of
  // a small call here); a queued one's is the worker's inline grace's start.
  void record_queued(Task& t, bool direct = false) {
    t.queued_at = direct ? core::coarse_now() : Clock::now();
    const std::string_view kind = t.kind == Task::Kind::Send   ? std::string_view("send to")
                                  : t.kind == Task::Kind::Recv ? std::string_view("recv from")
                                                               : algo::name(t.collective);
    const bool rooted = t.collective == Collective::Broadcast || t.collective == Collective::Reduce;
    t.history_id = history.queued(t.seq, kind, t.dtype, t.count,
                                  t.kind != Task::Kind::Collective || rooted ? t.root : -1);
  }

  // The work handle of a queued task: Work::wait() may run it inline.
  void make_work(const std::shared_ptr<Task>& task) {
    if (!task->work) task->work = std::make_shared<detail::WorkState>();
    std::weak_ptr<Impl> weak = weak_from_this();
    task->work->run_inline = [weak, task] {
      if (auto self = weak.lock()) self->run_inline(task);
    };
  }

  // A small host collective from a caller whose calls are waited for at
  // once, with nothing queued or running: the caller runs it here, without
  // the queue, the worker or a Work to allocate, as a blocking library
  // would. It is held at most kInlineGrace, and never sleeps: a peer that
  // is not there by then leaves the call queued, part-run, for the
  // caller's wait or the worker to finish, so that a caller may still issue
  // further calls (on other communicators too) before it waits.
  std::optional<Work> try_direct(Task& t) {
    if (t.kind != Task::Kind::Collective || check || t.count * size_of(t.dtype) > kDirectBytes)
      return std::nullopt;
    // A call on symmetric memory's path meets its peers and may sleep:
    // queued (a staged one that may take the slots is looked at below).
    if (t.symmetric || (t.symmetric_staged && !may_take_slots(t))) return std::nullopt;
    if (holding_exec == this) return std::nullopt;  // from a callback: queued, and run by its wait
    std::unique_lock exec = take_exec_briefly();
    if (!exec) return std::nullopt;
    const HoldingExec holding(this);
    {
      std::lock_guard lock(queue_mutex);
      if (!callers_wait || stopping || !queue.empty()) return std::nullopt;
      // Nothing runs or waits before it: it starts here, now.
      slots_while_near(t);
      if (t.symmetric_staged) return std::nullopt;
      // So does a call through the slots that holds a placement probe.
      if (symmetric && symmetric->slot_call_probes() && !takes_mailbox(t)) return std::nullopt;
      t.seq = gate.fetch_add(2, std::memory_order_relaxed) >> 1;
      record_queued(t, true);
      last_enqueue.store(t.queued_at, std::memory_order_relaxed);
    }
    if (run_task(t, kInlineGrace)) return t.work ? Work(t.work) : Work();
    return queue_part_run(std::move(t), exec);
  }

  // A direct call left part-run after kInlineGrace: queued first (calls
  // queued meanwhile came after it), for its caller's wait or the worker
  // to finish. Releases `exec`.
  Work queue_part_run(Task t, std::unique_lock<core::FutexMutex>& exec) {
    auto task = std::make_shared<Task>(std::move(t));
    task->queued_at = Clock::now();  // the worker's grace, and run_inline's, start now
    make_work(task);
    bool wake = false;
    {
      std::lock_guard lock(queue_mutex);
      close_gate();
      queue.push_front(task);
      wake = worker_asleep;
    }
    exec.unlock();
    if (wake) queue_cv.notify_one();
    return Work(task->work);
  }

  // A small all-reduce or a barrier through the mailboxes, in try_direct's
  // case (a caller that waits at once, nothing queued or running), without
  // a Task or the executor's dispatch (2 ranks, 16 B, alternated: 0.34-0.38
  // us this way, 0.41-0.44 through try_direct). A peer not there within kInlineGrace leaves the call
  // queued, posted, for the caller's wait or the worker to finish.
  std::optional<Work> try_mailbox(Collective c, const void* input, void* output, std::size_t count, DataType dtype,
                                  ReduceOp op) {
    if (!mailbox || mailbox_upto == 0 || check || algo_override != Algorithm::Auto || broken.load()) return std::nullopt;
    const std::size_t bytes = count * size_of(dtype);
    if (c == Collective::AllReduce && (bytes > mailbox_upto || bytes >= std::min(symmetric_from, staged_from)))
      return std::nullopt;  // too large, or symmetric memory's path: the full path decides
    if (holding_exec == this) return std::nullopt;
    std::unique_lock exec = take_exec_briefly();
    if (!exec) return std::nullopt;
    const HoldingExec holding(this);
    std::uint64_t g = gate.load(std::memory_order_relaxed);
    if ((g & 1) != 0 || !gate.compare_exchange_strong(g, g + 2, std::memory_order_relaxed)) return std::nullopt;
    const std::uint64_t seq = g >> 1;
    const Clock::time_point queued_at = core::coarse_now();
    const std::string_view kind = algo::name(c);
    const std::uint64_t id = history.running(seq, kind, dtype, count, -1, "mailbox", 1, queued_at);
    last_enqueue.store(queued_at, std::memory_order_relaxed);
    comm::RunLabel l;
    l.rank = rank;
    l.comm = &name;
    l.what = kind;
    l.seq = seq;
    l.algorithm = "mailbox";
    live.begin(seq, 1);
    const Clock::time_point deadline = queued_at + timeout;
    try {
      if (mailbox->run({c, input, output, count, dtype, op, seq}, deadline, l, kInlineGrace)) {
        if (c == Collective::AllReduce && op == ReduceOp::Avg) core::scale(output, count, dtype, world);
        // Within kInlineGrace of queued_at: the same time, to the coarse
        // clock's few milliseconds, without another look at it.
        history.ended(id, true, queued_at);
        return Work();
      }
    } catch (const Error& raw) {
      const Error e = raw.code() == ErrorCode::Timeout ? explain_timeout(raw, seq) : raw;
      fail(e);
      history.ended(id, false);
      auto work = std::make_shared<detail::WorkState>();
      work->finish(std::make_exception_ptr(e));
      return Work(work);
    }
    Task t;
    t.collective = c;
    t.input = input;
    t.output = output;
    t.count = count;
    t.dtype = dtype;
    t.op = op;
    t.seq = seq;
    t.history_id = id;
    t.mailbox = true;
    t.running = true;
    t.deadline = deadline;
    t.label = l;
    return queue_part_run(std::move(t), exec);
  }

  // A device collective, GPU to GPU: launched on the caller's stream at
  // once, in call order, outside the queue (the host's calls and these use
  // different channels). The Work finishes when the stream has run it.
  Work launch_direct(Task& t, const comm::StageRequest& r) {
    if (broken.load()) {
      std::lock_guard lock(error_mutex);
      std::rethrow_exception(fatal);
    }
    auto work = std::make_shared<detail::WorkState>();
    std::lock_guard lock(direct_mutex);
    const algo::Algorithm a = choose(t);
    const std::size_t elem = size_of(t.dtype);
    comm::DirectCall call;
    std::size_t steps = 0;
    // Large splittable calls run as several parts at once, one block each.
    // (The tables are copied to the device during launch: clearing the
    // cache between calls leaves nothing dangling.)
    const auto parts = comm::split_parts(t.collective, t.count, elem, device->direct_parts(), kDirectPartBytes);
    if (direct_tables.size() + parts.size() > 64) direct_tables.clear();
    for (const comm::DevicePart& part : parts) {
      const algo::ScheduleRequest req = request_for(t, a, part.count);
      auto it = direct_tables.find(schedule_key(req));
      if (it == direct_tables.end()) {
        const algo::RankSchedule schedule = algo::make_schedule(req);
        it = direct_tables.emplace(schedule_key(req), std::pair{comm::encode_steps(schedule), schedule.scratch_count})
                 .first;
      }
      call.parts.push_back({&it->second.first, it->second.second * elem, part.offset * elem});
      steps += it->second.first.size();
    }
    t.seq = ++direct_seq;
    const std::uint64_t id = history.queued(t.seq, algo::name(t.collective), t.dtype, t.count, -1);
    history.started(id, algo::name(a), static_cast<std::uint32_t>(steps));
    call.input = r.send;
    call.output = r.recv;
    call.dtype = t.dtype;
    call.op = t.op;
    call.avg_count = t.op == ReduceOp::Avg && holds_result(t) ? t.count : 0;
    call.avg_divisor = world;
    call.stream = r.stream;
    call.timeout = timeout;
    call.what = std::string(algo::name(t.collective)) + " #" + std::to_string(t.seq) + " on device (" +
                std::string(algo::name(a)) + ") on rank " + std::to_string(rank) + " of " + name;
    std::weak_ptr<Impl> weak = weak_from_this();
    direct_in_flight.fetch_add(1);
    try {
      device->launch(call, [weak, work, id](std::exception_ptr e) {
        if (auto self = weak.lock()) {
          self->history.ended(id, e == nullptr);
          // Unusable from now on; the links stay the worker's (fail() would
          // write to them from CUDA's callback thread). A cause found
          // first (a peer's death) is the error to report.
          if (e) {
            std::lock_guard lock(self->error_mutex);
            if (self->broken.exchange(true) && self->fatal) e = self->fatal;
            else self->fatal = e;
          }
          self->direct_in_flight.fetch_sub(1);
        }
        work->finish(std::move(e));
      });
    } catch (...) {
      direct_in_flight.fetch_sub(1);
      throw;
    }
    // A worker asleep without a deadline starts watching the peers.
    queue_cv.notify_one();
    return Work(work);
  }

  // A call on device buffers: GPU to GPU when the devices joined, else
  // staged through host memory (comm/staged_call.hpp). An all-reduce,
  // broadcast or reduce is staged in parts, each a queued task of its own
  // on its slice of the host buffer, so that one part's copies overlap
  // another's collective; every rank cuts alike.
  Work enqueue_device(Task t, comm::StageRequest r) {
    KIZUNA_CHECK_ARG(device != nullptr, "communicator ", name, " is a CPU communicator: calls with a ",
                     "stream need CommOptions.device or KIZUNA_DEVICE = cuda");
    if (direct && t.kind == Task::Kind::Collective) return launch_direct(t, r);
    const std::size_t elem = size_of(t.dtype);
    const std::vector<comm::DevicePart> parts =
        t.kind == Task::Kind::Collective
            ? comm::split_parts(t.collective, t.count, elem, kStagedParts, kStagedPartBytes)
            : std::vector<comm::DevicePart>{{0, t.count}};
    if (parts.size() > 1) {
      for (const comm::DevicePart& p : parts) r.cuts.push_back(p.offset * elem);
      r.cuts.push_back(t.count * elem);
    }
    auto work = std::make_shared<detail::WorkState>();
    // The device queue's gates open in ticket order, and the worker
    // releases parts in queue order: a call's tickets and its place in
    // the queue are taken together.
    std::lock_guard staging(stage_mutex);
    auto staged = comm::StagedCall::start(device->queue(), r, [work](std::exception_ptr e) { work->finish(std::move(e)); });
    std::vector<std::shared_ptr<Task>> tasks;
    for (std::size_t k = 0; k < parts.size(); ++k) {
      auto task = std::make_shared<Task>(t);
      const std::size_t at = parts[k].offset * elem;
      task->count = parts[k].count;
      task->input = staged->host() + r.in_offset + at;
      task->output = staged->host() + r.out_offset + at;
      task->staged = staged;
      task->part = k;
      if (parts.size() > 1)
        task->part_label = " (part " + std::to_string(k + 1) + " of " + std::to_string(parts.size()) +
                           " of a staged device call)";
      task->work = work;
      tasks.push_back(std::move(task));
    }
    try {
      push_queued(tasks);
    } catch (const Error&) {
      for (std::size_t k = 0; k < parts.size(); ++k) staged->release(k, std::current_exception());
      throw;
    }
    return Work(work);
  }

  Work enqueue(Task t) {
    pin_symmetric(t);
    if (std::optional<Work> done = try_direct(t)) return *std::move(done);
    auto task = std::make_shared<Task>(std::move(t));
    task->work = std::make_shared<detail::WorkState>();
    push_queued({task});
    return Work(task->work);
  }

  // Queues `tasks` in order, each collective with the next sequence number
  // (point-to-point calls take none), and wakes the worker if it must be.
  // Throws InvalidArgument, queuing nothing, while the communicator is
  // being destroyed.
  void push_queued(const std::vector<std::shared_ptr<Task>>& tasks) {
    bool wake = false;
    {
      std::lock_guard lock(queue_mutex);
      KIZUNA_CHECK_ARG(!stopping, "communicator ", name, " is being destroyed");
      close_gate();  // before the numbers are taken: see `gate`
      for (const auto& task : tasks) {
        if (task->kind == Task::Kind::Collective) task->seq = gate.fetch_add(2, std::memory_order_relaxed) >> 1;
        record_queued(*task);
        make_work(task);
        queue.push_back(task);
      }
      last_enqueue.store(tasks.back()->queued_at, std::memory_order_relaxed);
      wake = !callers_wait || worker_asleep;
    }
    if (wake) queue_cv.notify_one();
  }

  comm::RunLabel label(const Task& t, algo::Algorithm a) const {
    comm::RunLabel l;
    l.rank = rank;
    l.comm = &name;
    switch (t.kind) {
      case Task::Kind::Send: l.what = "send to rank"; l.peer = t.root; break;
      case Task::Kind::Recv: l.what = "recv from rank"; l.peer = t.root; break;
      case Task::Kind::Collective:
        l.what = algo::name(t.collective);
        l.seq = t.seq;
        l.algorithm = algo::name(a);
        l.suffix = t.part_label;
        break;
    }
    return l;
  }

  algo::Algorithm choose(const Task& t) const {
    if (algo_override == Algorithm::Ring) return algo::Algorithm::Ring;
    if (algo_override == Algorithm::Tree) return algo::Algorithm::Tree;
    if (algo_override == Algorithm::OneShot)
      return t.collective == Collective::AllReduce ? algo::Algorithm::OneShot : algo::Algorithm::Ring;
    if (algo_override == Algorithm::TwoShot)
      return t.collective == Collective::AllReduce ? algo::Algorithm::TwoShot : algo::Algorithm::Ring;
    if (algo_override == Algorithm::Doubling)
      return t.collective == Collective::AllReduce ? algo::Algorithm::Doubling : algo::Algorithm::Ring;
    return algo::choose_algorithm(t.collective, t.count * size_of(t.dtype),
                                  hierarchical ? topology.nodes : world, link_model, single_host);
  }

  // Runs (or resumes) a task and finishes its Work; false, with nothing
  // finished, when it yielded part-run after waiting `patience` (see
  // try_direct).
  bool run_task(Task& t, Clock::duration patience = comm::Executor::kHoldOn) {
    std::exception_ptr error;
    try {
      if (broken.load()) {
        std::lock_guard lock(error_mutex);
        try {
          std::rethrow_exception(fatal);
        } catch (const Error& e) {
          KIZUNA_THROW(ErrorCode::Aborted, "communicator ", name, " on rank ", rank,
                       " is unusable after an earlier error (create a new one): ", e.what());
        }
      }
      if (t.staged && !t.staged->wait_input(t.part, Clock::now() + timeout))
        KIZUNA_THROW(ErrorCode::Timeout, "the CUDA stream of ", label(t, algo::Algorithm::Ring).str(),
                     " did not deliver its input within ", timeout.count(), " ms");
      if (!execute(t, patience)) return false;
    } catch (const Error& raw) {
      const Error e = raw.code() == ErrorCode::Timeout && t.kind == Task::Kind::Collective
                          ? explain_timeout(raw, t.seq)
                          : raw;
      error = std::make_exception_ptr(e);
      fail(e);
      history.ended(t.history_id, false);
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(Error(ErrorCode::Internal, e.what()));
      fail(Error(ErrorCode::Internal, e.what()));
      history.ended(t.history_id, false);
    }
    t.running = false;
    t.schedule.reset();
    t.pinned_input.reset();
    t.pinned_output.reset();
    if (!error) history.ended(t.history_id, true);
    if (t.staged) {
      t.staged->release(t.part, error);  // the Work finishes once the stream has the result
    } else if (t.work) {
      t.work->finish(error);
    } else if (error) {  // a direct call: only a failure needs a Work to carry it
      t.work = std::make_shared<detail::WorkState>();
      t.work->finish(error);
    }
    return true;
  }

  // A timeout names the rank this one waited for, but that rank may be
  // waiting itself. Every rank that times out records in the store whom it
  // waits for; following those records from our awaited rank leads to the
  // rank that did not report: the one that is stuck (stopped, hung in user
  // code). Each hop waits at most a short grace for its record, since the
  // other ranks time out at about the same moment. Records are per rank,
  // not per collective: ranks stuck behind one another may be one
  // collective apart, and a communicator times out only once.
  Error explain_timeout(const Error& e, std::uint64_t seq) {
    const int awaited = live.awaiting.load();
    if (awaited < 0 || awaited >= world) return e;
    try {
      const auto grace = std::max(std::chrono::milliseconds(100), std::min(std::chrono::milliseconds(1000), timeout / 10));
      const std::string base = name + "/stuck/";
      // The store itself may be what is stuck (its host stopped, or this
      // rank cut off from it), and set() would wait KIZUNA_STORE_TIMEOUT.
      // First read back this rank's bootstrap record, which exists: a live
      // store answers at once; one that does not answer within the grace
      // (plus the store client's reply allowance) fails the read and breaks
      // the connection, so the Timeout is raised without the report.
      options.store->get(name + "/peer/" + std::to_string(rank), grace);
      options.store->set(base + std::to_string(rank), std::to_string(awaited) + " " +
                                                          std::to_string(executor->last_seq_from(awaited)) +
                                                          " " + std::to_string(seq));
      std::ostringstream chain;
      std::vector<bool> seen(world, false);
      seen[rank] = true;
      int current = awaited;
      for (int hop = 0; hop < world && !seen[current]; ++hop) {
        seen[current] = true;
        Bytes entry;
        try {
          entry = options.store->get(base + std::to_string(current), grace);
        } catch (const Error& missing) {
          if (missing.code() != ErrorCode::Timeout) throw;
          chain << "; rank " << current << " has not reported: it is the one stuck";
          break;
        }
        int next = -1;
        std::uint64_t last = 0, in = 0;
        std::istringstream(std::string(entry.begin(), entry.end())) >> next >> last >> in;
        if (next < 0 || next >= world) break;
        chain << "; rank " << current << " waits for rank " << next << " in #" << in
              << " (its last message from it was in #" << last << ")";
        current = next;
      }
      // The others timed out at about the same moment and may still be
      // reading records; a store this process hosts must outlive that.
      keep_store_until.store((Clock::now() + 2 * grace).time_since_epoch().count());
      return Error(e.code(), std::string(e.what()) + chain.str());
    } catch (const std::exception& store_error) {
      // the store itself is gone: report what we know locally
      return Error(e.code(),
                   std::string(e.what()) + "; no stuck-rank report, the store failed: " + store_error.what());
    }
  }

  // Marks the communicator unusable and tells every peer why, so that ranks
  // not talking to the one that failed also fail at once, with the reason.
  void fail(const Error& e) {
    {
      // Under the lock: a thread that sees `broken` and takes the lock to
      // rethrow `fatal` must find it set.
      std::lock_guard lock(error_mutex);
      if (broken.exchange(true)) return;
      fatal = std::make_exception_ptr(e);
    }
    KIZUNA_LOG(Error) << e.what();
    // The stuck-rank report: where this rank is, for the job's post-mortem
    // (kizuna-run gathers these lines).
    if (e.code() == ErrorCode::Timeout) {
      KIZUNA_LOG(Error) << report(4);
    }
    // The same, one machine-read line (kizuna-run's failure table reads it).
    std::string comm_field = name;
    std::replace(comm_field.begin(), comm_field.end(), ' ', '_');
    KIZUNA_LOG(Error) << kStatusMarker << " rank=" << rank << " world=" << world << " comm=" << comm_field << " "
                      << history.status_fields(live) << " error=" << kizuna::name(e.code());
    // Which path failed: symmetric memory's, the mailboxes', or the
    // executor's.
    const bool on_symmetric = symmetric && (symmetric->failed_peer() >= 0 || symmetric->cause());
    const bool on_mailbox = mailbox && (mailbox->failed_peer() >= 0 || mailbox->cause());
    const int lost = on_symmetric ? symmetric->failed_peer()
                     : on_mailbox ? mailbox->failed_peer()
                     : executor   ? executor->failed_peer()
                                  : -1;
    const transport::AbortNotice* cause = on_symmetric ? symmetric->cause()
                                          : on_mailbox ? mailbox->cause()
                                          : executor   ? executor->cause()
                                                       : nullptr;
    // Pass a peer's notice on unchanged (its origin saw the root cause);
    // otherwise this rank is the origin. Every live peer is told, the one
    // whose message did not match or that kept us waiting included; only a
    // lost rank is not.
    transport::AbortNotice notice{rank, e.code() == ErrorCode::PeerLost ? lost : -1, e.code(), e.what()};
    if (cause) notice = *cause;
    const auto deadline = Clock::now() + kAbortGrace;
    for (auto& link : links) {
      if (!link || link->peer() == notice.lost_rank || link->peer() == notice.origin) continue;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      link->send_abort(notice, std::max(left, std::chrono::milliseconds(1)));
    }
  }

  // The schedule request of collective task `t` run with `a` over `count`
  // of its elements (all of them, or one part of a device call).
  algo::ScheduleRequest request_for(const Task& t, algo::Algorithm a, std::uint64_t count) const {
    algo::ScheduleRequest req;
    req.collective = t.collective;
    req.algorithm = a;
    req.world_size = world;
    req.rank = rank;
    req.root = t.root;
    req.count = count;
    req.elem_size = size_of(t.dtype);
    req.slice_bytes = slice_bytes;
    if (hierarchical) req.node_of = topology.node_of;
    return req;
  }

  // What tells a rank's schedules apart, as the caches key them.
  static ScheduleKey schedule_key(const algo::ScheduleRequest& req) {
    return {static_cast<int>(req.collective), static_cast<int>(req.algorithm), req.root, req.count, req.elem_size};
  }

  // Whether this rank's output holds the result of `t` (what Avg divides).
  bool holds_result(const Task& t) const {
    return t.collective == Collective::AllReduce || t.collective == Collective::ReduceScatter ||
           (t.collective == Collective::Reduce && rank == t.root);
  }

  std::shared_ptr<const algo::RankSchedule> schedule_for(const algo::ScheduleRequest& req) {
    const ScheduleKey key = schedule_key(req);
    auto it = schedules.find(key);
    if (it == schedules.end()) {
      if (schedules.size() >= 64) schedules.clear();
      it = schedules.emplace(key, std::make_shared<const algo::RankSchedule>(algo::make_schedule(req))).first;
    }
    return it->second;
  }

  // The last collective's plan: training and benchmarks repeat one shape,
  // which then costs neither the cost model nor a look in `schedules`.
  struct Plan {
    Collective collective = Collective::AllReduce;
    int root = 0;
    std::uint64_t count = 0;
    std::size_t elem = 0;
    algo::Algorithm algorithm = algo::Algorithm::Ring;
    std::shared_ptr<const algo::RankSchedule> schedule;  // null: no plan yet
  } last_plan;

  void ensure_scratch(std::size_t bytes) {
    if (scratch.size() < bytes) scratch.resize(bytes);  // zero-filled: pre-faulted
  }

  // False when the executor yielded after `patience` (t.running: resume it).
  bool execute(Task& t, Clock::duration patience) {
    if (t.mailbox) return execute_mailbox(t, patience);
    if (t.running) {
      if (!executor->resume(t.label, patience)) return false;
      finish_collective(t);
      return true;
    }
    const auto deadline = core::coarse_now() + timeout;
    if (t.kind != Task::Kind::Collective) {
      execute_p2p(t, deadline);
      return true;
    }
    if (takes_mailbox(t)) {
      t.mailbox = true;
      t.deadline = deadline;
      return execute_mailbox(t, patience);
    }
    // A peer that waits at its mailbox for this call sees it is elsewhere.
    if (mailbox) mailbox->announce(t.seq, static_cast<std::uint32_t>(t.collective), t.count);
    slots_while_near(t);
    if (t.symmetric || t.symmetric_staged) {
      execute_symmetric(t, deadline);
      return true;
    }
    const std::size_t elem = size_of(t.dtype);
    Plan& p = last_plan;
    if (!p.schedule || p.collective != t.collective || p.root != t.root || p.count != t.count || p.elem != elem) {
      const algo::ScheduleRequest req = request_for(t, choose(t), t.count);
      p = Plan{t.collective, t.root, t.count, elem, req.algorithm, schedule_for(req)};
    }
    t.label = label(t, p.algorithm);
    // The slots write as the placement probe last told: a call over them
    // counts towards the next probe, and holds it first when one is due.
    if (symmetric) symmetric->before_slot_call(t.count * elem, t.seq, deadline, t.label);
    if (check) verify_fingerprints(t, deadline, t.label);
    const algo::RankSchedule& schedule = *p.schedule;
    history.started(t.history_id, algo::name(schedule.algorithm),
                    static_cast<std::uint32_t>(schedule.steps.size()));
    ensure_scratch(schedule.scratch_count * elem);
    t.running = true;
    if (!executor->start(schedule, {t.input, t.output, scratch.data()}, t.dtype, t.op, t.seq, deadline, t.label,
                         patience)) {
      // Left part-run: the task keeps its schedule alive until it ends.
      // (Taken only now: copying a shared_ptr is a locked instruction,
      // which would wait for the messages just published to leave.)
      t.schedule = p.schedule;
      return false;
    }
    finish_collective(t);
    return true;
  }

  // An all-reduce left to the cost model (a forced algorithm runs as
  // forced, through the slots) takes symmetric memory's path: in place from
  // symmetric_from bytes when its buffers are symmetric memory (their
  // allocations held until it has run), else through the staging memory
  // from staged_from bytes. Decided at the call.
  void pin_symmetric(Task& t) const {
    if (!symmetric || t.kind != Task::Kind::Collective || t.collective != Collective::AllReduce ||
        algo_override != Algorithm::Auto || t.staged)
      return;
    const std::size_t bytes = t.count * size_of(t.dtype);
    std::shared_ptr<const void> in, out;
    if (symmetric->any() && bytes >= symmetric_from) {
      in = symmetric->pin(t.input, bytes);
      out = symmetric->pin(t.output, bytes);
    }
    const bool in_place = in && out;
    if (!in_place && (!symmetric->staging() || bytes < staged_from)) return;
    const auto* a = static_cast<const unsigned char*>(t.input);
    const auto* b = static_cast<const unsigned char*>(t.output);
    KIZUNA_CHECK_ARG(a == b || a + bytes <= b || b + bytes <= a, "all_reduce: send and recv overlap without ",
                     "being the same buffer (", bytes, " bytes at ", t.input, " and ", t.output, ")");
    if (!in_place) {
      t.symmetric_staged = true;
      return;
    }
    t.symmetric = true;
    t.pinned_input = std::move(in);
    t.pinned_output = std::move(out);
  }

  // A staged all-reduce below staged_near_from goes through the slots
  // while the two ranks' CPUs share a last-level cache, as symmetric
  // memory's probes tell and every rank agrees for this call (its verdict
  // changes only within a call). Decided as the call starts to run, under
  // the executor's lock.
  void slots_while_near(Task& t) const {
    if (may_take_slots(t) && symmetric->agreed_placement() == comm::Placement::Near) t.symmetric_staged = false;
  }
  bool may_take_slots(const Task& t) const {
    return t.symmetric_staged && t.count * size_of(t.dtype) < staged_near_from;
  }

  // An all-reduce of up to mailbox_upto bytes, or a barrier, left to the
  // cost model, runs through the mailboxes: what every rank decides alike
  // from the call.
  bool takes_mailbox(const Task& t) const {
    if (!mailbox || mailbox_upto == 0 || algo_override != Algorithm::Auto) return false;
    if (t.collective == Collective::Barrier) return true;
    return t.collective == Collective::AllReduce && !t.symmetric && !t.symmetric_staged &&
           t.count * size_of(t.dtype) <= mailbox_upto;
  }

  // Starts or resumes a mailbox all-reduce; false when it yielded part-run
  // after waiting `patience` (see try_direct).
  bool execute_mailbox(Task& t, Clock::duration patience) {
    if (!t.running) {
      t.label = label(t, algo::Algorithm::OneShot);
      t.label.algorithm = "mailbox";
      if (check) verify_fingerprints(t, t.deadline, t.label);
      history.started(t.history_id, "mailbox", 1);
      live.begin(t.seq, 1);
      t.running = true;
    }
    if (!mailbox->run({t.collective, t.input, t.output, t.count, t.dtype, t.op, t.seq}, t.deadline, t.label, patience))
      return false;
    finish_collective(t);
    return true;
  }

  void execute_symmetric(Task& t, Clock::time_point deadline) {
    t.label = label(t, algo::Algorithm::Ring);
    t.label.algorithm = t.symmetric_staged ? "symmetric, staged" : "symmetric";
    if (check) verify_fingerprints(t, deadline, t.label);
    const comm::SymmetricMemory::Call call{t.input, t.output, t.count, t.dtype, t.op, t.seq};
    if (t.symmetric_staged) {
      history.started(t.history_id, "symmetric, staged",
                      symmetric->staged_meetings(t.count * size_of(t.dtype), size_of(t.dtype)));
      symmetric->all_reduce_staged(call, deadline, t.label);
    } else {
      history.started(t.history_id, "symmetric", symmetric->symmetric_meetings());
      const bool ran = symmetric->all_reduce(call, deadline, t.label);
      KIZUNA_CHECK(ran, t.label.str(), ": its buffers are no longer symmetric memory");
    }
    finish_collective(t);
  }

  void finish_collective(const Task& t) {
    if (t.op == ReduceOp::Avg && holds_result(t)) core::scale(t.output, t.count, t.dtype, world);
  }

  void execute_p2p(Task& t, Clock::time_point deadline) {
    const bool sending = t.kind == Task::Kind::Send;
    algo::RankSchedule s;
    s.request.elem_size = size_of(t.dtype);
    s.input_count = s.output_count = t.count;
    algo::Step step;
    step.op = sending ? algo::StepOp::Send : algo::StepOp::Recv;
    step.src = algo::Buffer::Input;
    step.dst = algo::Buffer::Output;
    (sending ? step.send_peer : step.recv_peer) = t.root;
    step.count = t.count;
    s.steps.push_back(step);
    const std::uint64_t n = sending ? p2p_sent[t.root]++ : p2p_received[t.root]++;
    history.started(t.history_id, "", 1);
    executor->run(s, {t.input, t.output, nullptr}, t.dtype, t.op, kP2pTag | n, deadline,
                  label(t, algo::Algorithm::Ring));
  }

  // KIZUNA_CHECK=1: all-gather every rank's fingerprint of this call and
  // fail every rank with the same Mismatch when they differ.
  void verify_fingerprints(const Task& t, Clock::time_point deadline, comm::RunLabel what) {
    const comm::Fingerprint mine{t.collective, t.dtype, t.op, t.root, t.count, t.seq,
                                 t.symmetric || t.symmetric_staged};
    const comm::FingerprintBytes bytes = comm::encode(mine);
    std::vector<unsigned char> all(bytes.size() * world);
    algo::ScheduleRequest req;
    req.collective = Collective::AllGather;
    req.world_size = world;
    req.rank = rank;
    req.count = bytes.size();
    req.elem_size = 1;
    req.slice_bytes = 1 << 20;
    const algo::RankSchedule schedule = algo::make_schedule(req);
    what.suffix = " (KIZUNA_CHECK fingerprint exchange)";
    executor->run(schedule, {bytes.data(), all.data(), nullptr}, DataType::UInt8, ReduceOp::Sum,
                  kCheckTag | t.seq, deadline, what);
    std::vector<comm::Fingerprint> prints;
    for (int r = 0; r < world; ++r) prints.push_back(comm::decode(all.data() + r * bytes.size()));
    const std::string report = comm::compare(prints);
    if (!report.empty())
      KIZUNA_THROW(ErrorCode::Mismatch, "KIZUNA_CHECK: ranks disagree on call #", t.seq, " of ",
                   name, ":", report);
  }

  void fail_queued(const std::exception_ptr& error) {
    std::deque<std::shared_ptr<Task>> dropped;
    {
      std::lock_guard lock(queue_mutex);
      dropped.swap(queue);
    }
    for (auto& task : dropped) {
      if (task->staged) task->staged->release(task->part, error);
      else task->work->finish(error);
    }
  }
};

thread_local const Communicator::Impl* Communicator::Impl::holding_exec = nullptr;

namespace {

// The checks on every call's arguments: the test inline, the message out
// of line, so that a call that passes them pays a few instructions (the
// throw's arguments spilled to the stack cost every all-reduce about 150).

[[noreturn, gnu::cold, gnu::noinline]] void null_buffer(std::size_t count, const char* what, const char* call) {
  KIZUNA_THROW(ErrorCode::InvalidArgument, call, ": ", what, " is null with count ", count);
}

inline void check_buffer(const void* p, std::size_t count, const char* what, const char* call) {
  if (p == nullptr && count != 0) [[unlikely]]
    null_buffer(count, what, call);
}

[[noreturn, gnu::cold, gnu::noinline]] void too_many_bytes(std::size_t count, DataType dtype, std::size_t ranks,
                                                           const char* call) {
  KIZUNA_THROW(ErrorCode::InvalidArgument, call, ": a count of ", count, " ", name(dtype), " elements",
               ranks > 1 ? " times the world size" : "", " is more bytes than memory holds");
}

// What a call's buffers hold, in bytes, must be a size: a count that
// overflows it would address far outside the caller's buffers.
inline void check_size(std::size_t count, DataType dtype, std::size_t ranks, const char* call) {
  std::size_t bytes = 0;  // a multiplication, not a division: this is on every call's path
  if (__builtin_mul_overflow(count, size_of(dtype) * ranks, &bytes) || bytes > static_cast<std::size_t>(PTRDIFF_MAX))
      [[unlikely]]
    too_many_bytes(count, dtype, ranks, call);
}

[[noreturn, gnu::cold, gnu::noinline]] void bad_types(DataType dtype, ReduceOp op, const char* call) {
  KIZUNA_CHECK_ARG(is_valid(dtype), call, ": invalid data type code ", static_cast<int>(dtype));
  KIZUNA_CHECK_ARG(is_valid(op), call, ": invalid reduction code ", static_cast<int>(op));
  KIZUNA_THROW(ErrorCode::InvalidArgument, call, ": avg is defined for floating types only, not ", name(dtype));
}

inline void check_types(DataType dtype, ReduceOp op, const char* call) {
  if (!is_valid(dtype) || !is_valid(op) || (op == ReduceOp::Avg && !is_floating(dtype))) [[unlikely]]
    bad_types(dtype, op, call);
}

// A send or receive task (buffers left to the caller), its arguments checked.
Task p2p_task(Task::Kind kind, const void* buffer, std::size_t count, DataType dtype, int peer, int rank,
              int world) {
  const char* call = kind == Task::Kind::Send ? "send" : "recv";
  check_types(dtype, ReduceOp::Sum, call);
  check_size(count, dtype, 1, call);
  check_buffer(buffer, count, "buffer", call);
  KIZUNA_CHECK_ARG(peer >= 0 && peer < world && peer != rank, call, ": peer ", peer,
                   " is not another rank of a world of ", world);
  Task t;
  t.kind = kind;
  t.count = count;
  t.dtype = dtype;
  t.root = peer;
  return t;
}

}  // namespace

Communicator::Communicator(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() {
  if (impl_) impl_->shutdown();
}

std::shared_ptr<Communicator> Communicator::create(const CommOptions& options) {
  KIZUNA_CHECK_ARG(options.store != nullptr, "CommOptions.store is null");
  KIZUNA_CHECK_ARG(options.world_size >= 1, "CommOptions.world_size is ", options.world_size,
                   "; it must be at least 1");
  KIZUNA_CHECK_ARG(options.rank >= 0 && options.rank < options.world_size, "CommOptions.rank ",
                   options.rank, " is out of range for world size ", options.world_size);
  KIZUNA_CHECK_ARG(!options.mailbox_upto || *options.mailbox_upto <= comm::Mailbox::capacity(),
                   "CommOptions.mailbox_upto = ", *options.mailbox_upto, " is over the mailboxes' ",
                   comm::Mailbox::capacity(), " bytes");
  const core::Env& env = core::Env::get();
  auto impl = std::make_shared<Impl>();
  impl->options = options;
  impl->rank = options.rank;
  impl->world = options.world_size;
  impl->name = options.name.empty() ? default_name(options.store.get()) : options.name;
  impl->timeout = options.timeout.count() > 0 ? options.timeout : env.timeout;
  impl->algo_override = options.algorithm;
  if (impl->algo_override == Algorithm::Auto)
    impl->algo_override = env.algo == core::Env::Algo::Ring       ? Algorithm::Ring
                          : env.algo == core::Env::Algo::Tree     ? Algorithm::Tree
                          : env.algo == core::Env::Algo::OneShot  ? Algorithm::OneShot
                          : env.algo == core::Env::Algo::TwoShot  ? Algorithm::TwoShot
                          : env.algo == core::Env::Algo::Doubling ? Algorithm::Doubling
                                                                  : Algorithm::Auto;
  impl->slice_bytes = options.slice_bytes ? options.slice_bytes : env.slice_bytes;
  impl->check = options.check.value_or(env.check);
  // Parsed before any rank waits on this one.
  const core::Env::StagedStores asked =
      options.staged_stores.empty() ? env.staged_stores
                                    : core::parse_staged_stores("CommOptions.staged_stores", options.staged_stores);
  core::set_log_rank(options.rank);

  const auto setup = options.setup_timeout.count() > 0 ? options.setup_timeout : env.store_timeout;
  comm::BootstrapOptions boot;
  boot.local_address = choose_local_address(options.store.get());
  boot.transport = options.transport == Transport::Tcp     ? comm::TransportChoice::Tcp
                   : options.transport == Transport::Shm   ? comm::TransportChoice::Shm
                   : env.transport == core::Env::Transport::Tcp ? comm::TransportChoice::Tcp
                   : env.transport == core::Env::Transport::Shm ? comm::TransportChoice::Shm
                                                                : comm::TransportChoice::Auto;
  boot.shm_bytes = env.shm_bytes;
  boot.tcp_congestion = env.tcp_congestion;
  comm::Connected connected = comm::bootstrap(*options.store, impl->name, impl->rank, impl->world,
                                               boot, Clock::now() + setup);
  impl->topology = std::move(connected.topology);
  impl->shm = std::move(connected.shm);
  impl->links = std::move(connected.links);
  std::vector<transport::Link*> raw;
  for (auto& link : impl->links) raw.push_back(link.get());
  impl->executor = std::make_unique<comm::Executor>(std::move(raw), impl->rank);
  if (impl->shm) impl->executor->set_doorbell(impl->shm->mine.header());
  impl->executor->set_live(&impl->live);
  std::weak_ptr<Impl> weak = impl;
  impl->dump_handle = comm::register_dump([weak] {
    const auto self = weak.lock();
    return self ? self->report() : std::string();
  });
  // Choices every rank must make alike, so only from what all ranks know
  // (the topology, the configuration), never from local accidents such as
  // a shared-memory fallback on one rank.
  const bool shared_memory = boot.transport != comm::TransportChoice::Tcp;
  // Every rank of one node sees the same cores, so they agree on this.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool oversubscribed = connected.local_ranks > cores;
  // One- and two-shot on one node, over shared memory or loopback TCP,
  // where a rank's messages to its peers travel side by side; across nodes
  // they would share a NIC, and are left off. Measured on one node: one-shot
  // ahead up to tens of KiB, two-shot from there, level with the ring at
  // the largest sizes (docs/performance.md), as the model predicts.
  impl->single_host = impl->topology.nodes == 1;
  impl->hierarchical = shared_memory && impl->topology.nodes > 1;
  // Shared memory: ~8 GB/s, and ~2 us a round when every rank has a core.
  // With more ranks than cores a round costs a wake-up of a descheduled
  // peer instead: one-shot all-reduces took ~15-20 us at 4 B to 1 KiB with
  // 4 ranks on 2 cores, which puts the one-shot/two-shot crossover near
  // the measured 32 KiB. A further message in a round costs next to
  // nothing here: with 4 ranks on 2 cores one-shot's one round of three
  // messages beat doubling's two rounds of one at 4 B .. 1 KiB (6.6-9.1
  // against 6.9-11.2 us, 4 alternations), and doubling is not chosen.
  // Loopback TCP, 4 ranks on 2 cores: one-shot 27-66 us to 16 KiB,
  // doubling 27-48, two-shot and ring 60-99 from 256 B (where every chunk
  // has data); a further message costs about 0.4 of a round (the default
  // round of 25 us is kept: it orders the algorithms as measured, and the
  // doubling/two-shot crossover falls near 64 KiB, where they were level).
  if (shared_memory && impl->single_host)
    impl->link_model = algo::LinkModel{oversubscribed ? 15.0 : 2.0, 1.0 / 8000.0};
  else if (impl->single_host)
    impl->link_model.message_us = 10.0;
  // Measured, not modelled: over loopback TCP with more ranks than cores
  // (4 ranks on 2) and connections paced by BBR (KIZUNA_TCP_CONGESTION
  // other than auto, on a system whose default is BBR), the double binary
  // tree moved 1-64 MiB all-reduces 1.1x faster than the ring (median of 8
  // pairs, 1.0-1.8x): BBR's pacing, not the CPU, sets the rate, and the
  // ring's every step needs all ranks scheduled. The alpha-beta model,
  // which sees independent links, ranks them the other way. Under Reno
  // (what auto gives connections within a host) the ring is ahead instead,
  // 1.4x (median of 12 pairs), and ahead of two-shot too, where the model
  // sees the two level: 4 ranks, ahead in all 8 pairs at 16 and at 64 MiB
  // (medians 1.19x and 1.09x); and, measured again on 2026-12-01 with the
  // transport of then, from 512 KiB: in-place medians 1.15x at 512 KiB and
  // 1 MiB (6 pairs), 1.05-1.12x at 2-8 MiB (6 pairs), 1.1-1.3x in all three
  // repetitions of a bench-compare, level at 256 KiB and behind below
  // (docs/performance.md). Two-shot keeps all of a rank's connections busy
  // at once, three flows each way with 4 ranks against the ring's one, on
  // two cores.
  if (!shared_memory && impl->topology.nodes == 1 && oversubscribed && impl->world > 2) {
    const bool bbr = connected.tcp_congestion == "bbr";
    impl->link_model.large_all_reduce_from = bbr ? 1 << 20 : 512 << 10;
    impl->link_model.large_all_reduce = bbr ? algo::Algorithm::Tree : algo::Algorithm::Ring;
  }
  // With more ranks than cores, a waiting rank does not spin (the core may
  // be the one its peer waits for) but yields the core between looks for a
  // while before it sleeps: 4 ranks on 2 cores, 4 B .. 1 KiB all-reduce,
  // 4-6 us against 5-13 us when it slept after a few yields
  // (docs/performance.md).
  const int spin_us = env.spin_us >= 0 ? env.spin_us : oversubscribed ? 0 : 200;
  const int yield_us = env.yield_us >= 0 ? env.yield_us : oversubscribed ? 1000 : 50;
  impl->executor->set_wait(std::chrono::microseconds(spin_us), std::chrono::microseconds(yield_us));
  // A rank that spins before it sleeps can afford a heavy fence when it
  // goes to sleep, which spares its peers a fence on every message to it
  // (transport/shm/shm_link.hpp, and the mailboxes' comm/node_wait.hpp);
  // one that sleeps on every wait cannot.
  const bool light_rings = spin_us > 0 && core::asymmetric_fence_available();
  if (impl->shm && light_rings) transport::shm::use_light_ring(impl->shm->mine.header());
  const std::pair<std::string, int> device =
      options.device.empty() ? std::pair{env.device, env.device_index} : core::parse_device("CommOptions.device", options.device);
  if (device.first != "cpu") {
    const int local_rank = options.local_rank >= 0 ? options.local_rank : core::LaunchEnv::from_process().local_rank;
    impl->device = comm::make_device_backend(device.first, device.second, local_rank);
    // GPU to GPU when every rank's device can join (one node: CUDA IPC),
    // else staged. Every rank asks, so that all decide alike.
    if (impl->topology.nodes == 1 && env.cuda_ipc) {
      std::string why;
      impl->direct = impl->device->connect(*options.store, impl->name + "/cuda-ipc", impl->rank, impl->world,
                                           std::min<std::chrono::milliseconds>(setup, std::chrono::seconds(60)), &why);
      if (!impl->direct) {
        KIZUNA_LOG(Warn) << "communicator " << impl->name << ": device collectives are staged through host memory: "
                         << why;
      }
    }
  }
  // Symmetric memory where every rank is on one node and shared memory is
  // allowed (what every rank knows alike; a pair that fell back to TCP is
  // found when memory is allocated).
  if (impl->topology.nodes == 1 && impl->world > 1 && shared_memory) {
    comm::NodeWait wait;
    wait.rank = impl->rank;
    wait.world = impl->world;
    for (auto& link : impl->links) wait.links.push_back(link.get());
    wait.spin = std::chrono::microseconds(spin_us);
    wait.yield = std::chrono::microseconds(yield_us);
    wait.aborted = &impl->broken;
    wait.live = &impl->live;
    wait.light = light_rings;
    comm::SymmetricSetup sym{wait, options.store.get(), impl->name, impl->topology.comm_id};
    impl->symmetric = std::make_unique<comm::SymmetricMemory>(std::move(sym));
    // Below this the slots are as fast or faster: their one pass per
    // message against three meetings and a queued call. Measured, in-place
    // float32, 2 ranks on 2 cores: level at 256 KiB (33 us either way),
    // symmetric ahead from 1 MiB (123-126 us against 134-148, and 2x from
    // 4 MiB), the slots ahead at 64 KiB (8-11 us against 15-18); 4 ranks
    // on 2 cores: symmetric level or ahead from 64 KiB (30-32 us against
    // 29-50) and 1.5-2x from 256 KiB (docs/symmetric-memory.md).
    impl->symmetric_from = options.symmetric_from ? *options.symmetric_from
                           : env.symmetric_from >= 0 ? static_cast<std::size_t>(env.symmetric_from)
                           : oversubscribed          ? 64 << 10
                                                     : 512 << 10;
    // The mailboxes, for the small all-reduces and the barrier
    // (docs/symmetric-memory.md has the measurements behind the default).
    impl->mailbox_upto = options.mailbox_upto ? *options.mailbox_upto
                         : env.mailbox_upto >= 0 ? static_cast<std::size_t>(env.mailbox_upto)
                                                 : comm::Mailbox::capacity();
    // Allocated whatever mailbox_upto is: an allocation is collective, and
    // ranks that set it differently must still meet (their calls then
    // fail with Mismatch, not their creation with Timeout).
    {
      std::vector<unsigned char*> parts = impl->symmetric->allocate_internal(
          comm::Mailbox::region_bytes(), Clock::now() + setup, impl->mailbox_memory);
      if (!parts.empty()) {
        impl->mailbox = std::make_unique<comm::Mailbox>(comm::MailboxSetup{wait, std::move(parts)});
      }
    }
    // The staging memory, for all-reduces of private buffers from
    // staged_from bytes on. A rank that asks for none, or a size its peers
    // do not, leaves every rank without it. Measured, in-place float32
    // against the slots (docs/symmetric-memory.md): 4 ranks on 2 cores,
    // 1.35-1.75x at 1 and 16 MiB; 2 ranks on 2 cores, 1.6-1.9x from 64 KiB
    // to 1 MiB with their cores' caches far apart (streaming stores), and
    // 0.66-0.81x at 64-128 KiB, 0.73-1.01x from 256 KiB to 1 MiB, with them near.
    // So under auto, with 2 ranks each on a core of its own (the case
    // measured, where the one pair probed is every pair), the calls below
    // 256 KiB take the slots while the probes find the CPUs near (2 ranks
    // on 2 cores, near, 3 alternations: 64 KiB 5.2-5.6 GB/s through the
    // slots against 3.8-3.9 staged, 128 KiB 5.0-6.2 against 4.9, level
    // from 256 KiB).
    const bool staged_auto = !options.staged_from && env.staged_from < 0;
    impl->staged_from = options.staged_from ? *options.staged_from
                        : env.staged_from >= 0 ? static_cast<std::size_t>(env.staged_from)
                                               : 64 << 10;
    impl->staged_near_from = staged_auto && !oversubscribed && impl->world == 2 ? std::size_t{256} << 10 : 0;
    // How it is written: as the probes say (Auto), and until one does,
    // through the caches when every rank has a core of its own (the first
    // call probes, and two ranks that both run answer it) and streaming
    // with more ranks than cores, where a probe may find no two ranks
    // running at once: streaming costs 0.75-0.9x with the cores' caches
    // near and gains 1.1-1.5x with them far (4 ranks on 2 cores,
    // docs/symmetric-memory.md#where-the-staging-goes).
    using Stores = comm::SymmetricMemory::Stores;
    const Stores stores = asked == core::Env::StagedStores::Cache    ? Stores::Cache
                          : asked == core::Env::StagedStores::Stream ? Stores::Stream
                                                                    : Stores::Auto;
    impl->symmetric->allocate_staging(env.staging_bytes >= 0 ? static_cast<std::size_t>(env.staging_bytes)
                                                             : kStagingBytes,
                                      stores, oversubscribed, Clock::now() + setup);
  }
  // The slots (transport/shm) carry everything else between the ranks of
  // a node: with streaming stores as KIZUNA_STAGED_STORES says or, under
  // auto, as the placement probe of the symmetric and staged all-reduces
  // last told (through the caches until it tells) when every rank has a
  // core of its own, and always with more ranks than cores. Measured,
  // in-place float32 all_reduce and all_gather through the slots, 64 KiB ..
  // 16 MiB: 2 ranks on 2 cores, streaming 1.4-2.2x far apart and 0.5x near;
  // 4 ranks on 2 cores, 1.2-1.7x far apart and near alike
  // (docs/symmetric-memory.md#where-the-staging-goes).
  if (impl->shm) {
    impl->shm->stream_stores.store(asked == core::Env::StagedStores::Stream ||
                                       (asked == core::Env::StagedStores::Auto && oversubscribed),
                                   std::memory_order_relaxed);
    if (impl->symmetric && asked == core::Env::StagedStores::Auto && !oversubscribed)
      impl->symmetric->report_placement_to(&impl->shm->stream_stores);
  }
  impl->p2p_sent.assign(impl->world, 0);
  impl->p2p_received.assign(impl->world, 0);
  impl->start();
  return std::make_shared<Communicator>(std::move(impl));
}

std::shared_ptr<Communicator> Communicator::from_env() {
  const core::LaunchEnv launch = core::LaunchEnv::from_process();
  launch.require_rank();
  CommOptions options;
  options.store = Store::from_env();
  options.rank = launch.rank;
  options.world_size = launch.world_size;
  return create(options);
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->world; }
const std::string& Communicator::name() const { return impl_->name; }

Work Communicator::all_reduce(const void* send, void* recv, std::size_t count, DataType dtype,
                              ReduceOp op) {
  check_types(dtype, op, "all_reduce");
  check_size(count, dtype, 1, "all_reduce");
  check_buffer(send, count, "send buffer", "all_reduce");
  check_buffer(recv, count, "receive buffer", "all_reduce");
  if (std::optional<Work> done = impl_->try_mailbox(Collective::AllReduce, send, recv, count, dtype, op))
    return *std::move(done);
  Task t;
  t.collective = Collective::AllReduce;
  t.input = send;
  t.output = recv;
  t.count = count;
  t.dtype = dtype;
  t.op = op;
  return impl_->enqueue(std::move(t));
}

Work Communicator::broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root) {
  check_types(dtype, ReduceOp::Sum, "broadcast");
  check_size(count, dtype, 1, "broadcast");
  KIZUNA_CHECK_ARG(root >= 0 && root < size(), "broadcast: root ", root,
                   " is out of range for world size ", size());
  if (rank() == root) check_buffer(send, count, "send buffer", "broadcast");
  check_buffer(recv, count, "receive buffer", "broadcast");
  Task t;
  t.collective = Collective::Broadcast;
  t.input = send;
  t.output = recv;
  t.count = count;
  t.dtype = dtype;
  t.root = root;
  return impl_->enqueue(std::move(t));
}

Work Communicator::reduce(const void* send, void* recv, std::size_t count, DataType dtype,
                          ReduceOp op, int root) {
  check_types(dtype, op, "reduce");
  check_size(count, dtype, 1, "reduce");
  KIZUNA_CHECK_ARG(root >= 0 && root < size(), "reduce: root ", root,
                   " is out of range for world size ", size());
  check_buffer(send, count, "send buffer", "reduce");
  if (rank() == root) check_buffer(recv, count, "receive buffer", "reduce");
  Task t;
  t.collective = Collective::Reduce;
  t.input = send;
  t.output = recv;
  t.count = count;
  t.dtype = dtype;
  t.op = op;
  t.root = root;
  return impl_->enqueue(std::move(t));
}

Work Communicator::all_gather(const void* send, void* recv, std::size_t send_count, DataType dtype) {
  check_types(dtype, ReduceOp::Sum, "all_gather");
  check_size(send_count, dtype, static_cast<std::size_t>(size()), "all_gather");
  check_buffer(send, send_count, "send buffer", "all_gather");
  check_buffer(recv, send_count, "receive buffer", "all_gather");
  Task t;
  t.collective = Collective::AllGather;
  t.input = send;
  t.output = recv;
  t.count = send_count;
  t.dtype = dtype;
  return impl_->enqueue(std::move(t));
}

Work Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                  DataType dtype, ReduceOp op) {
  check_types(dtype, op, "reduce_scatter");
  check_size(recv_count, dtype, static_cast<std::size_t>(size()), "reduce_scatter");
  check_buffer(send, recv_count, "send buffer", "reduce_scatter");
  check_buffer(recv, recv_count, "receive buffer", "reduce_scatter");
  Task t;
  t.collective = Collective::ReduceScatter;
  t.input = send;
  t.output = recv;
  t.count = recv_count;
  t.dtype = dtype;
  t.op = op;
  return impl_->enqueue(std::move(t));
}

Work Communicator::barrier() {
  if (std::optional<Work> done =
          impl_->try_mailbox(Collective::Barrier, nullptr, nullptr, 0, DataType::UInt8, ReduceOp::Sum))
    return *std::move(done);
  Task t;
  t.collective = Collective::Barrier;
  t.dtype = DataType::UInt8;
  return impl_->enqueue(std::move(t));
}

Work Communicator::send(const void* buffer, std::size_t count, DataType dtype, int peer) {
  Task t = p2p_task(Task::Kind::Send, buffer, count, dtype, peer, rank(), size());
  t.input = buffer;
  return impl_->enqueue(std::move(t));
}

Work Communicator::recv(void* buffer, std::size_t count, DataType dtype, int peer) {
  Task t = p2p_task(Task::Kind::Recv, buffer, count, dtype, peer, rank(), size());
  t.output = buffer;
  return impl_->enqueue(std::move(t));
}

namespace {

comm::StageRequest stage(DeviceStream stream, const void* send, std::size_t send_bytes, std::size_t in_offset,
                         void* recv, std::size_t recv_bytes, std::size_t out_offset, std::size_t host_bytes,
                         std::chrono::milliseconds timeout) {
  comm::StageRequest r;
  r.stream = stream.handle;
  r.send = send;
  r.send_bytes = send_bytes;
  r.in_offset = in_offset;
  r.recv = recv;
  r.recv_bytes = recv_bytes;
  r.out_offset = out_offset;
  r.host_bytes = host_bytes;
  r.timeout = timeout;
  return r;
}

}  // namespace

Work Communicator::all_reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                              DeviceStream stream) {
  check_types(dtype, op, "all_reduce");
  check_size(count, dtype, 1, "all_reduce");
  check_buffer(send, count, "send buffer", "all_reduce");
  check_buffer(recv, count, "receive buffer", "all_reduce");
  Task t;
  t.collective = Collective::AllReduce;
  t.count = count;
  t.dtype = dtype;
  t.op = op;
  const std::size_t n = count * size_of(dtype);
  const auto r = stage(stream, send, n, 0, recv, n, 0, n, impl_->timeout);
  return impl_->enqueue_device(std::move(t), r);
}

Work Communicator::broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                             DeviceStream stream) {
  check_types(dtype, ReduceOp::Sum, "broadcast");
  check_size(count, dtype, 1, "broadcast");
  KIZUNA_CHECK_ARG(root >= 0 && root < size(), "broadcast: root ", root, " is out of range for world size ", size());
  if (rank() == root) check_buffer(send, count, "send buffer", "broadcast");
  check_buffer(recv, count, "receive buffer", "broadcast");
  Task t;
  t.collective = Collective::Broadcast;
  t.count = count;
  t.dtype = dtype;
  t.root = root;
  const std::size_t n = count * size_of(dtype);
  const auto r = stage(stream, send, rank() == root ? n : 0, 0, recv, n, 0, n, impl_->timeout);
  return impl_->enqueue_device(std::move(t), r);
}

Work Communicator::reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root,
                          DeviceStream stream) {
  check_types(dtype, op, "reduce");
  check_size(count, dtype, 1, "reduce");
  KIZUNA_CHECK_ARG(root >= 0 && root < size(), "reduce: root ", root, " is out of range for world size ", size());
  check_buffer(send, count, "send buffer", "reduce");
  if (rank() == root) check_buffer(recv, count, "receive buffer", "reduce");
  Task t;
  t.collective = Collective::Reduce;
  t.count = count;
  t.dtype = dtype;
  t.op = op;
  t.root = root;
  const std::size_t n = count * size_of(dtype);
  const auto r = stage(stream, send, n, 0, recv, rank() == root ? n : 0, 0, n, impl_->timeout);
  return impl_->enqueue_device(std::move(t), r);
}

Work Communicator::all_gather(const void* send, void* recv, std::size_t send_count, DataType dtype,
                              DeviceStream stream) {
  check_types(dtype, ReduceOp::Sum, "all_gather");
  check_size(send_count, dtype, static_cast<std::size_t>(size()), "all_gather");
  check_buffer(send, send_count, "send buffer", "all_gather");
  check_buffer(recv, send_count, "receive buffer", "all_gather");
  Task t;
  t.collective = Collective::AllGather;
  t.count = send_count;
  t.dtype = dtype;
  const std::size_t n = send_count * size_of(dtype);
  // In place on the host: the input lands inside the output.
  const auto r = stage(stream, send, n, rank() * n, recv, n * size(), 0, n * size(), impl_->timeout);
  return impl_->enqueue_device(std::move(t), r);
}

Work Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype,
                                  ReduceOp op, DeviceStream stream) {
  check_types(dtype, op, "reduce_scatter");
  check_size(recv_count, dtype, static_cast<std::size_t>(size()), "reduce_scatter");
  check_buffer(send, recv_count, "send buffer", "reduce_scatter");
  check_buffer(recv, recv_count, "receive buffer", "reduce_scatter");
  Task t;
  t.collective = Collective::ReduceScatter;
  t.count = recv_count;
  t.dtype = dtype;
  t.op = op;
  const std::size_t n = recv_count * size_of(dtype);
  // In place on the host: the output is taken from inside the input.
  const auto r = stage(stream, send, n * size(), 0, recv, n, rank() * n, n * size(), impl_->timeout);
  return impl_->enqueue_device(std::move(t), r);
}

Work Communicator::send(const void* buffer, std::size_t count, DataType dtype, int peer, DeviceStream stream) {
  Task t = p2p_task(Task::Kind::Send, buffer, count, dtype, peer, rank(), size());
  const std::size_t n = count * size_of(dtype);
  const auto r = stage(stream, buffer, n, 0, nullptr, 0, 0, n, impl_->timeout);
  return impl_->enqueue_device(std::move(t), r);
}

Work Communicator::recv(void* buffer, std::size_t count, DataType dtype, int peer, DeviceStream stream) {
  Task t = p2p_task(Task::Kind::Recv, buffer, count, dtype, peer, rank(), size());
  const std::size_t n = count * size_of(dtype);
  const auto r = stage(stream, nullptr, 0, 0, buffer, n, 0, n, impl_->timeout);
  return impl_->enqueue_device(std::move(t), r);
}

std::shared_ptr<void> Communicator::allocate_symmetric(std::size_t bytes) {
  if (impl_->symmetric) {
    const auto deadline = Clock::now() + std::max(impl_->timeout, std::chrono::milliseconds(60'000));
    if (std::shared_ptr<void> p = impl_->symmetric->allocate(bytes, deadline)) return p;
  }
  // Ordinary memory: page-aligned and zeroed, like the symmetric kind.
  const std::size_t page = 4096;
  KIZUNA_CHECK_ARG(bytes <= SIZE_MAX - page, "allocate_symmetric: ", bytes, " bytes is too many");
  void* p = std::aligned_alloc(page, (bytes + page - 1) / page * page + (bytes == 0 ? page : 0));
  if (p == nullptr) KIZUNA_THROW(ErrorCode::SystemError, "allocate_symmetric: cannot allocate ", bytes, " bytes");
  std::memset(p, 0, bytes);
  return std::shared_ptr<void>(p, std::free);
}

std::string Communicator::device() const { return impl_->device ? impl_->device->describe() : "cpu"; }

std::shared_ptr<Communicator> Communicator::split(int color, int key) {
  // Everyone's (color, key), gathered through this communicator.
  const int mine[2] = {color, key};
  std::vector<int> all(2 * size());
  all_gather(mine, all.data(), 2, DataType::Int32).wait();
  const int split_id = impl_->split_count++;
  if (color < 0) return nullptr;
  std::vector<std::pair<int, int>> members;  // (key, rank)
  for (int r = 0; r < size(); ++r)
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  std::sort(members.begin(), members.end());
  CommOptions options = impl_->options;
  options.world_size = static_cast<int>(members.size());
  options.rank = static_cast<int>(
      std::find(members.begin(), members.end(), std::pair{key, rank()}) - members.begin());
  options.name = name() + "/split" + std::to_string(split_id) + "/color" + std::to_string(color);
  options.timeout = impl_->timeout;
  return create(options);
}

void Communicator::abort(const std::string& reason) {
  const Error error(ErrorCode::Aborted, "communicator " + name() + " on rank " +
                                            std::to_string(rank()) + " aborted: " + reason);
  {
    std::lock_guard lock(impl_->error_mutex);  // see fail()
    if (!impl_->broken.exchange(true)) impl_->fatal = std::make_exception_ptr(error);
  }
  for (auto& link : impl_->links)
    if (link) link->interrupt();
  if (impl_->device) impl_->device->abort();
  impl_->fail_queued(std::make_exception_ptr(error));
}

std::exception_ptr Communicator::async_error() const {
  std::lock_guard lock(impl_->error_mutex);
  return impl_->fatal;
}

}  // namespace kizuna
