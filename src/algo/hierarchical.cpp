// Hierarchical all-reduce, for worlds spanning several nodes.
//
//   node A: ranks 0 1 2      node B: ranks 3 4
//   1. reduce inside each node to its leader (lowest rank):  1,2 -> 0   4 -> 3
//   2. all-reduce among the leaders (ring, tree, doubling):  0 <-> 3
//   3. broadcast inside each node from its leader:           0 -> 1,2   3 -> 4
//
// Steps 1 and 3 use the fast intra-node links (shared memory) and step 2
// the slow inter-node ones, which then carry one buffer per node instead of
// one per rank. Each phase is an ordinary schedule of a sub-group, with its
// peers mapped back to world ranks, and the phases are concatenated (each
// rank's steps stay in order, so the phases pipeline where they can).
#include <algorithm>
#include <map>

#include "algo/builder.hpp"

namespace kizuna::algo {
namespace {

// Appends `part` (a schedule of the group `members`) to `out`, mapping
// group ranks to world ranks and, where given, one buffer onto another.
void append(RankSchedule& out, const RankSchedule& part, const std::vector<int>& members,
            Buffer input_as) {
  for (Step s : part.steps) {
    if (s.recv_peer >= 0) s.recv_peer = members[s.recv_peer];
    if (s.send_peer >= 0) s.send_peer = members[s.send_peer];
    if (s.src == Buffer::Input) s.src = input_as;
    if (s.dst == Buffer::Input) s.dst = input_as;
    out.steps.push_back(s);
  }
  out.scratch_count = std::max(out.scratch_count, part.scratch_count);
}

}  // namespace

void hierarchical_all_reduce(const ScheduleRequest& req, RankSchedule& out) {
  std::map<int, std::vector<int>> nodes;  // node -> its ranks, ascending
  for (int r = 0; r < req.world_size; ++r) nodes[req.node_of[r]].push_back(r);
  const std::vector<int>& mine = nodes[req.node_of[req.rank]];
  std::vector<int> leaders;
  for (const auto& [node, ranks] : nodes) leaders.push_back(ranks.front());
  const int local = static_cast<int>(std::find(mine.begin(), mine.end(), req.rank) - mine.begin());
  out.input_count = out.output_count = req.count;

  // Intra-node phases: a chain for large buffers, a binomial tree for small.
  ScheduleRequest node_req = req;
  node_req.node_of.clear();
  node_req.world_size = static_cast<int>(mine.size());
  node_req.rank = local;
  node_req.root = 0;
  node_req.algorithm = req.count * req.elem_size >= (1u << 20) ? Algorithm::Ring : Algorithm::Tree;

  // 1. reduce to the leader: input -> the leader's output
  node_req.collective = Collective::Reduce;
  RankSchedule part;
  if (node_req.algorithm == Algorithm::Tree) binomial_reduce(node_req, part);
  else chain_reduce(node_req, part);
  append(out, part, mine, Buffer::Input);

  // 2. all-reduce among leaders, in place on their output
  if (local == 0) {
    ScheduleRequest top = node_req;
    top.collective = Collective::AllReduce;
    top.world_size = static_cast<int>(leaders.size());
    top.rank = static_cast<int>(std::find(leaders.begin(), leaders.end(), req.rank) - leaders.begin());
    top.algorithm = req.algorithm == Algorithm::OneShot ? Algorithm::Ring : req.algorithm;
    part = RankSchedule{};
    if (top.algorithm == Algorithm::Tree) tree_all_reduce(top, part);
    else if (top.algorithm == Algorithm::Doubling) doubling_all_reduce(top, part);
    else ring_all_reduce(top, part);
    append(out, part, leaders, Buffer::Output);
  }

  // 3. broadcast from the leader's output to everyone's output
  node_req.collective = Collective::Broadcast;
  part = RankSchedule{};
  if (node_req.algorithm == Algorithm::Tree) binomial_broadcast(node_req, part);
  else chain_broadcast(node_req, part);
  append(out, part, mine, Buffer::Output);
}

}  // namespace kizuna::algo
