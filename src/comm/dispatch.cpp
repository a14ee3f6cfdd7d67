// The queue, the worker, and the calls their callers run themselves.
//
// Calls run in call order, one at a time, under exec_mutex. A call is
// queued and run by the worker, unless its caller gets there first: a
// caller that waits runs the queue up to its call (run_inline), and a
// caller whose calls are waited for at once, with nothing queued or
// running, runs a small call itself without the queue (try_direct, and
// try_small for the smallest all-reduces and barriers, which skips even
// the queue's Task and lock). A direct call never sleeps: a peer not there
// within the inline grace leaves it queued, part-run, for the caller's
// wait or the worker to finish, so that a caller may still issue further
// calls (on other communicators too) before it waits.
// docs/tuning.md#direct-calls.
#include <algorithm>

#include "comm/comm_impl.hpp"
#include "core/coarse_clock.hpp"
#include "core/reduce.hpp"

namespace kizuna {

using comm::Task;

thread_local const Communicator::Impl* Communicator::Impl::holding_exec = nullptr;

Work Communicator::Impl::submit(const comm::Call& call) {
  if (call.kind == comm::CallKind::Collective &&
      (call.collective == algo::Collective::AllReduce || call.collective == algo::Collective::Barrier))
    if (std::optional<Work> done = try_small(call)) return *std::move(done);
  Task t;
  t.call = call;
  t.buffers = classify(t);
  if (std::optional<Work> done = try_direct(t)) return *std::move(done);
  auto task = std::make_shared<Task>(std::move(t));
  task->work = std::make_shared<detail::WorkState>();
  push_queued({task});
  return Work(task->work);
}

// Point to point runs on its engine (comm/p2p.hpp), once the calls queued
// before it are done: a send then sees what they wrote, while nothing in
// the queue waits for it.
comm::P2pOp Communicator::Impl::p2p_op(const comm::Call& call, int tag, Clock::time_point deadline) {
  comm::P2pOp op;
  op.send = call.kind == comm::CallKind::Send;
  op.data = static_cast<unsigned char*>(op.send ? const_cast<void*>(call.send) : call.recv);
  op.bytes = call.bytes();
  op.peer = call.root;
  op.tag = tag;
  op.deadline = deadline;
  op.work = std::make_shared<detail::WorkState>();
  return op;
}

Work Communicator::Impl::submit_p2p(const comm::Call& call, int tag) {
  comm::P2pOp op = p2p_op(call, tag, Clock::now() + tuning.timeout);
  const Work work(op.work);
  std::shared_ptr<detail::WorkState> before;
  {
    std::lock_guard lock(queue_mutex);
    before = last_queued.lock();
  }
  if (before && !before->finished.load(std::memory_order_acquire)) {
    Work(before).on_complete([engine = p2p, op](const Work& earlier) mutable {
      if (std::exception_ptr error = earlier.error())
        op.work->finish(error);
      else
        engine->post(std::move(op));
    });
  } else {
    p2p->post(std::move(op));
  }
  return work;
}

// The worker holds a reference of its own until it ends (see shutdown).
void Communicator::Impl::start() {
  worker_nap_now = tuning.worker_nap;
  worker = std::thread([self = shared_from_this()] { self->worker_loop(); });
}

void Communicator::Impl::shutdown() {
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
  if (p2p) p2p->shutdown();
  for (auto& link : links)
    if (link) link->interrupt();
  std::this_thread::sleep_until(Clock::time_point(Clock::duration(keep_store_until.load())));
}

void Communicator::Impl::worker_loop() {
  for (;;) {
    {
      std::unique_lock lock(queue_mutex);
      for (;;) {
        if (stopping && queue.empty()) return;
        const Clock::time_point now = Clock::now();
        if (!queue.empty()) {
          // A call queued a moment ago is most likely about to be waited
          // for: leave it to its caller (Work::wait runs it inline,
          // without two thread switches) for the inline grace, asleep, so
          // as not to take a core from the caller or a peer.
          const Clock::time_point until = queue.front()->queued_at + tuning.inline_grace;
          if (stopping || now >= until) break;
          queue_cv.wait_until(lock, until);
        } else if (callers_wait && now - last_enqueue.load(std::memory_order_relaxed) < tuning.awake) {
          const std::uint64_t queued_before = queued_count;
          worker_napping_long = worker_nap_now > tuning.worker_nap;
          queue_cv.wait_until(lock, now + worker_nap_now);
          worker_napping_long = false;
          worker_nap_now = queued_count != queued_before
                               ? tuning.worker_nap
                               : std::min<Clock::duration>(worker_nap_now * 2, tuning.awake);
        } else if (direct_in_flight.load() > 0 && !broken.load()) {
          worker_asleep = true;  // a call queued now wakes it, as below
          queue_cv.wait_until(lock, now + tuning.peer_watch);
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

// exec_mutex for a caller about to run its call itself, unless a call is
// really running. The worker also holds it for a moment after a call ends
// (it finishes the Work while holding it, and drops the task): a caller
// woken by that finish and calling again at once must not take the
// worker's moment for a running call, or its call is left to the worker
// after the inline grace, and the next one again.
std::unique_lock<core::FutexMutex> Communicator::Impl::take_exec_briefly() {
  std::unique_lock exec(exec_mutex, std::try_to_lock);
  for (int tries = 0; !exec && tries < tuning.exec_tries; ++tries) {
    std::this_thread::yield();
    exec.try_lock();
  }
  return exec;
}

// Work::wait() on a queued task: unless a call is running, run it here,
// with the calls queued before it (calls run in order).
void Communicator::Impl::run_inline(const std::shared_ptr<Task>& task) {
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
  run_through(task, Clock::now() - task->queued_at < tuning.inline_grace);
}

// Runs the queue up to and including `task` (unless something else ran it
// meanwhile). The caller holds exec_mutex.
void Communicator::Impl::run_through(const std::shared_ptr<Task>& task, bool at_once) {
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

// Records a call being queued, under queue_mutex. A direct call's time is
// only a record's, to a few milliseconds (the clock costs a tenth of a
// small call); a queued one's is the worker's inline grace's start.
void Communicator::Impl::record_queued(Task& t, bool direct) {
  t.queued_at = direct ? core::coarse_now() : Clock::now();
  const comm::Call& c = t.call;
  const std::string_view kind = c.kind == comm::CallKind::Send   ? std::string_view("send to")
                                : c.kind == comm::CallKind::Recv ? std::string_view("recv from")
                                                                 : algo::name(c.collective);
  const bool rooted = c.collective == algo::Collective::Broadcast || c.collective == algo::Collective::Reduce;
  t.history_id = history.queued(t.seq, kind, c.dtype, c.count, c.kind != comm::CallKind::Collective || rooted ? c.root : -1);
}

// The work handle of a queued task: Work::wait() may run it inline.
void Communicator::Impl::make_work(const std::shared_ptr<Task>& task) {
  if (!task->work) task->work = std::make_shared<detail::WorkState>();
  std::weak_ptr<Impl> weak = weak_from_this();
  task->work->run_inline = [weak, task] {
    if (auto self = weak.lock()) self->run_inline(task);
  };
}

// A small call from a caller whose calls are waited for at once, with
// nothing queued or running, on a route that never sleeps before its peers
// come (comm::runs_in_caller): the caller runs it here, without the queue,
// the worker or a Work to allocate, as a blocking library would.
std::optional<Work> Communicator::Impl::try_direct(Task& t) {
  // A call whose route could not run here however the CPUs are placed is
  // queued at once, without the executor's lock: the rules' near can only
  // turn a staged call into one through the slots, and a profile's tables
  // measured near and far may each name another route.
  const comm::CallShape shape{t.call.kind, t.call.collective, t.call.bytes()};
  const auto could_run = [&](comm::Placement placement) {
    return comm::runs_in_caller(comm::choose_route(shape, t.buffers, placement, paths, tuning), shape.bytes, false,
                                tuning);
  };
  if (!could_run(comm::Placement::Near) && !could_run(comm::Placement::Far)) return std::nullopt;
  if (holding_exec == this) return std::nullopt;  // from a callback: queued, and run by its wait
  std::unique_lock exec = take_exec_briefly();
  if (!exec) return std::nullopt;
  const HoldingExec holding(this);
  {
    std::lock_guard lock(queue_mutex);
    if (!callers_wait || stopping || !queue.empty()) return std::nullopt;
    // Nothing runs or waits before it: it starts here, now, on the route
    // decided now (execute decides the same under this lock).
    const bool probe_due = symmetric && symmetric->slot_call_probes();
    if (!comm::runs_in_caller(route_for(t), t.call.bytes(), probe_due, tuning)) return std::nullopt;
    t.seq = gate.fetch_add(2, std::memory_order_relaxed) >> 1;
    record_queued(t, true);
    last_enqueue.store(t.queued_at, std::memory_order_relaxed);
  }
  if (run_task(t, tuning.inline_grace)) return t.work ? Work(t.work) : Work();
  return queue_part_run(std::move(t), exec);
}

// A direct call left part-run after the inline grace: queued first (calls
// queued meanwhile came after it), for its caller's wait or the worker to
// finish. Releases `exec`.
Work Communicator::Impl::queue_part_run(Task t, std::unique_lock<core::FutexMutex>& exec) {
  auto task = std::make_shared<Task>(std::move(t));
  task->queued_at = Clock::now();  // the worker's grace, and run_inline's, start now
  make_work(task);
  bool wake = false;
  {
    std::lock_guard lock(queue_mutex);
    close_gate();
    queue.push_front(task);
    ++queued_count;
    if (queue.size() == 1) last_queued = task->work;
    wake = worker_asleep || worker_napping_long;
  }
  exec.unlock();
  if (wake) queue_cv.notify_one();
  return Work(task->work);
}

// A small all-reduce or barrier in try_direct's case, on the mailboxes or
// on a schedule over the links, without a Task in the queue or the layers
// of run_task: one number from the open gate, one history record, and the
// route's way (the cheapest way for the smallest calls, whose time is
// mostly this bookkeeping: docs/tuning.md#direct-calls). Its route is the
// one execute() would take. On symmetric memory it is the symmetric
// table's choice, as a profile may make it from small sizes on
// (docs/tuning.md#tuner). Under the rules it does not depend on the
// placement (only a call of the staged route's size does, and such a call
// is left to try_direct); with a profile measured near and far it is the
// table of the placement the ranks agree on, read under the executor's
// lock with the gate open, when every earlier call of this rank has run.
std::optional<Work> Communicator::Impl::try_small(const comm::Call& c) {
  if (broken.load()) return std::nullopt;
  const std::size_t bytes = c.bytes();
  const comm::Buffers buffers = kind_of(c);
  const comm::CallShape shape{c.kind, c.collective, bytes};
  const bool placed = !tuning.near_private_bands.empty() || !tuning.near_symmetric_bands.empty();
  comm::Route route = comm::choose_route(shape, buffers, comm::Placement::Unknown, paths, tuning);
  if (!comm::runs_in_caller(route, bytes, false, tuning) &&
      !(placed && comm::runs_in_caller(comm::choose_route(shape, buffers, comm::Placement::Near, paths, tuning), bytes,
                                       false, tuning)))
    return std::nullopt;
  if (holding_exec == this) return std::nullopt;
  std::unique_lock exec = take_exec_briefly();
  if (!exec) return std::nullopt;
  if (placed) {
    route = comm::choose_route(shape, buffers, placement_now(), paths, tuning);
    if (!comm::runs_in_caller(route, bytes, false, tuning)) return std::nullopt;
  }
  // A placement probe due at this call may sleep: try_direct leaves it queued.
  if (route == comm::Route::Schedule && symmetric && symmetric->slot_call_probes()) return std::nullopt;
  const HoldingExec holding(this);
  std::uint64_t g = gate.load(std::memory_order_relaxed);
  if ((g & 1) != 0 || !gate.compare_exchange_strong(g, g + 2, std::memory_order_relaxed)) return std::nullopt;
  Task t;
  t.call = c;
  t.buffers = buffers;
  t.route = route;
  t.seq = g >> 1;
  t.queued_at = core::coarse_now();
  t.deadline = t.queued_at + tuning.timeout;
  last_enqueue.store(t.queued_at, std::memory_order_relaxed);
  const std::string_view what = algo::name(c.collective);
  try {
    bool done;
    if (route == comm::Route::Mailbox) {
      t.history_id = history.running(t.seq, what, c.dtype, c.count, -1, "mailbox", 1, t.queued_at);
      t.label = label(t, "mailbox");
      live.begin(t.seq, 1);
      t.running = true;
      done = mailbox->run({c.collective, c.send, c.recv, c.count, c.dtype, c.op, t.seq}, t.deadline, t.label,
                          tuning.inline_grace);
    } else {
      const Plan& p = plan_for(c, buffers);
      const auto steps = static_cast<std::uint32_t>(p.schedule->steps.size());
      t.history_id = history.running(t.seq, what, c.dtype, c.count, -1, algo::name(p.schedule->algorithm), steps,
                                     t.queued_at);
      t.label = label(t, algo::name(p.algorithm));
      // As execute() does for a call off the mailboxes, and run_schedule.
      if (mailbox) mailbox->announce(t.seq, static_cast<std::uint32_t>(c.collective), c.count);
      if (symmetric) symmetric->before_slot_call(bytes, t.seq, t.deadline, t.label);
      done = start_schedule(t, p, tuning.inline_grace);
    }
    if (done) {
      finish_collective(t);
      // Within the inline grace of queued_at: the same time, to the coarse
      // clock's few milliseconds, without another look at it.
      history.ended(t.history_id, true, t.queued_at);
      return Work();
    }
  } catch (const std::exception& raw) {
    // As in run_task: the communicator fails with it (its number is taken).
    const Error e = call_error(raw, t);
    fail(e);
    history.ended(t.history_id, false);
    auto work = std::make_shared<detail::WorkState>();
    work->finish(std::make_exception_ptr(e));
    return Work(work);
  }
  if (buffers == comm::Buffers::Symmetric) classify(t);  // queued: it holds its buffers as one queued would
  return queue_part_run(std::move(t), exec);
}

// Queues `tasks` in order, each collective with the next sequence number
// (point-to-point calls take none), and wakes the worker if it must be.
// Throws InvalidArgument, queuing nothing, while the communicator is being
// destroyed.
void Communicator::Impl::push_queued(const std::vector<std::shared_ptr<Task>>& tasks) {
  bool wake = false;
  {
    std::lock_guard lock(queue_mutex);
    KIZUNA_CHECK_ARG(!stopping, "communicator ", name, " is being destroyed");
    close_gate();  // before the numbers are taken: see `gate`
    for (const auto& task : tasks) {
      if (task->call.kind == comm::CallKind::Collective) task->seq = gate.fetch_add(2, std::memory_order_relaxed) >> 1;
      record_queued(*task);
      make_work(task);
      queue.push_back(task);
    }
    last_queued = tasks.back()->work;
    last_enqueue.store(tasks.back()->queued_at, std::memory_order_relaxed);
    queued_count += tasks.size();
    wake = !callers_wait || worker_asleep || worker_napping_long;
  }
  if (wake) queue_cv.notify_one();
}

}  // namespace kizuna
