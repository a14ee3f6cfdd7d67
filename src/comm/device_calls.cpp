// Calls on device buffers: GPU to GPU when every rank's device joined at
// creation (Route::DeviceDirect), else staged through pinned host memory
// (Route::DeviceStaged), the host running the collective on its parts.
#include "comm/comm_impl.hpp"
#include "comm/device_parts.hpp"
#include "comm/device_steps.hpp"
#include "core/check.hpp"

namespace kizuna {

using comm::Task;
using algo::Collective;

namespace {

// Where a call's device buffers land in its host buffer and come back
// from: every collective runs in place on the host, so all-gather's input
// lands inside the output and reduce-scatter's output is taken from inside
// the input.
comm::StageRequest stage_request(const comm::Call& c, int rank, int world, DeviceStream stream,
                                 std::chrono::milliseconds timeout) {
  const std::size_t n = c.bytes();
  const bool root = c.root == rank;
  comm::StageRequest r;
  r.stream = stream.handle;
  r.send = c.send;
  r.recv = c.recv;
  r.send_bytes = r.recv_bytes = r.host_bytes = n;
  r.timeout = timeout;
  if (c.kind == comm::CallKind::Send) {
    r.recv = nullptr;
    r.recv_bytes = 0;
  } else if (c.kind == comm::CallKind::Recv) {
    r.send = nullptr;
    r.send_bytes = 0;
  } else if (c.collective == Collective::Broadcast) {
    r.send_bytes = root ? n : 0;
  } else if (c.collective == Collective::Reduce) {
    r.recv_bytes = root ? n : 0;
  } else if (c.collective == Collective::AllGather) {
    r.in_offset = rank * n;
    r.recv_bytes = r.host_bytes = n * world;
  } else if (c.collective == Collective::ReduceScatter) {
    r.out_offset = rank * n;
    r.send_bytes = r.host_bytes = n * world;
  }
  return r;
}

}  // namespace

Work Communicator::Impl::submit_device(const comm::Call& call, DeviceStream stream) {
  KIZUNA_CHECK_ARG(device != nullptr, "communicator ", name, " is a CPU communicator: calls with a ",
                   "stream need CommOptions.device or KIZUNA_DEVICE = cuda");
  const comm::StageRequest r = stage_request(call, rank, world, stream, tuning.timeout);
  const comm::Route route = comm::choose_route({call.kind, call.collective, call.bytes()}, comm::Buffers::Device,
                                               comm::Placement::Unknown, paths, tuning);
  if (route == comm::Route::DeviceDirect) return launch_direct(call, r);
  return enqueue_device(call, r);
}

// A device collective, GPU to GPU: launched on the caller's stream at once,
// in call order, outside the queue (the host's calls and these use
// different channels). The Work finishes when the stream has run it.
Work Communicator::Impl::launch_direct(const comm::Call& c, const comm::StageRequest& r) {
  if (broken.load()) {
    std::lock_guard lock(error_mutex);
    std::rethrow_exception(fatal);
  }
  auto work = std::make_shared<detail::WorkState>();
  std::lock_guard lock(direct_mutex);
  const algo::Algorithm a = choose(c, comm::Buffers::Device, comm::Placement::Unknown);
  const std::size_t elem = size_of(c.dtype);
  comm::DirectCall call;
  std::size_t steps = 0;
  // Large calls run as several parts at once, one block each; an
  // all-gather's or reduce-scatter's parts address the rank blocks of the
  // whole call (comm/device_parts.hpp). (The tables are copied to the
  // device during launch: clearing the cache between calls leaves nothing
  // dangling.)
  const auto parts = comm::split_parts(c.collective, c.count, elem, device->direct_parts(), tuning.direct_part_bytes,
                                       comm::RankBlocks::Strided);
  const bool by_rank = c.collective == Collective::AllGather || c.collective == Collective::ReduceScatter;
  if (direct_tables.size() + parts.size() > 64) direct_tables.clear();
  for (const comm::DevicePart& part : parts) {
    algo::ScheduleRequest req = request_for(c, a, part.count);
    if (by_rank && part.count != c.count) req.block_stride = c.count;
    auto it = direct_tables.find(schedule_key(req));
    if (it == direct_tables.end()) {
      const algo::RankSchedule schedule = algo::make_schedule(req);
      it = direct_tables.emplace(schedule_key(req), std::pair{comm::encode_steps(schedule), schedule.scratch_count})
               .first;
    }
    call.parts.push_back({&it->second.first, it->second.second * elem, part.offset * elem});
    steps += it->second.first.size();
  }
  const std::uint64_t seq = ++direct_seq;
  const std::uint64_t id = history.queued(seq, algo::name(c.collective), c.dtype, c.count, -1);
  history.started(id, algo::name(a), static_cast<std::uint32_t>(steps));
  call.input = r.send;
  call.output = r.recv;
  call.dtype = c.dtype;
  call.op = c.op;
  call.avg_count = c.op == ReduceOp::Avg && holds_result(c) ? c.count : 0;
  call.avg_divisor = world;
  call.stream = r.stream;
  call.timeout = tuning.timeout;
  call.what = std::string(algo::name(c.collective)) + " #" + std::to_string(seq) + " on device (" +
              std::string(algo::name(a)) + ") on rank " + std::to_string(rank) + " of " + name;
  std::weak_ptr<Impl> weak = weak_from_this();
  direct_in_flight.fetch_add(1);
  try {
    device->launch(call, [weak, work, id](std::exception_ptr e) {
      if (auto self = weak.lock()) {
        self->history.ended(id, e == nullptr);
        // Unusable from now on; the links stay the worker's (fail() would
        // write to them from the device's completion thread). A cause found first
        // (a peer's death) is the error to report.
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

// A call on device buffers staged through host memory
// (comm/staged_call.hpp). An all-reduce, broadcast or reduce is staged in
// parts, each a queued task of its own on its slice of the host buffer, so
// that one part's copies overlap another's collective; every rank cuts
// alike.
Work Communicator::Impl::enqueue_device(const comm::Call& c, comm::StageRequest r) {
  const std::size_t elem = size_of(c.dtype);
  const std::string kind = c.kind == comm::CallKind::Collective ? std::string(algo::name(c.collective))
                           : c.kind == comm::CallKind::Send      ? "send"
                                                                 : "recv";
  r.what = kind + " of " + std::to_string(c.count) + " elements on device (staged) on rank " + std::to_string(rank) +
           " of " + name;
  const std::vector<comm::DevicePart> parts =
      c.kind == comm::CallKind::Collective
          ? comm::split_parts(c.collective, c.count, elem, tuning.staged_parts, tuning.staged_part_bytes)
          : std::vector<comm::DevicePart>{{0, c.count}};
  if (parts.size() > 1) {
    for (const comm::DevicePart& p : parts) r.cuts.push_back(p.offset * elem);
    r.cuts.push_back(c.count * elem);
  }
  auto work = std::make_shared<detail::WorkState>();
  // The device queue's gates open in ticket order, and the worker releases
  // parts in queue order: a call's tickets and its place in the queue are
  // taken together.
  std::lock_guard staging(stage_mutex);
  auto staged =
      comm::StagedCall::start(device->queue(), r, [work](std::exception_ptr e) { work->finish(std::move(e)); });
  std::vector<std::shared_ptr<Task>> tasks;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    auto task = std::make_shared<Task>();
    const std::size_t at = parts[k].offset * elem;
    task->call = c;
    task->call.count = parts[k].count;
    task->call.send = staged->host() + r.in_offset + at;
    task->call.recv = staged->host() + r.out_offset + at;
    task->buffers = comm::Buffers::Staging;
    task->staged = staged;
    task->part = k;
    if (parts.size() > 1)
      task->part_label =
          " (part " + std::to_string(k + 1) + " of " + std::to_string(parts.size()) + " of a staged device call)";
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

}  // namespace kizuna
