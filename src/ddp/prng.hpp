// ddp/prng.hpp: the pseudo-random generators DistributedSampler is specified
// with (kizuna/distributed_sampler.hpp), written out so that a permutation
// is the same on every platform.
//
//   SplitMix64   Steele, Lea & Flood (2014), Vigna's reference constants;
//                used to seed xoshiro256** as its authors recommend.
//   xoshiro256** Blackman & Vigna (2018).
//   uniform(n)   Lemire (2019), "Fast random integer generation in an
//                interval": a 64x64->128 multiply, rejecting the low part
//                below 2^64 mod n, so every value in [0, n) is equally likely.
// Header-only, no state beyond the object; not thread-safe per object.
#pragma once

#include <cstdint>

namespace kizuna::ddp {

// SplitMix64's output function: a bijection of 64-bit words.
constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t state) : state_(state) {}
  constexpr std::uint64_t next() { return splitmix64_mix(state_ += 0x9e3779b97f4a7c15ull); }

 private:
  std::uint64_t state_;
};

class Xoshiro256StarStar {
 public:
  explicit constexpr Xoshiro256StarStar(std::uint64_t seed) {
    SplitMix64 sm(seed);
    for (auto& w : s_) w = sm.next();
  }

  // The raw state, for known-answer tests (not all zero).
  static constexpr Xoshiro256StarStar from_state(std::uint64_t a, std::uint64_t b, std::uint64_t c,
                                                 std::uint64_t d) {
    Xoshiro256StarStar x(0);
    x.s_[0] = a;
    x.s_[1] = b;
    x.s_[2] = c;
    x.s_[3] = d;
    return x;
  }

  constexpr std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, n), n > 0.
  constexpr std::uint64_t uniform(std::uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;  // 2^64 mod n
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  std::uint64_t s_[4] = {};
};

}  // namespace kizuna::ddp
