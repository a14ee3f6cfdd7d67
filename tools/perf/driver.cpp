#include "driver.hpp"

#include <kizuna/error.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "data.hpp"
#include "timing.hpp"

namespace kizuna::perf {

namespace {

constexpr std::size_t kPage = 4096;
constexpr unsigned char kPoison = 0xa5;

unsigned char* allocate_touched(std::size_t bytes) {
  if (bytes > std::numeric_limits<std::size_t>::max() - kPage)
    throw Error(ErrorCode::InvalidArgument, "cannot allocate " + std::to_string(bytes) + " bytes");
  const std::size_t rounded = std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
  void* p = std::aligned_alloc(kPage, rounded);
  if (!p) throw Error(ErrorCode::SystemError, "cannot allocate " + std::to_string(rounded) + " bytes");
  // Fault every page in now, not during a timed call.
  std::memset(p, 0, rounded);
  return static_cast<unsigned char*>(p);
}

// Where one call reads and writes, and what it is checked against.
struct Call {
  const void* send = nullptr;
  void* recv = nullptr;
  Sizing sizing;
};

// Where a call of size `s` reads and writes in the buffers at `send` and
// `recv` (host or device).
Call placement(Collective c, const Sizing& s, std::size_t elem, int rank, bool in_place, unsigned char* send,
               unsigned char* recv) {
  Call call;
  call.sizing = s;
  call.recv = recv;
  if (!in_place) {
    call.send = send;
    return call;
  }
  switch (c) {
    case Collective::AllGather: call.send = recv + static_cast<std::size_t>(rank) * s.count * elem; break;
    case Collective::ReduceScatter:
      call.send = recv;
      call.recv = recv + static_cast<std::size_t>(rank) * s.count * elem;
      break;
    default: call.send = recv; break;
  }
  return call;
}

Work launch(Communicator& comm, Collective c, const Call& call, DataType t, ReduceOp op, int root,
            const DeviceStream* stream) {
  const std::size_t n = call.sizing.count;
  if (stream) {
    switch (c) {
      case Collective::AllReduce: return comm.all_reduce(call.send, call.recv, n, t, op, *stream);
      case Collective::AllGather: return comm.all_gather(call.send, call.recv, n, t, *stream);
      case Collective::ReduceScatter: return comm.reduce_scatter(call.send, call.recv, n, t, op, *stream);
      case Collective::Broadcast: return comm.broadcast(call.send, call.recv, n, t, root, *stream);
      case Collective::Reduce: return comm.reduce(call.send, call.recv, n, t, op, root, *stream);
    }
  }
  switch (c) {
    case Collective::AllReduce: return comm.all_reduce(call.send, call.recv, n, t, op);
    case Collective::AllGather: return comm.all_gather(call.send, call.recv, n, t);
    case Collective::ReduceScatter: return comm.reduce_scatter(call.send, call.recv, n, t, op);
    case Collective::Broadcast: return comm.broadcast(call.send, call.recv, n, t, root);
    case Collective::Reduce: return comm.reduce(call.send, call.recv, n, t, op, root);
  }
  throw Error(ErrorCode::InvalidArgument, "unknown collective");
}

// Writes this rank's inputs where `call` reads them, after poisoning the
// whole receive area (so an output the collective never wrote is caught).
// The bytes from the receive buffer's start that a call may write (or, in
// place, read its input from).
std::size_t recv_area_bytes(Collective c, const Sizing& s, std::size_t elem, bool in_place) {
  return ((c == Collective::ReduceScatter && in_place) ? s.send_count : s.recv_count) * elem;
}

void prepare_check(Collective c, const Call& call, const ClosedForm& data, int rank, int root,
                   bool in_place, PerfBuffers& buffers) {
  const Sizing& s = call.sizing;
  std::memset(buffers.recv(), kPoison, recv_area_bytes(c, s, data.elem(), in_place));
  void* in = const_cast<void*>(call.send);
  if (c == Collective::Broadcast) {
    if (rank == root) data.input(root, 0, s.send_count, in);
    return;
  }
  data.input(rank, 0, s.send_count, in);
}

std::uint64_t count_wrong(Collective c, const Call& call, const ClosedForm& data, int rank, int root,
                          std::string* first_wrong) {
  const std::size_t e = data.elem();
  const Sizing& s = call.sizing;
  const auto* recv = static_cast<const unsigned char*>(call.recv);
  switch (c) {
    case Collective::AllReduce: return data.wrong_reduced(recv, 0, s.count, first_wrong);
    case Collective::Reduce: return rank == root ? data.wrong_reduced(recv, 0, s.count, first_wrong) : 0;
    case Collective::Broadcast: return data.wrong_input(recv, root, 0, s.count, first_wrong);
    case Collective::AllGather: {
      std::uint64_t wrong = 0;
      for (int r = 0; r < data.world(); ++r)
        wrong += data.wrong_input(recv + static_cast<std::size_t>(r) * s.count * e, r, 0, s.count,
                                  first_wrong);
      return wrong;
    }
    case Collective::ReduceScatter:
      return data.wrong_reduced(recv, static_cast<std::uint64_t>(rank) * s.count, s.count, first_wrong);
  }
  return 0;
}

double reduce_time(Communicator& comm, double seconds, int average) {
  const TimeReduction how = time_reduction(average);
  if (how == TimeReduction::None) return seconds;  // rank 0 prints its own
  const ReduceOp op = how == TimeReduction::Min ? ReduceOp::Min
                      : how == TimeReduction::Max ? ReduceOp::Max
                                                  : ReduceOp::Sum;
  double value = seconds;
  comm.all_reduce(&value, 1, DataType::Float64, op).wait();
  return finish_time(average, value, comm.size());
}

// With `device`, the calls run on its buffers and stream; inputs are still
// computed and results checked in the host buffers, moved to and from the
// device around the timed loop.
Measurement measure(Communicator& comm, const PerfConfig& cfg, const Sizing& s, const ClosedForm& data,
                    bool in_place, PerfBuffers& buffers, DeviceMemory* device) {
  const Collective c = cfg.collective;
  const int rank = comm.rank();
  const DataType t = data.dtype();
  const ReduceOp op = data.op();
  const std::size_t e = data.elem();
  const Call host = placement(c, s, e, rank, in_place, buffers.send(), buffers.recv());
  const Call call = device ? placement(c, s, e, rank, in_place, device->send(), device->recv()) : host;
  const DeviceStream stream = device ? device->stream() : DeviceStream{};
  const DeviceStream* on = device ? &stream : nullptr;
  // Host to device: the receive area (the input, in place) and the input.
  auto upload = [&] {
    if (!device) return;
    device->upload(device->recv(), buffers.recv(), recv_area_bytes(c, s, e, in_place));
    if (!in_place) device->upload(const_cast<void*>(call.send), host.send, s.send_count * e);
  };

  data.input(rank, 0, s.send_count, const_cast<void*>(host.send));
  upload();
  // Device calls are timed in stream order, as nccl-tests times them; host
  // calls one after another, each complete before the next.
  const double local =
      device ? time_queued(
                   cfg.common.warmup, cfg.common.iters, [&] { return launch(comm, c, call, t, op, cfg.root, on); },
                   [&] { comm.barrier().wait(); })
             : time_calls(
                   cfg.common.warmup, cfg.common.iters, [&] { launch(comm, c, call, t, op, cfg.root, on).wait(); },
                   [&] { comm.barrier().wait(); });
  const double seconds = reduce_time(comm, local, cfg.common.average);

  std::int64_t wrong = -1;  // not checked
  for (int k = 0; k < cfg.common.check && wrong <= 0; ++k) {
    prepare_check(c, host, data, rank, cfg.root, in_place, buffers);
    upload();
    launch(comm, c, call, t, op, cfg.root, on).wait();
    if (device) device->download(buffers.recv(), device->recv(), recv_area_bytes(c, s, e, in_place));
    std::string first_wrong;
    std::int64_t mine = static_cast<std::int64_t>(count_wrong(c, host, data, rank, cfg.root, &first_wrong));
    if (mine)
      std::fprintf(stderr, "kizuna-perf: rank %d: %s %s %s count %zu (%s): %lld wrong, first at %s\n",
                   rank, std::string(name(c)).c_str(), std::string(name(t)).c_str(),
                   std::string(name(op)).c_str(), s.count, in_place ? "in-place" : "out-of-place",
                   static_cast<long long>(mine), first_wrong.c_str());
    comm.all_reduce(&mine, 1, DataType::Int64, ReduceOp::Sum).wait();
    wrong = mine;
  }
  return measurement(s.bytes, seconds, bus_factor(c, comm.size()), wrong);
}

}  // namespace

std::size_t PerfBuffers::span_bytes(std::size_t bytes) {
  if (bytes > (std::numeric_limits<std::size_t>::max() - 2 * kPage) / 2)
    throw Error(ErrorCode::InvalidArgument, "cannot allocate 2 x " + std::to_string(bytes) + " bytes");
  return 2 * std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
}

PerfBuffers::PerfBuffers(std::size_t bytes)
    : PerfBuffers(bytes, std::shared_ptr<void>(allocate_touched(span_bytes(bytes)), std::free)) {}

PerfBuffers::PerfBuffers(std::size_t bytes, std::shared_ptr<void> memory)
    : bytes_(bytes),
      memory_(std::move(memory)),
      send_(static_cast<unsigned char*>(memory_.get())),
      recv_(send_ + span_bytes(bytes) / 2) {
  std::memset(send_, 0, span_bytes(bytes));  // every page in, before any timing
}

std::size_t buffer_bytes(const PerfConfig& config) {
  const auto sizes = config.common.sizes();
  return sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
}

std::vector<std::string> gather_rank_lines(Communicator& comm, const std::string& device,
                                           const std::string& transport) {
  constexpr std::size_t kLine = 160;
  char host[64] = {};
  ::gethostname(host, sizeof host - 1);
  char mine[kLine] = {};
  std::snprintf(mine, kLine, "#  Rank %2d Group  0 Pid %6d on %10s device %s transport %s", comm.rank(),
                static_cast<int>(::getpid()), host, device.c_str(), transport.c_str());
  std::vector<char> all(kLine * static_cast<std::size_t>(comm.size()));
  comm.all_gather(mine, all.data(), kLine, DataType::UInt8).wait();
  std::vector<std::string> lines;
  for (int r = 0; r < comm.size(); ++r) {
    const char* line = all.data() + static_cast<std::size_t>(r) * kLine;
    lines.emplace_back(line, strnlen(line, kLine));
  }
  return lines;
}

std::int64_t run_sweep(Communicator& comm, const PerfConfig& cfg, PerfBuffers& buffers, DeviceMemory* device,
                       Report& report) {
  const int world = comm.size();
  const bool reduces = has_op(cfg.collective);
  const std::vector<ReduceOp> ops = reduces ? cfg.ops : std::vector<ReduceOp>{ReduceOp::Sum};
  std::int64_t wrong = 0;
  for (const DataType t : cfg.types) {
    for (const ReduceOp op : ops) {
      if (op == ReduceOp::Avg && !is_floating(t)) continue;  // kizuna defines Avg for floats only
      const ClosedForm data(t, op, world);
      const std::size_t elem = size_of(t);
      for (const std::size_t bytes : cfg.common.sizes()) {
        const Sizing s = size_for(cfg.collective, bytes, elem, world);
        Row row;
        row.size = s.bytes;
        row.count = s.count;
        row.type = nccl_type_name(name(t));
        row.redop = reduces ? std::string(name(op)) : "none";
        row.root = has_root(cfg.collective) ? cfg.root : -1;
        for (const bool in_place : {false, true}) {
          Measurement m = measure(comm, cfg, s, data, in_place, buffers, device);
          if (m.wrong > 0) wrong += m.wrong;
          (in_place ? row.in_place : row.out_of_place) = m;
        }
        report.row(row);
      }
    }
  }
  return wrong;
}

}  // namespace kizuna::perf
