// mlp/rng.hpp: the trainer's random numbers, the same on every platform.
//
// The initial weights and the synthetic data set must be the same bits on
// every machine, compiler and standard library, or "a seeded run reproduces
// its loss curve" would hold only where it was recorded. std::mt19937 is
// specified, but std::uniform_real_distribution and std::normal_distribution
// are not (each library draws differently), so everything here is spelled
// out:
//
//   state     xoshiro256** (Blackman & Vigna, 2018), seeded with four
//             successive outputs of SplitMix64 (Steele, Lea & Flood, 2014),
//             as its authors recommend
//   uniform() the top 24 bits of an output times 2^-24: a float in [0, 1),
//             every value a multiple of 2^-24, exact in float32
//   normal()  Box-Muller on two uniform doubles (53 bits each). It calls
//             std::log/std::sqrt/std::cos: sqrt is exact by IEEE 754, and
//             glibc's log and cos are correctly rounded in practice, so this
//             is reproducible on glibc; only the random-regression data set
//             uses it (the weights use uniform() alone).
//
// state()/set_state() expose the four words for checkpoints. A small value
// type; not thread-safe per object.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace kizuna::mlp {

class Rng {
 public:
  using State = std::array<std::uint64_t, 4>;

  explicit Rng(std::uint64_t seed) {
    std::uint64_t sm = seed;
    for (auto& w : s_) w = splitmix64(sm);
  }

  std::uint64_t next() {
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

  // [0, 1), a multiple of 2^-24.
  float uniform() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }
  // [lo, hi).
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }

  // Standard normal, by Box-Muller (one of the pair is dropped: simpler
  // state, and speed does not matter here).
  double normal() {
    const double u1 = (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(next() >> 11) * 0x1.0p-53;          // [0, 1)
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  const State& state() const { return s_; }
  void set_state(const State& s) { s_ = s; }

 private:
  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  State s_{};
};

}  // namespace kizuna::mlp
