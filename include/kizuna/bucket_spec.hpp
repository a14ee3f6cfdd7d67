// kizuna/bucket_spec.hpp: how a Reducer groups gradients into buckets.
//
// A bucket is a group of gradients that is all-reduced as one call, so that
// a model of thousands of small tensors costs tens of collectives, not
// thousands, while the first buckets can already travel as backward goes on
// (after PyTorch's compute_bucket_assignment_by_size).
//
// assign_buckets() is a pure function of the registered views, an order and
// two caps:
//   - Parameters are taken in `order`: reverse registration order at first
//     (reverse_order(n)), because backward produces the gradients of the last
//     layers first; after a rebuild, the order gradients were observed to
//     become ready.
//   - A bucket takes parameters while its size stays within its cap: the
//     first bucket's cap is first_bucket_bytes (small, so that communication
//     starts early), every later bucket's is bucket_cap_bytes. A parameter
//     that does not fit closes the bucket and opens the next one; a
//     parameter larger than the cap gets a bucket of its own.
//   - A bucket never mixes dtypes: a change of dtype in `order` closes the
//     bucket too (a bucket is reduced as one typed call).
//
// Segments: the byte ranges of a bucket's views, sorted by offset, with
// adjacent ranges merged. When views are registered in memory order with no
// gaps and `order` is the reverse registration order, every bucket is one
// segment: one contiguous range of the gradient buffer, which the Reducer
// reduces in place with no copy. A bucket of several segments (gaps between
// views, or an order that jumps around in memory, as a rebuild may produce)
// is still correct, but the Reducer packs it into a staging buffer of its
// own and unpacks it afterwards: one copy each way for that bucket. The
// elements of a bucket are always in ascending offset order, whatever
// `order` is, so every rank lays a bucket out the same way.
//
// Threading: pure; call from anywhere.
#pragma once

#include <kizuna/parameter.hpp>
#include <kizuna/types.hpp>

#include <cstddef>
#include <vector>

namespace kizuna {

struct BucketSpec {
  struct Segment {
    std::size_t offset = 0;  // bytes from the start of the flat buffers
    std::size_t bytes = 0;
  };

  DataType dtype = DataType::Float32;
  // Indices into the registration list, in the order they were assigned.
  std::vector<std::size_t> parameters;
  // Ascending by offset, adjacent ranges merged.
  std::vector<Segment> segments;
  std::size_t bytes = 0;

  std::size_t count() const { return bytes / size_of(dtype); }
  bool is_contiguous() const { return segments.size() <= 1; }
};

// Buckets for `params` taken in `order` (a permutation of 0..params.size()-1),
// capped as described above. Throws InvalidArgument when `order` is not a
// permutation, a cap is 0, or two views of one bucket overlap.
std::vector<BucketSpec> assign_buckets(const std::vector<Parameter>& params,
                                       const std::vector<std::size_t>& order,
                                       std::size_t first_bucket_bytes,
                                       std::size_t bucket_cap_bytes);

// n-1, n-2, ..., 0: the order backward produces gradients in.
std::vector<std::size_t> reverse_order(std::size_t n);

}  // namespace kizuna
