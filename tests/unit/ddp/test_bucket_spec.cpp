// assign_buckets() alone: hand-worked examples, then its properties over many
// layouts, caps, dtype patterns and orders.
#include <catch2/catch.hpp>

#include <kizuna/bucket_spec.hpp>
#include <kizuna/error.hpp>

#include <algorithm>
#include <map>
#include <numeric>

#include "ddp_scenario.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

// `counts[i]` elements of `types[i % types.size()]`, back to back (aligned),
// with `gap` bytes after each.
std::vector<Parameter> layout(const std::vector<std::size_t>& counts, const std::vector<DataType>& types,
                              std::size_t gap = 0) {
  std::vector<Parameter> out;
  std::size_t at = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    Parameter p;
    p.name = "p" + std::to_string(i);
    p.dtype = types[i % types.size()];
    p.count = counts[i];
    at = (at + size_of(p.dtype) - 1) / size_of(p.dtype) * size_of(p.dtype);
    p.offset = at;
    at += p.bytes() + gap;
    out.push_back(p);
  }
  return out;
}

std::vector<std::vector<std::size_t>> members(const std::vector<BucketSpec>& buckets) {
  std::vector<std::vector<std::size_t>> out;
  for (const auto& b : buckets) out.push_back(b.parameters);
  return out;
}

using Members = std::vector<std::vector<std::size_t>>;

// Every property assign_buckets promises, for one input.
void check_properties(const std::vector<Parameter>& params, const std::vector<std::size_t>& order,
                      std::size_t first, std::size_t cap) {
  const auto buckets = assign_buckets(params, order, first, cap);
  // Concatenated, the buckets are `order`.
  std::vector<std::size_t> concat;
  for (const auto& b : buckets) concat.insert(concat.end(), b.parameters.begin(), b.parameters.end());
  REQUIRE(concat == order);
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const BucketSpec& b = buckets[k];
    CAPTURE(k);
    REQUIRE_FALSE(b.parameters.empty());
    std::size_t bytes = 0;
    for (std::size_t p : b.parameters) {
      CHECK(params[p].dtype == b.dtype);  // one dtype per bucket
      bytes += params[p].bytes();
    }
    CHECK(b.bytes == bytes);
    CHECK(b.count() * size_of(b.dtype) == b.bytes);
    const std::size_t limit = k == 0 ? first : cap;
    CHECK((b.bytes <= limit || b.parameters.size() == 1));
    // Greedy: the next bucket's first parameter did not fit, or changed type.
    if (k + 1 < buckets.size()) {
      const Parameter& next = params[buckets[k + 1].parameters.front()];
      CHECK((next.dtype != b.dtype || b.bytes + next.bytes() > limit));
    }
    // Segments: ascending, not adjacent (merged), covering exactly the views.
    std::size_t seg_bytes = 0;
    for (std::size_t s = 0; s < b.segments.size(); ++s) {
      seg_bytes += b.segments[s].bytes;
      if (s > 0) CHECK(b.segments[s - 1].offset + b.segments[s - 1].bytes < b.segments[s].offset);
    }
    CHECK(seg_bytes == b.bytes);
    for (std::size_t p : b.parameters) {
      const auto& v = params[p];
      CHECK(std::any_of(b.segments.begin(), b.segments.end(), [&](const auto& s) {
        return s.offset <= v.offset && v.offset + v.bytes() <= s.offset + s.bytes;
      }));
    }
  }
}

}  // namespace

TEST_CASE("bucket assignment: worked examples", "[ddp][buckets]") {
  const std::vector<DataType> f32{DataType::Float32};

  SECTION("reverse order, a small first bucket, then the cap") {
    // Five 400-byte parameters; first cap 1000, cap 1200.
    const auto params = layout({100, 100, 100, 100, 100}, f32);
    const auto b = assign_buckets(params, reverse_order(5), 1000, 1200);
    CHECK(members(b) == Members{{4, 3}, {2, 1, 0}});
    CHECK(b[0].bytes == 800);
    CHECK(b[1].bytes == 1200);  // exactly at the cap still fits
    // Contiguous in memory: one segment each, the bucket's lowest offset first.
    REQUIRE(b[0].segments.size() == 1);
    CHECK(b[0].segments[0].offset == 1200);
    CHECK(b[0].segments[0].bytes == 800);
    REQUIRE(b[1].segments.size() == 1);
    CHECK(b[1].segments[0].offset == 0);
  }

  SECTION("a parameter larger than the cap sits alone") {
    const auto params = layout({10, 5000, 10, 10}, f32);
    const auto b = assign_buckets(params, reverse_order(4), 100, 100);
    CHECK(members(b) == Members{{3, 2}, {1}, {0}});
    CHECK(b[1].bytes == 20000);
  }

  SECTION("a change of dtype closes the bucket") {
    const auto params = layout({10, 10, 10, 10}, {DataType::Float32, DataType::Float64});
    const auto b = assign_buckets(params, reverse_order(4), 1 << 20, 1 << 20);
    CHECK(members(b) == Members{{3}, {2}, {1}, {0}});
    CHECK(b[0].dtype == DataType::Float64);
    CHECK(b[1].dtype == DataType::Float32);
  }

  SECTION("runs of one dtype share buckets") {
    const auto params = layout({10, 10, 10, 10}, {DataType::Float32, DataType::Float32,
                                                  DataType::BFloat16, DataType::BFloat16});
    const auto b = assign_buckets(params, reverse_order(4), 1 << 20, 1 << 20);
    CHECK(members(b) == Members{{3, 2}, {1, 0}});
    CHECK(b[0].dtype == DataType::BFloat16);
    CHECK(b[0].bytes == 40);
  }

  SECTION("gaps between views make several segments") {
    const auto params = layout({10, 10, 10}, f32, 8);
    const auto b = assign_buckets(params, reverse_order(3), 1 << 20, 1 << 20);
    REQUIRE(b.size() == 1);
    CHECK_FALSE(b[0].is_contiguous());
    REQUIRE(b[0].segments.size() == 3);
    CHECK(b[0].segments[0].offset == 0);
    CHECK(b[0].segments[1].offset == 48);
    CHECK(b[0].segments[2].offset == 96);
  }

  SECTION("an order that jumps around memory: segments merge where views touch") {
    const auto params = layout({10, 10, 10, 10}, f32);
    const auto b = assign_buckets(params, {2, 0, 3, 1}, 80, 80);
    CHECK(members(b) == Members{{2, 0}, {3, 1}});
    CHECK(b[0].segments.size() == 2);  // [0, 40) and [80, 120)
    CHECK(b[1].segments.size() == 2);  // [40, 80) and [120, 160)
    const auto whole = assign_buckets(params, {2, 0, 3, 1}, 1000, 1000);
    REQUIRE(whole.size() == 1);
    CHECK(whole[0].is_contiguous());  // all four touch, whatever the order
  }

  SECTION("no parameters, no buckets") {
    CHECK(assign_buckets({}, {}, 1, 1).empty());
  }
}

TEST_CASE("bucket assignment: properties over many shapes, caps, dtypes and orders",
          "[ddp][buckets]") {
  const int seed = GENERATE(range(0, 12));
  const std::size_t first = GENERATE(std::size_t{1}, std::size_t{64}, std::size_t{1000},
                                     std::size_t{1} << 20);
  const std::size_t cap = GENERATE(std::size_t{1}, std::size_t{100}, std::size_t{4096},
                                   std::size_t{25} << 20);
  CAPTURE(seed, first, cap);
  // Sizes from 1 element to ~3 MiB, skewed small; dtype patterns per seed.
  const std::size_t n = 1 + ddp_hash(seed, 1, 2, 3) % 60;
  std::vector<std::size_t> counts;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t h = ddp_hash(seed, i, 4, 5);
    counts.push_back(1 + (h % 4 == 0 ? h % 800000 : h % 2000));
  }
  const std::vector<std::vector<DataType>> patterns{
      {DataType::Float32},
      {DataType::Float32, DataType::Float32, DataType::Float32, DataType::BFloat16},
      {DataType::Float64, DataType::Float16},
      {DataType::Int8, DataType::Int64, DataType::Int64, DataType::Float32, DataType::UInt8}};
  const auto& types = patterns[seed % patterns.size()];
  const std::size_t gap = seed % 3 == 2 ? 24 : 0;
  const auto params = layout(counts, types, gap);

  SECTION("reverse registration order") {
    check_properties(params, reverse_order(n), first, cap);
    if (gap == 0 && types.size() == 1)
      for (const auto& b : assign_buckets(params, reverse_order(n), first, cap))
        CHECK(b.is_contiguous());  // registered in memory order without gaps: views
  }
  SECTION("a shuffled order") {
    check_properties(params, mark_order(MarkOrder::Shuffled, n, seed, 9), first, cap);
  }
  SECTION("forward order") {
    check_properties(params, mark_order(MarkOrder::Forward, n, 0, 0), first, cap);
  }
}

TEST_CASE("bucket assignment: errors", "[ddp][buckets]") {
  const auto params = layout({10, 10, 10}, {DataType::Float32});
  auto code = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;
  };
  CHECK(code([&] { assign_buckets(params, {0, 1}, 10, 10); }) == ErrorCode::InvalidArgument);
  CHECK(code([&] { assign_buckets(params, {0, 1, 1}, 10, 10); }) == ErrorCode::InvalidArgument);
  CHECK(code([&] { assign_buckets(params, {0, 1, 3}, 10, 10); }) == ErrorCode::InvalidArgument);
  CHECK(code([&] { assign_buckets(params, {0, 1, 2}, 0, 10); }) == ErrorCode::InvalidArgument);
  CHECK(code([&] { assign_buckets(params, {0, 1, 2}, 10, 0); }) == ErrorCode::InvalidArgument);
  auto overlapping = params;
  overlapping[1].offset = 20;
  CHECK(code([&] { assign_buckets(overlapping, {0, 1, 2}, 1000, 1000); }) ==
        ErrorCode::InvalidArgument);
}
