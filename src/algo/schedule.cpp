#include "algo/schedule.hpp"

#include <map>
#include <set>
#include <sstream>

#include "algo/builder.hpp"
#include "core/check.hpp"

namespace kizuna::algo {

std::string_view name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::Broadcast: return "broadcast";
    case Collective::Reduce: return "reduce";
    case Collective::Barrier: return "barrier";
  }
  return "unknown";
}

std::string_view name(Algorithm a) {
  switch (a) {
    case Algorithm::Auto: return "auto";
    case Algorithm::Ring: return "ring";
    case Algorithm::Tree: return "tree";
    case Algorithm::OneShot: return "oneshot";
    case Algorithm::TwoShot: return "twoshot";
    case Algorithm::Doubling: return "doubling";
  }
  return "unknown";
}

std::string_view name(StepOp op) {
  switch (op) {
    case StepOp::Send: return "send";
    case StepOp::Recv: return "recv";
    case StepOp::RecvReduce: return "recv_reduce";
    case StepOp::RecvReduceSend: return "recv_reduce_send";
    case StepOp::RecvCopySend: return "recv_copy_send";
    case StepOp::Copy: return "copy";
    case StepOp::LocalReduce: return "local_reduce";
  }
  return "unknown";
}

namespace {
const char* buffer_name(Buffer b) {
  switch (b) {
    case Buffer::Input: return "in";
    case Buffer::Output: return "out";
    case Buffer::Scratch: return "scratch";
  }
  return "?";
}
}  // namespace

std::string describe(const Step& s) {
  std::ostringstream out;
  out << name(s.op);
  if (s.recv_peer >= 0) out << " from " << s.recv_peer;
  if (s.sends()) out << " to " << s.send_peer;
  if (s.op != StepOp::Recv && s.op != StepOp::RecvCopySend)
    out << " " << buffer_name(s.src) << "[" << s.src_offset << "]";
  if (s.op != StepOp::Send) out << " -> " << buffer_name(s.dst) << "[" << s.dst_offset << "]";
  out << " x" << s.count;
  return out.str();
}

bool is_hierarchical(const ScheduleRequest& req) {
  if (req.collective != Collective::AllReduce || req.node_of.empty()) return false;
  std::map<int, int> ranks_per_node;
  for (int node : req.node_of) ++ranks_per_node[node];
  if (ranks_per_node.size() < 2) return false;
  for (const auto& [node, ranks] : ranks_per_node)
    if (ranks > 1) return true;
  return false;
}

namespace {

// Broadcast and reduce leave ranks that only send to a peer (the root of a
// broadcast, the leaves of a reduce, each forwarding rank towards the
// next): such a rank would finish without hearing that its peers made the
// same call. Confirmation reverses every one-way edge with an empty
// message: a rank first waits for one from each peer it only sent to,
// then sends one to each peer it only received from. On a tree or a chain
// the confirmations flow back from the far ends, so a rank finishes once
// every rank beyond it has received its part, and never waits in a cycle.
void confirm_one_way_edges(RankSchedule& out) {
  std::set<int> sent, received;
  for (const Step& step : out.steps) {
    if (step.sends()) sent.insert(step.send_peer);
    if (step.receives()) received.insert(step.recv_peer);
  }
  StepWriter w(out.steps);
  for (int peer : sent)
    if (!received.count(peer)) w.recv(peer, Buffer::Output, 0, 0);
  for (int peer : received)
    if (!sent.count(peer)) w.send(peer, Buffer::Input, 0, 0);
}

}  // namespace

RankSchedule make_schedule(const ScheduleRequest& req) {
  KIZUNA_CHECK_ARG(req.world_size >= 1, "world size ", req.world_size, " must be at least 1");
  KIZUNA_CHECK_ARG(req.rank >= 0 && req.rank < req.world_size, "rank ", req.rank,
                   " is out of range for world size ", req.world_size);
  KIZUNA_CHECK_ARG(req.elem_size > 0, "element size must be positive");
  KIZUNA_CHECK_ARG(req.algorithm != Algorithm::Auto, "a schedule needs an algorithm, not auto");
  KIZUNA_CHECK_ARG(req.block_stride == 0 || req.block_stride >= req.count, "rank blocks ", req.block_stride,
                   " elements apart would overlap: each holds ", req.count);
  KIZUNA_CHECK_ARG(req.node_of.empty() || static_cast<int>(req.node_of.size()) == req.world_size,
                   "node map of ", req.node_of.size(), " ranks for world size ", req.world_size);
  RankSchedule out;
  out.request = req;
  out.algorithm = req.algorithm;
  switch (req.collective) {
    case Collective::AllReduce:
      if (req.world_size == 1) {
        // Alone, whatever the algorithm: the result is the input.
        out.input_count = out.output_count = req.count;
        StepWriter(out.steps).copy(Buffer::Input, 0, Buffer::Output, 0, req.count);
      } else if (is_hierarchical(req)) {
        out.hierarchical = true;
        hierarchical_all_reduce(req, out);
      } else if (req.algorithm == Algorithm::Tree) {
        tree_all_reduce(req, out);
      } else if (req.algorithm == Algorithm::OneShot) {
        one_shot_all_reduce(req, out);
      } else if (req.algorithm == Algorithm::TwoShot) {
        two_shot_all_reduce(req, out);
      } else if (req.algorithm == Algorithm::Doubling) {
        doubling_all_reduce(req, out);
      } else {
        ring_all_reduce(req, out);
      }
      break;
    case Collective::AllGather:
      out.algorithm = Algorithm::Ring;
      ring_all_gather(req, out);
      break;
    case Collective::ReduceScatter:
      out.algorithm = Algorithm::Ring;
      ring_reduce_scatter(req, out);
      break;
    case Collective::Broadcast:
    case Collective::Reduce: {
      KIZUNA_CHECK_ARG(req.root >= 0 && req.root < req.world_size, "root ", req.root,
                       " is out of range for world size ", req.world_size);
      const bool bcast = req.collective == Collective::Broadcast;
      if (req.algorithm != Algorithm::Tree) out.algorithm = Algorithm::Ring;
      if (out.algorithm == Algorithm::Tree) bcast ? binomial_broadcast(req, out) : binomial_reduce(req, out);
      else bcast ? chain_broadcast(req, out) : chain_reduce(req, out);
      if (req.confirm) confirm_one_way_edges(out);
      break;
    }
    case Collective::Barrier:
      out.algorithm = Algorithm::Ring;
      dissemination_barrier(req, out);
      break;
  }
  return out;
}

}  // namespace kizuna::algo
