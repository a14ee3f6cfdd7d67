// algo/tree.hpp: the binary trees behind the tree all-reduce.
//
// btree(n, r) is NCCL's in-order binary tree over ranks 0..n-1: rank 0 is
// the root with a single child, and a rank's parent and children follow from
// its lowest set bit. Every rank's depth is at most ceil(log2 n) + 1.
//
// dtree(n, r) returns the two complementary trees of the double binary tree:
// tree 0 is btree; tree 1 is btree mirrored (n even: r -> n-1-r) or shifted
// (n odd: r -> r-1). The leaves of one tree are (almost all) the interior
// nodes of the other, so each rank does reduction work in at most one tree
// and both trees together use every link in both directions.
#pragma once

#include <array>

namespace kizuna::algo {

struct TreeNode {
  int parent = -1;                 // -1: the root
  std::array<int, 2> children{-1, -1};  // -1: no child in that slot
  int child_count() const { return (children[0] >= 0) + (children[1] >= 0); }
};

TreeNode btree(int n, int rank);
std::array<TreeNode, 2> dtree(int n, int rank);

// Depth of `rank` in the tree given by `node_of` (0 for the root).
int tree_depth(int n, int rank, int which_tree);

}  // namespace kizuna::algo
