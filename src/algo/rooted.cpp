// Rooted collectives: broadcast and reduce, as a pipelined chain (Ring) or a
// binomial tree (Tree).
//
// Positions are relative to the root: pos = (rank - root) mod N.
//
// Chain, N = 4, root 0: data flows 0 -> 1 -> 2 -> 3 one slice at a time;
// with S slices the last rank has everything after S + N - 2 slice times,
// so for large buffers the chain runs at link speed whatever N is.
//     broadcast: root sends, middles recv_copy_send, the end receives.
//     reduce:    the far end sends its input, middles recv_reduce_send into
//                scratch, the root recv_reduces into its output.
//
// Binomial tree, N = 8 (positions):
//          0
//       /  |  \      positions, not ranks
//      1   2   4     parent(v) = v with its highest set bit cleared,
//     / \   \         children(v) = v + 2^k for every 2^k > v.
//    3   5   6
//    |
//    7
// Broadcast sends to the largest subtree (the smallest k) first; reduce
// receives from the smallest subtree first (it finishes first). Both are
// pipelined by slice.
#include "algo/builder.hpp"

namespace kizuna::algo {
namespace {

int position(const ScheduleRequest& req) { return mod(req.rank - req.root, req.world_size); }
int rank_at(const ScheduleRequest& req, int pos) { return mod(pos + req.root, req.world_size); }

int highest_bit(int v) {
  int b = 1;
  while (b * 2 <= v) b <<= 1;
  return b;
}

// Children positions of `v` in the binomial tree, largest subtree first.
std::vector<int> binomial_children(int v, int n) {
  std::vector<int> kids;
  int step = 1;
  while (step <= v) step <<= 1;  // the smallest power of two above v
  for (; v + step < n; step <<= 1) kids.push_back(v + step);
  return kids;
}

}  // namespace

void chain_broadcast(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  const int pos = position(req);
  out.input_count = out.output_count = req.count;
  StepWriter w(out.steps);
  const std::uint64_t se = slice_elems(req);
  for (std::uint64_t k = 0; k < slice_count(req.count, se); ++k) {
    const Range s = slice({0, req.count}, se, k);
    const int next = pos + 1 < n ? rank_at(req, pos + 1) : -1;
    if (pos == 0) {
      if (next >= 0) w.send(next, Buffer::Input, s.offset, s.count);
      w.copy(Buffer::Input, s.offset, Buffer::Output, s.offset, s.count);
    } else if (next >= 0) {
      w.recv_copy_send(rank_at(req, pos - 1), next, Buffer::Output, s.offset, s.count);
    } else {
      w.recv(rank_at(req, pos - 1), Buffer::Output, s.offset, s.count);
    }
  }
}

void chain_reduce(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  const int pos = position(req);
  out.input_count = req.count;
  out.output_count = pos == 0 ? req.count : 0;
  // Middles keep their partial sums in scratch: their output is not theirs to use.
  if (pos != 0 && pos != n - 1) out.scratch_count = req.count;
  StepWriter w(out.steps);
  const std::uint64_t se = slice_elems(req);
  for (std::uint64_t k = 0; k < slice_count(req.count, se); ++k) {
    const Range s = slice({0, req.count}, se, k);
    if (n == 1) {
      w.copy(Buffer::Input, s.offset, Buffer::Output, s.offset, s.count);
    } else if (pos == n - 1) {
      w.send(rank_at(req, pos - 1), Buffer::Input, s.offset, s.count);
    } else if (pos == 0) {
      w.recv_reduce(rank_at(req, 1), Buffer::Input, s.offset, Buffer::Output, s.offset, s.count);
    } else {
      w.recv_reduce_send(rank_at(req, pos + 1), rank_at(req, pos - 1), Buffer::Input, s.offset,
                         Buffer::Scratch, s.offset, s.count);
    }
  }
}

void binomial_broadcast(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  const int pos = position(req);
  out.input_count = out.output_count = req.count;
  StepWriter w(out.steps);
  const std::vector<int> kids = binomial_children(pos, n);
  const std::uint64_t se = slice_elems(req);
  for (std::uint64_t k = 0; k < slice_count(req.count, se); ++k) {
    const Range s = slice({0, req.count}, se, k);
    if (pos == 0) {
      for (int kid : kids) w.send(rank_at(req, kid), Buffer::Input, s.offset, s.count);
      w.copy(Buffer::Input, s.offset, Buffer::Output, s.offset, s.count);
      continue;
    }
    const int parent = rank_at(req, pos - highest_bit(pos));
    if (kids.empty()) {
      w.recv(parent, Buffer::Output, s.offset, s.count);
      continue;
    }
    w.recv_copy_send(parent, rank_at(req, kids[0]), Buffer::Output, s.offset, s.count);
    for (std::size_t i = 1; i < kids.size(); ++i)
      w.send(rank_at(req, kids[i]), Buffer::Output, s.offset, s.count);
  }
}

void binomial_reduce(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  const int pos = position(req);
  std::vector<int> kids = binomial_children(pos, n);
  kids = {kids.rbegin(), kids.rend()};  // smallest subtree first
  out.input_count = req.count;
  out.output_count = pos == 0 ? req.count : 0;
  // Interior ranks accumulate in scratch; the root in its output.
  const Buffer acc = pos == 0 ? Buffer::Output : Buffer::Scratch;
  if (pos != 0 && !kids.empty()) out.scratch_count = req.count;
  StepWriter w(out.steps);
  const std::uint64_t se = slice_elems(req);
  for (std::uint64_t k = 0; k < slice_count(req.count, se); ++k) {
    const Range s = slice({0, req.count}, se, k);
    const int parent = pos == 0 ? -1 : rank_at(req, pos - highest_bit(pos));
    if (kids.empty()) {
      if (parent >= 0) w.send(parent, Buffer::Input, s.offset, s.count);
      else w.copy(Buffer::Input, s.offset, Buffer::Output, s.offset, s.count);
      continue;
    }
    Buffer src = Buffer::Input;
    for (std::size_t i = 0; i < kids.size(); ++i) {
      const int kid = rank_at(req, kids[i]);
      if (i + 1 == kids.size() && parent >= 0)
        w.recv_reduce_send(kid, parent, src, s.offset, acc, s.offset, s.count);
      else
        w.recv_reduce(kid, src, s.offset, acc, s.offset, s.count);
      src = acc;
    }
  }
}

}  // namespace kizuna::algo
