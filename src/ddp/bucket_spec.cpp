// Bucket assignment (kizuna/bucket_spec.hpp): one greedy pass over `order`.
//
//   order:  p5 p4 p3 p2 p1 p0      (reverse registration), first cap F, cap C
//   bucket 0: p5 p4 ...   while its bytes stay <= F and the dtype is the same
//   bucket 1: ...         while <= C, and so on
//
// A parameter that would overflow the open bucket, or has another dtype,
// closes it; a parameter bigger than the cap therefore sits alone.
#include <kizuna/bucket_spec.hpp>

#include <algorithm>

#include "core/check.hpp"

namespace kizuna {

namespace {

// Sorts the bucket's byte ranges and merges the adjacent ones.
void build_segments(const std::vector<Parameter>& params, BucketSpec& bucket) {
  std::vector<BucketSpec::Segment> ranges;
  ranges.reserve(bucket.parameters.size());
  for (std::size_t p : bucket.parameters) ranges.push_back({params[p].offset, params[p].bytes()});
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  for (const auto& r : ranges) {
    if (!bucket.segments.empty()) {
      auto& last = bucket.segments.back();
      KIZUNA_CHECK_ARG(last.offset + last.bytes <= r.offset, "assign_buckets: views overlap at byte ",
                       r.offset, " (a range [", last.offset, ", ", last.offset + last.bytes,
                       ") is in the same bucket)");
      if (last.offset + last.bytes == r.offset) {
        last.bytes += r.bytes;
        continue;
      }
    }
    bucket.segments.push_back(r);
  }
}

}  // namespace

std::vector<BucketSpec> assign_buckets(const std::vector<Parameter>& params,
                                       const std::vector<std::size_t>& order,
                                       std::size_t first_bucket_bytes,
                                       std::size_t bucket_cap_bytes) {
  KIZUNA_CHECK_ARG(first_bucket_bytes > 0 && bucket_cap_bytes > 0,
                   "assign_buckets: bucket caps must be positive (first_bucket_bytes ",
                   first_bucket_bytes, ", bucket_cap_bytes ", bucket_cap_bytes, ")");
  KIZUNA_CHECK_ARG(order.size() == params.size(), "assign_buckets: order has ", order.size(),
                   " entries for ", params.size(), " parameters");
  std::vector<bool> seen(params.size(), false);
  for (std::size_t p : order) {
    KIZUNA_CHECK_ARG(p < params.size() && !seen[p], "assign_buckets: order is not a permutation of 0..",
                     params.size(), "-1 (", p, p < params.size() ? " repeats)" : " is out of range)");
    seen[p] = true;
  }

  std::vector<BucketSpec> buckets;
  for (std::size_t p : order) {
    const Parameter& param = params[p];
    if (!buckets.empty()) {
      BucketSpec& open = buckets.back();
      const std::size_t cap = buckets.size() == 1 ? first_bucket_bytes : bucket_cap_bytes;
      if (open.dtype == param.dtype && open.bytes + param.bytes() <= cap) {
        open.parameters.push_back(p);
        open.bytes += param.bytes();
        continue;
      }
    }
    BucketSpec next;
    next.dtype = param.dtype;
    next.parameters.push_back(p);
    next.bytes = param.bytes();
    buckets.push_back(std::move(next));
  }
  for (auto& b : buckets) build_segments(params, b);
  return buckets;
}

std::vector<std::size_t> reverse_order(std::size_t n) {
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

}  // namespace kizuna
