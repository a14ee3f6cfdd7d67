// The double binary tree: two valid spanning trees, complementary roles.
#include <catch2/catch.hpp>

#include <vector>

#include "algo/tree.hpp"

using namespace kizuna::algo;

TEST_CASE("both trees are spanning trees with consistent links", "[trees]") {
  for (int n = 1; n <= 64; ++n) {
    CAPTURE(n);
    for (int t = 0; t < 2; ++t) {
      CAPTURE(t);
      int roots = 0;
      for (int r = 0; r < n; ++r) {
        const TreeNode node = dtree(n, r)[t];
        if (node.parent < 0) ++roots;
        else {
          // my parent lists me as a child
          const TreeNode parent = dtree(n, node.parent)[t];
          CHECK((parent.children[0] == r || parent.children[1] == r));
        }
        for (int child : node.children)
          if (child >= 0) {
            REQUIRE(child < n);
            CHECK(dtree(n, child)[t].parent == r);
          }
        // every rank reaches the root, within ceil(log2 n) + 1 hops
        int depth = tree_depth(n, r, t);
        int bound = 1;
        while ((1 << (bound - 1)) < n) ++bound;
        CHECK(depth <= bound);
      }
      CHECK(roots == 1);
    }
  }
}

TEST_CASE("each rank reduces (has children) in at most one of the two trees when n is even",
          "[trees]") {
  for (int n = 2; n <= 64; n += 2) {
    CAPTURE(n);
    for (int r = 0; r < n; ++r) {
      const auto trees = dtree(n, r);
      CAPTURE(r);
      CHECK((trees[0].child_count() == 0 || trees[1].child_count() == 0));
    }
  }
}

TEST_CASE("with n odd at most one rank has children in both trees", "[trees]") {
  for (int n = 3; n <= 63; n += 2) {
    CAPTURE(n);
    int both = 0;
    for (int r = 0; r < n; ++r) {
      const auto trees = dtree(n, r);
      if (trees[0].child_count() > 0 && trees[1].child_count() > 0) ++both;
    }
    CHECK(both <= 1);
  }
}
