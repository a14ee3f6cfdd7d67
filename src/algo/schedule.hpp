// algo/schedule.hpp: a collective algorithm as data.
//
// A schedule is, for one rank, an ordered list of steps over element ranges
// of three buffers, built from NCCL's primitives:
//
//   Send            send src[range] to send_peer
//   Recv            dst[range] = message from recv_peer
//   RecvReduce      dst[range] = src[range] op message
//   RecvReduceSend  dst[range] = src[range] op message; send dst[range]
//   RecvCopySend    dst[range] = message;               send dst[range]
//   Copy            dst[range] = src[range]             (local, no message)
//   LocalReduce     dst[range] = dst[range] op src[range]  (local, no message)
//
// Buffers: Input (the caller's send buffer, read only), Output (the caller's
// receive buffer) and Scratch (owned by the executor, scratch_count elements).
// When a collective runs in place, Input and Output alias, and a Copy whose
// source and destination coincide is a no-op.
//
// Messages between a pair of ranks are matched by order: the k-th send from
// A to B in a collective is the k-th receive at B from A, and carries
// exactly the step's count of elements (executors check both). Sends are
// asynchronous: a rank never waits for a send to be received before going on
// to its next step, except where it would overwrite the data still being
// sent. Every generator here produces schedules that cannot deadlock under
// that rule; the simulator (algo/simulator.hpp) checks it for every shape.
//
// Schedules know nothing of sockets, shared memory or threads.
#pragma once

#include <kizuna/comm_options.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kizuna::algo {

enum class Collective : std::uint8_t {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  Barrier,
};

// Ring: ring all-reduce / all-gather / reduce-scatter, pipelined chain for
// broadcast and reduce. Tree: double binary tree all-reduce, binomial tree
// broadcast and reduce. OneShot: every rank sends its buffer to every other
// and reduces all of them locally, in rank order (all-reduce of small
// buffers). TwoShot: a reduce-scatter and an all-gather, each one round of
// direct messages (all-reduce of mid-sized buffers where ranks outnumber
// cores). Doubling: recursive doubling, log2 N rounds in which pairs of
// ranks swap and fold their whole buffers (all-reduce of small buffers).
// Collectives that have no tree, one-shot, two-shot or doubling form run as
// Ring. The public enum itself (kizuna/comm_options.hpp), whose Auto is not
// a schedule: make_schedule() refuses it, the cost model never picks it.
using Algorithm = ::kizuna::Algorithm;

enum class StepOp : std::uint8_t { Send, Recv, RecvReduce, RecvReduceSend, RecvCopySend, Copy, LocalReduce };

enum class Buffer : std::uint8_t { Input, Output, Scratch };

std::string_view name(Collective c);
std::string_view name(Algorithm a);
std::string_view name(StepOp op);

struct Step {
  StepOp op = StepOp::Send;
  Buffer src = Buffer::Input;
  Buffer dst = Buffer::Output;
  std::int32_t recv_peer = -1;
  std::int32_t send_peer = -1;
  std::uint64_t src_offset = 0;  // elements
  std::uint64_t dst_offset = 0;  // elements
  std::uint64_t count = 0;       // elements

  bool receives() const {
    return op != StepOp::Send && op != StepOp::Copy && op != StepOp::LocalReduce;
  }
  bool sends() const {
    return op == StepOp::Send || op == StepOp::RecvReduceSend || op == StepOp::RecvCopySend;
  }
  // The buffer and offset a step sends from (dst for the forwarding ops).
  Buffer send_buffer() const { return op == StepOp::Send ? src : dst; }
  std::uint64_t send_offset() const { return op == StepOp::Send ? src_offset : dst_offset; }
};

struct ScheduleRequest {
  Collective collective = Collective::AllReduce;
  Algorithm algorithm = Algorithm::Ring;
  int world_size = 1;
  int rank = 0;
  int root = 0;              // Broadcast and Reduce
  std::uint64_t count = 0;   // elements: per rank for AllGather (input) and ReduceScatter (output)
  // AllGather's Output and ReduceScatter's Input hold one block of `count`
  // per rank; rank q's starts at q * block_stride (0: at q * count, side by
  // side). A device call cut into parts (comm/device_parts.hpp) runs each
  // part as the collective of its `count` elements per rank, its buffers
  // starting at the part's offset and the blocks a whole share apart.
  std::uint64_t block_stride = 0;
  std::uint64_t elem_size = 4;
  std::uint64_t slice_bytes = 512 << 10;  // pipelining unit
  // The node of every rank (empty: all on one node). When an all-reduce
  // spans several nodes and some node holds several ranks, the schedule is
  // hierarchical: reduce inside each node to its lowest rank (the leader),
  // all-reduce among the leaders with `algorithm`, broadcast inside each node.
  std::vector<int> node_of;
  // Broadcast and reduce: every one-way edge answered by an empty message,
  // so that no rank finishes before the ranks it feeds, or that feed it,
  // have matched its messages (a rank in another call fails them instead;
  // see confirm_one_way_edges in schedule.cpp). The host's executor asks
  // for it; the device's kernels do not carry empty messages.
  bool confirm = false;
};

struct RankSchedule {
  ScheduleRequest request;
  Algorithm algorithm = Algorithm::Ring;  // the one actually used
  bool hierarchical = false;
  std::uint64_t input_count = 0;          // elements the Input buffer holds
  std::uint64_t output_count = 0;         // elements the Output buffer holds
  std::uint64_t scratch_count = 0;        // elements of Scratch the executor must provide
  std::vector<Step> steps;
};

// The schedule of `request.rank`. Throws InvalidArgument for a bad request
// (world < 1, rank or root out of range, elem_size 0).
RankSchedule make_schedule(const ScheduleRequest& request);

// True when make_schedule(request) is hierarchical (see node_of).
bool is_hierarchical(const ScheduleRequest& request);

// One line per step, for logs and test failures.
std::string describe(const Step& step);

}  // namespace kizuna::algo
