// Running one task: the common pre-step, its route, then the route's way.
//
//   run_task       the error boundary: a failure fails the communicator
//                  (failure.cpp) and the task's Work
//   execute        pre-step (with KIZUNA_CHECK=1 the fingerprint exchange,
//                  which every route's call meets first, so that no route's
//                  own meeting can hold a mismatched peer), then the route
//                  (comm/route.hpp), then one of:
//   run_mailbox    the mailboxes (comm/mailbox.hpp)
//   run_symmetric  symmetric memory, in place or staged (comm/symmetric.hpp)
//   run_schedule   a schedule from algo/ over the links (comm/executor.hpp)
//   run_p2p        a send or a receive
#include <algorithm>

#include "algo/cost_model.hpp"
#include "comm/comm_impl.hpp"
#include "comm/fingerprint.hpp"
#include "core/coarse_clock.hpp"
#include "core/reduce.hpp"

namespace kizuna {

using comm::Task;
using algo::Collective;

// Whether a call's buffers' kind can change its route: an all-reduce left
// to auto, from symmetric_from (where the tables of private and symmetric
// buffers part), once there is symmetric memory to lie in.
bool Communicator::Impl::symmetric_may_count(const comm::Call& c) const {
  return symmetric && c.kind == comm::CallKind::Collective && c.collective == Collective::AllReduce &&
         tuning.algorithm == Algorithm::Auto && c.bytes() >= tuning.symmetric_from && symmetric->any();
}

// The buffers' kind of a host call: symmetric when both buffers lie in
// symmetric memory. Looked up only where it can count.
comm::Buffers Communicator::Impl::kind_of(const comm::Call& c) const {
  if (!symmetric_may_count(c)) return comm::Buffers::Host;
  const bool both = symmetric->holds(c.send, c.bytes()) && (c.recv == c.send || symmetric->holds(c.recv, c.bytes()));
  return both ? comm::Buffers::Symmetric : comm::Buffers::Host;
}

// As kind_of, and a call on symmetric memory holds its buffers'
// allocations until it has run (a queued call may run after the user freed
// them).
comm::Buffers Communicator::Impl::classify(Task& t) const {
  const comm::Call& c = t.call;
  if (!symmetric_may_count(c)) return comm::Buffers::Host;
  std::shared_ptr<const void> in = symmetric->pin(c.send, c.bytes());
  std::shared_ptr<const void> out = symmetric->pin(c.recv, c.bytes());
  if (!in || !out) return comm::Buffers::Host;
  t.pinned_input = std::move(in);
  t.pinned_output = std::move(out);
  return comm::Buffers::Symmetric;
}

comm::Route Communicator::Impl::route_for(const Task& t) const {
  // The verdict every rank agrees on for this call (it changes only within
  // a call that probes): see SymmetricMemory::agreed_placement.
  return comm::choose_route({t.call.kind, t.call.collective, t.call.bytes()}, t.buffers, placement_now(), paths,
                            tuning);
}

// Runs (or resumes) a task and finishes its Work; false, with nothing
// finished, when it yielded part-run after waiting `patience` (see
// try_direct).
bool Communicator::Impl::run_task(Task& t, Clock::duration patience) {
  std::exception_ptr error;
  try {
    if (broken.load()) throw_unusable();
    if (t.staged && !t.staged->wait_input(t.part, Clock::now() + tuning.timeout))
      KIZUNA_THROW(ErrorCode::Timeout, "the CUDA stream of ", label(t, "").str(), " did not deliver its input within ",
                   tuning.timeout.count(), " ms");
    if (!execute(t, patience)) return false;
  } catch (const std::exception& raw) {
    const Error e = call_error(raw, t);
    error = std::make_exception_ptr(e);
    fail(e);
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

// What a call that failed with `raw` reports: a collective's Timeout
// explained (where every rank is), another kizuna::Error as it is,
// anything else an Internal error.
Error Communicator::Impl::call_error(const std::exception& raw, const Task& t) {
  const auto* error = dynamic_cast<const Error*>(&raw);
  if (!error) return Error(ErrorCode::Internal, raw.what());
  if (error->code() == ErrorCode::Timeout && t.call.kind == comm::CallKind::Collective)
    return explain_timeout(*error, t.seq);
  return *error;
}

// False when it yielded after `patience` (t.running: resume it).
bool Communicator::Impl::execute(Task& t, Clock::duration patience) {
  bool done = false;
  if (t.running) {
    done = t.route == comm::Route::Mailbox ? run_mailbox(t, patience) : executor->resume(t.label, patience);
  } else {
    t.deadline = core::coarse_now() + tuning.timeout;
    if (t.call.kind != comm::CallKind::Collective) {
      run_p2p(t, t.deadline);
      return true;
    }
    // The common pre-step: every rank's call compared before any route meets.
    if (tuning.check) verify_fingerprints(t, t.deadline, label(t, ""));
    t.route = route_for(t);
    // A peer that waits at its mailbox for this call sees it is elsewhere.
    if (mailbox && t.route != comm::Route::Mailbox)
      mailbox->announce(t.seq, static_cast<std::uint32_t>(t.call.collective), t.call.count);
    switch (t.route) {
      case comm::Route::Mailbox: done = run_mailbox(t, patience); break;
      case comm::Route::Symmetric:
      case comm::Route::Staged: done = run_symmetric(t); break;
      default: done = run_schedule(t, patience); break;
    }
  }
  if (done) finish_collective(t);
  return done;
}

// KIZUNA_CHECK=1: all-gather every rank's fingerprint of this call and
// fail every rank with the same Mismatch when they differ.
void Communicator::Impl::verify_fingerprints(const Task& t, Clock::time_point deadline, comm::RunLabel what) {
  const comm::Call& c = t.call;
  const comm::Fingerprint mine{c.collective, c.dtype, c.op, c.root, c.count, t.seq, t.buffers == comm::Buffers::Symmetric};
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
  executor->run(schedule, {bytes.data(), all.data(), nullptr}, DataType::UInt8, ReduceOp::Sum, {comm::kCheckTag | t.seq, 0},
                deadline, what);
  std::vector<comm::Fingerprint> prints;
  for (int r = 0; r < world; ++r) prints.push_back(comm::decode(all.data() + r * bytes.size()));
  const std::string report = comm::compare(prints);
  if (!report.empty())
    KIZUNA_THROW(ErrorCode::Mismatch, "KIZUNA_CHECK: ranks disagree on call #", t.seq, " of ", name, ":", report);
}

// Starts or resumes a mailbox call; false when it yielded part-run after
// waiting `patience` (see try_direct).
bool Communicator::Impl::run_mailbox(Task& t, Clock::duration patience) {
  const comm::Call& c = t.call;
  if (!t.running) {
    t.label = label(t, "mailbox");
    history.started(t.history_id, "mailbox", 1);
    live.begin(t.seq, 1);
    t.running = true;
  }
  return mailbox->run({c.collective, c.send, c.recv, c.count, c.dtype, c.op, t.seq}, t.deadline, t.label, patience);
}

bool Communicator::Impl::run_symmetric(Task& t) {
  const comm::Call& c = t.call;
  const bool staged = t.route == comm::Route::Staged;
  t.label = label(t, comm::name(t.route));
  const comm::SymmetricMemory::Call call{c.send, c.recv, c.count, c.dtype, c.op, t.seq};
  if (staged) {
    history.started(t.history_id, comm::name(t.route), symmetric->staged_meetings(c.bytes(), size_of(c.dtype)));
    symmetric->all_reduce_staged(call, t.deadline, t.label);
  } else {
    history.started(t.history_id, comm::name(t.route), symmetric->symmetric_meetings());
    const bool ran = symmetric->all_reduce(call, t.deadline, t.label);
    KIZUNA_CHECK(ran, t.label.str(), ": its buffers are no longer symmetric memory");
  }
  return true;
}

// False when the executor yielded after `patience` (t.running: resume it).
bool Communicator::Impl::run_schedule(Task& t, Clock::duration patience) {
  const Plan& p = plan_for(t.call, t.buffers);
  t.label = label(t, algo::name(p.algorithm));
  // The slots write as the placement probe last told: a call over them
  // counts towards the next probe, and holds it first when one is due.
  if (symmetric) symmetric->before_slot_call(t.call.bytes(), t.seq, t.deadline, t.label);
  const auto steps = static_cast<std::uint32_t>(p.schedule->steps.size());
  history.started(t.history_id, algo::name(p.schedule->algorithm), steps);
  return start_schedule(t, p, patience);
}

// The plan of a call on the Schedule route: the last one's when the call
// repeats its shape (training and benchmarks repeat one), which then costs
// neither the cost model nor a look in `schedules`.
const Communicator::Impl::Plan& Communicator::Impl::plan_for(const comm::Call& c, comm::Buffers buffers) {
  const std::size_t elem = size_of(c.dtype);
  const comm::Placement placement = placement_now();  // before the call's probe, if it holds one
  Plan& p = last_plan;
  if (!p.schedule || p.collective != c.collective || p.root != c.root || p.count != c.count || p.elem != elem ||
      p.buffers != buffers || p.placement != placement) {
    const algo::ScheduleRequest req = request_for(c, choose(c, buffers, placement), c.count);
    p = Plan{c.collective, c.root, c.count, elem, buffers, placement, req.algorithm, schedule_for(req)};
  }
  return p;
}

// Starts `t` on the executor with plan `p` (its label and history record
// set); false when it yielded after `patience`.
bool Communicator::Impl::start_schedule(Task& t, const Plan& p, Clock::duration patience) {
  const comm::Call& c = t.call;
  const algo::RankSchedule& schedule = *p.schedule;
  const std::size_t need = schedule.scratch_count * p.elem;
  if (scratch.size() < need) scratch.resize(need);  // zeroed: pre-faulted
  t.running = true;
  const comm::CallTag tag{t.seq, comm::message_code(c)};
  if (executor->start(schedule, {c.send, c.recv, scratch.data()}, c.dtype, c.op, tag, t.deadline, t.label, patience))
    return true;
  // Left part-run: the task keeps its schedule alive until it ends. (Taken
  // only now: copying a shared_ptr is a locked instruction, which would
  // wait for the messages just published to leave.)
  t.schedule = p.schedule;
  return false;
}

// A staged device send or receive, in its turn in the queue: the host
// half goes through the point-to-point engine (tag 0), so it meets host
// calls on the other side, and the queue waits for it as it waits for a
// collective.
void Communicator::Impl::run_p2p(Task& t, Clock::time_point deadline) {
  comm::P2pOp op = p2p_op(t.call, 0, deadline);
  const Work done(op.work);
  history.started(t.history_id, "", 1);
  p2p->post(std::move(op));
  done.wait();
}

void Communicator::Impl::finish_collective(const Task& t) {
  const comm::Call& c = t.call;
  if (c.op == ReduceOp::Avg && holds_result(c)) core::scale(c.recv, c.count, c.dtype, world);
}

// Whether this rank's output holds the result of `call` (what Avg divides).
bool Communicator::Impl::holds_result(const comm::Call& c) const {
  return c.collective == Collective::AllReduce || c.collective == Collective::ReduceScatter ||
         (c.collective == Collective::Reduce && rank == c.root);
}

// The algorithm of a call on the Schedule route: as forced, else a measured
// profile's (docs/tuning.md#tuner), else the cost model's; GPU to GPU the
// model's under the device link (docs/tuning.md#device-link-model), every
// rank on one node. A forced algorithm that has no form for this
// collective runs as Ring.
algo::Algorithm Communicator::Impl::choose(const comm::Call& c, comm::Buffers buffers,
                                           comm::Placement placement) const {
  const Algorithm forced = tuning.algorithm;
  if (forced == Algorithm::Ring || forced == Algorithm::Tree) return forced;
  if (forced != Algorithm::Auto) return c.collective == Collective::AllReduce ? forced : Algorithm::Ring;
  if (buffers == comm::Buffers::Device)
    return algo::choose_algorithm(c.collective, c.bytes(), world, tuning.device_link, true);
  if (c.collective == Collective::AllReduce)
    if (const auto measured = comm::profiled_algorithm(c.bytes(), buffers, placement, tuning)) return *measured;
  return algo::choose_algorithm(c.collective, c.bytes(), tuning.hierarchical ? topology.nodes : world, tuning.link,
                                tuning.single_host);
}

// The schedule request of `call` run with `a` over `count` of its elements
// (all of them, or one part of a device call).
algo::ScheduleRequest Communicator::Impl::request_for(const comm::Call& c, algo::Algorithm a, std::uint64_t count) const {
  algo::ScheduleRequest req;
  req.collective = c.collective;
  req.algorithm = a;
  req.world_size = world;
  req.rank = rank;
  req.root = c.root;
  req.count = count;
  req.elem_size = size_of(c.dtype);
  req.slice_bytes = tuning.slice_bytes;
  if (tuning.hierarchical) req.node_of = topology.node_of;
  return req;
}

// What tells a rank's schedules apart, as the caches key them.
Communicator::Impl::ScheduleKey Communicator::Impl::schedule_key(const algo::ScheduleRequest& req) {
  return {static_cast<int>(req.collective), static_cast<int>(req.algorithm) | (req.confirm ? 16 : 0), req.root,
          req.count, req.elem_size, req.block_stride};
}

// The host's schedule of `request`, cached. Its broadcasts and reduces
// confirm their one-way edges (algo::ScheduleRequest::confirm), so that a
// mismatched call fails on every rank.
std::shared_ptr<const algo::RankSchedule> Communicator::Impl::schedule_for(const algo::ScheduleRequest& request) {
  algo::ScheduleRequest req = request;
  req.confirm = true;
  const ScheduleKey key = schedule_key(req);
  auto it = schedules.find(key);
  if (it == schedules.end()) {
    if (schedules.size() >= 64) schedules.clear();
    it = schedules.emplace(key, std::make_shared<const algo::RankSchedule>(algo::make_schedule(req))).first;
  }
  return it->second;
}

comm::RunLabel Communicator::Impl::label(const Task& t, std::string_view algorithm) const {
  comm::RunLabel l;
  l.rank = rank;
  l.comm = &name;
  switch (t.call.kind) {
    case comm::CallKind::Send: l.what = "send to rank"; l.peer = t.call.root; break;
    case comm::CallKind::Recv: l.what = "recv from rank"; l.peer = t.call.root; break;
    case comm::CallKind::Collective:
      l.what = algo::name(t.call.collective);
      l.seq = t.seq;
      l.algorithm = algorithm;
      l.suffix = t.part_label;
      break;
  }
  return l;
}

}  // namespace kizuna
