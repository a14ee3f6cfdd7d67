// DistributedSampler: coverage and disjointness for many (size, world,
// drop_last), padding by wrapping, epochs, and the specified permutation
// (known-answer vectors of its generators, and an independent re-derivation).
#include <catch2/catch.hpp>

#include <kizuna/distributed_sampler.hpp>
#include <kizuna/error.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "ddp/prng.hpp"

using namespace kizuna;

namespace {

// The permutation of kizuna/distributed_sampler.hpp, written again from its
// prose without sharing code: SplitMix64 and xoshiro256** from the papers'
// pseudo-code, Lemire's bounded draw, Fisher-Yates from the back.
std::vector<std::uint64_t> reference_permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) {
  auto mix = [](std::uint64_t z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::uint64_t sm = mix(mix(seed) + epoch);
  std::uint64_t s[4];
  for (auto& w : s) {
    sm += 0x9e3779b97f4a7c15ull;
    w = mix(sm);
  }
  auto rotl = [](std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  auto next = [&] {
    const std::uint64_t out = rotl(s[1] * 5, 7) * 9;
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
  };
  auto below = [&](std::uint64_t bound) {
    // Reject the draws whose low product word falls below 2^64 mod bound.
    const std::uint64_t reject_below = (~bound + 1) % bound;
    for (;;) {
      const unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
      if (static_cast<std::uint64_t>(m) >= reject_below) return static_cast<std::uint64_t>(m >> 64);
    }
  };
  std::vector<std::uint64_t> p(n);
  std::iota(p.begin(), p.end(), std::uint64_t{0});
  for (std::uint64_t i = n; i > 1; --i) std::swap(p[i - 1], p[below(i)]);
  return p;
}

}  // namespace

TEST_CASE("sampler generators match their published known answers", "[ddp][sampler]") {
  // SplitMix64 from 0 (Vigna's splitmix64.c).
  ddp::SplitMix64 sm(0);
  CHECK(sm.next() == 0xe220a8397b1dcdafull);
  CHECK(sm.next() == 0x6e789e6aa1b965f4ull);
  CHECK(sm.next() == 0x06c45d188009454full);
  CHECK(sm.next() == 0xf88bb8a8724c81ecull);
  // xoshiro256** from the state {1, 2, 3, 4}.
  auto x = ddp::Xoshiro256StarStar::from_state(1, 2, 3, 4);
  CHECK(x.next() == 11520ull);
  CHECK(x.next() == 0ull);
  CHECK(x.next() == 1509978240ull);
  CHECK(x.next() == 1215971899390074240ull);
}

TEST_CASE("the permutation is the specified one", "[ddp][sampler]") {
  for (std::uint64_t n : {0, 1, 2, 3, 10, 97, 1000, 4096})
    for (std::uint64_t seed : {0ull, 1ull, 42ull, 0xffffffffffffffffull})
      for (std::uint64_t epoch : {0, 1, 7}) {
        CAPTURE(n, seed, epoch);
        DistributedSampler s(n, 1, 0, true, seed);
        s.set_epoch(epoch);
        CHECK(s.permutation() == reference_permutation(n, seed, epoch));
      }
}

TEST_CASE("uniform draws: Fisher-Yates gives each ordering of 3 equally often", "[ddp][sampler]") {
  // 60000 seeded shuffles (deterministic): each of the 6 orderings expects
  // 10000, with a standard deviation of ~91; 600 is more than 6 of them.
  std::map<std::vector<std::uint64_t>, int> seen;
  for (std::uint64_t seed = 0; seed < 60000; ++seed)
    ++seen[DistributedSampler(3, 1, 0, true, seed).permutation()];
  REQUIRE(seen.size() == 6);
  for (const auto& [perm, count] : seen) {
    CAPTURE(perm[0], perm[1], perm[2]);
    CHECK(count > 9400);
    CHECK(count < 10600);
  }
}

TEST_CASE("each epoch, ranks' lists are disjoint and cover the data set", "[ddp][sampler]") {
  const std::uint64_t n = GENERATE(0, 1, 2, 5, 7, 10, 99, 100, 1001);
  const int world = GENERATE(1, 2, 3, 4, 7, 8, 16);
  const bool drop_last = GENERATE(false, true);
  const bool shuffle = GENERATE(true, false);
  CAPTURE(n, world, drop_last, shuffle);
  const std::uint64_t per_rank = drop_last ? n / world : (n + world - 1) / world;
  const std::uint64_t total = per_rank * world;

  for (std::uint64_t epoch : {0, 3}) {
    std::vector<std::uint64_t> permutation;
    std::map<std::uint64_t, int> times;
    std::uint64_t seen = 0;
    for (int r = 0; r < world; ++r) {
      DistributedSampler s(n, world, r, shuffle, 1234, drop_last);
      s.set_epoch(epoch);
      CHECK(s.num_samples() == per_rank);
      CHECK(s.total_size() == total);
      const auto mine = s.indices();
      REQUIRE(mine.size() == per_rank);
      if (r == 0) permutation = s.permutation();
      CHECK(s.permutation() == permutation);  // identical on every rank
      // Rank r takes positions r, r + world, ... of the (wrapped) permutation.
      for (std::uint64_t k = 0; k < per_rank; ++k) {
        CHECK(mine[k] == permutation[(r + k * world) % n]);
        ++times[mine[k]];
      }
      seen += mine.size();
    }
    CHECK(seen == total);
    std::vector<std::uint64_t> sorted = permutation;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::uint64_t> iota(n);
    std::iota(iota.begin(), iota.end(), std::uint64_t{0});
    CHECK(sorted == iota);
    if (!shuffle) CHECK(permutation == iota);
    if (drop_last) {
      // Disjoint, and exactly the first `total` of the permutation.
      CHECK(times.size() == total);
      for (std::uint64_t k = 0; k < total; ++k) CHECK(times[permutation[k]] == 1);
    } else if (n > 0) {
      // Everything once, plus the wrap-around padding: permutation position j
      // is seen total / n times, once more if j < total mod n.
      CHECK(times.size() == n);
      for (std::uint64_t j = 0; j < n; ++j)
        CHECK(times[permutation[j]] == static_cast<int>(total / n + (j < total % n ? 1 : 0)));
    }
  }
}

TEST_CASE("epochs: the same epoch gives the same permutation, different ones differ",
          "[ddp][sampler]") {
  DistributedSampler a(500, 4, 1, true, 7);
  DistributedSampler b(500, 4, 3, true, 7);
  std::set<std::vector<std::uint64_t>> distinct;
  for (std::uint64_t e = 0; e < 20; ++e) {
    a.set_epoch(e);
    b.set_epoch(e);
    CHECK(a.epoch() == e);
    CHECK(a.permutation() == b.permutation());
    const auto again = a.indices();
    CHECK(a.indices() == again);
    distinct.insert(a.permutation());
  }
  CHECK(distinct.size() == 20);
  // Another seed, another sequence.
  DistributedSampler c(500, 4, 1, true, 8);
  CHECK(c.permutation() != DistributedSampler(500, 4, 1, true, 7).permutation());
  // The options form and PyTorch's argument order agree.
  DistributedSamplerOptions o;
  o.dataset_size = 500;
  o.world_size = 4;
  o.rank = 1;
  o.seed = 7;
  CHECK(DistributedSampler(o).indices() == DistributedSampler(500, 4, 1, true, 7).indices());
}

TEST_CASE("sampler arguments are checked", "[ddp][sampler]") {
  CHECK_THROWS_AS(DistributedSampler(10, 0, 0), Error);
  CHECK_THROWS_AS(DistributedSampler(10, 2, 2), Error);
  CHECK_THROWS_AS(DistributedSampler(10, 2, -1), Error);
  try {
    DistributedSampler(10, 3, 5);
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::InvalidArgument);
    CHECK_THAT(e.what(), Catch::Contains("rank 5"));
  }
}
