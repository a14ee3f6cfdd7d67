// Double binary tree all-reduce (NCCL's "tree" algorithm).
//
// The buffer is split in two halves; half t is reduced up tree t to its root
// and broadcast back down the same tree. With n = 8 (tree 1 is tree 0
// mirrored, r -> 7-r):
//
//          tree 0                        tree 1
//            0                             7
//            4                             3
//        2       6                     5       1
//      1   3   5   7                 6   4   2   0
//
// Ranks 1, 3, 5, 7 are leaves of tree 0 and interior in tree 1, and the
// other way round, so every rank's links carry about the same load.
//
// Each half is cut into slices. For slice j a rank with children c0, c1 and
// parent p does, in tree t:
//   up(t, j):   recv_reduce from c0 (input + message -> output),
//               recv_reduce(_send) from c1 (output + message -> output, on to p)
//               a leaf just sends its input slice to p
//   down(t, j): recv_copy_send from p to c0, send to c1 (the root sends to both)
// and the order of a rank's steps is
//   up(0, j), up(1, j), down(0, j - L), down(1, j - L)   for j = 0, 1, ...
// so the broadcast of slice j-L overlaps the reduction of slice j. Any lag
// L >= 0 is deadlock-free (every wait is on a step that is earlier in a
// global order: up by slice then by height, down by slice then by depth);
// L = 2 * depth keeps a rank busy with reductions while slice j-L makes its
// round trip to the root and back.
#include "algo/tree.hpp"

#include "algo/builder.hpp"

namespace kizuna::algo {

TreeNode btree(int n, int rank) {
  TreeNode node;
  int bit = 1;
  while (bit < n && !(bit & rank)) bit <<= 1;
  if (rank == 0) {
    // the root has one child: the top of the in-order tree
    int top = 1;
    while (top * 2 < n) top <<= 1;
    if (n > 1) node.children[0] = top;
    return node;
  }
  int up = (rank ^ bit) | (bit << 1);
  if (up >= n) up = rank ^ bit;
  node.parent = up;
  int low = bit >> 1;
  if (low > 0) {
    node.children[0] = rank - low;
    int right = rank + low;
    while (low > 0 && right >= n) {
      low >>= 1;
      right = rank + low;
    }
    node.children[1] = low > 0 ? right : -1;
  }
  return node;
}

std::array<TreeNode, 2> dtree(int n, int rank) {
  std::array<TreeNode, 2> trees{btree(n, rank), TreeNode{}};
  auto map_back = [](int r, auto&& f) { return r < 0 ? -1 : f(r); };
  if (n % 2 == 1) {
    // shift: tree 1 at rank r is tree 0 at rank r-1, relabelled by +1
    const TreeNode t = btree(n, mod(rank - 1, n));
    auto f = [n](int r) { return mod(r + 1, n); };
    trees[1].parent = map_back(t.parent, f);
    trees[1].children = {map_back(t.children[0], f), map_back(t.children[1], f)};
  } else {
    // mirror: tree 1 at rank r is tree 0 at rank n-1-r
    const TreeNode t = btree(n, n - 1 - rank);
    auto f = [n](int r) { return n - 1 - r; };
    trees[1].parent = map_back(t.parent, f);
    trees[1].children = {map_back(t.children[0], f), map_back(t.children[1], f)};
  }
  return trees;
}

int tree_depth(int n, int rank, int which_tree) {
  int depth = 0;
  for (int r = rank; dtree(n, r)[which_tree].parent >= 0; r = dtree(n, r)[which_tree].parent)
    ++depth;
  return depth;
}

namespace {

// The steps of one slice moving up one tree.
void up(StepWriter& w, const TreeNode& node, Range s) {
  const int kids = node.child_count();
  const bool has_parent = node.parent >= 0;
  if (kids == 0) {
    if (has_parent) w.send(node.parent, Buffer::Input, s.offset, s.count);
    else w.copy(Buffer::Input, s.offset, Buffer::Output, s.offset, s.count);
    return;
  }
  Buffer src = Buffer::Input;
  for (int i = 0, seen = 0; i < 2; ++i) {
    const int child = node.children[i];
    if (child < 0) continue;
    const bool last = ++seen == kids;
    if (last && has_parent)
      w.recv_reduce_send(child, node.parent, src, s.offset, Buffer::Output, s.offset, s.count);
    else
      w.recv_reduce(child, src, s.offset, Buffer::Output, s.offset, s.count);
    src = Buffer::Output;
  }
}

// The steps of one slice moving down one tree.
void down(StepWriter& w, const TreeNode& node, Range s) {
  bool have_data = node.parent < 0;  // the root already holds the result
  for (int child : node.children) {
    if (child < 0) continue;
    if (!have_data) {
      w.recv_copy_send(node.parent, child, Buffer::Output, s.offset, s.count);
      have_data = true;
    } else {
      w.send(child, Buffer::Output, s.offset, s.count);
    }
  }
  if (!have_data) w.recv(node.parent, Buffer::Output, s.offset, s.count);
}

int height_bound(int n) {
  int levels = 1;
  while ((1 << levels) < n) ++levels;
  return levels + 1;
}

}  // namespace

void tree_all_reduce(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  out.input_count = out.output_count = req.count;
  StepWriter w(out.steps);
  const std::array<TreeNode, 2> trees = dtree(n, req.rank);
  const std::array<Range, 2> halves{chunk(req.count, 2, 0, align_elems(req)),
                                    chunk(req.count, 2, 1, align_elems(req))};
  const std::uint64_t se = slice_elems(req);
  const std::array<std::uint64_t, 2> slices{slice_count(halves[0].count, se),
                                            slice_count(halves[1].count, se)};
  const std::uint64_t lag = 2 * static_cast<std::uint64_t>(height_bound(n));
  const std::uint64_t rounds = std::max(slices[0], slices[1]) + lag;
  for (std::uint64_t j = 0; j < rounds; ++j) {
    for (int t = 0; t < 2; ++t)
      if (j < slices[t]) up(w, trees[t], slice(halves[t], se, j));
    for (int t = 0; t < 2; ++t)
      if (j >= lag && j - lag < slices[t]) down(w, trees[t], slice(halves[t], se, j - lag));
  }
}

}  // namespace kizuna::algo
