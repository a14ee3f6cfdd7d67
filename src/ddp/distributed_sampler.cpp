#include <kizuna/distributed_sampler.hpp>

#include <numeric>

#include "core/check.hpp"
#include "ddp/prng.hpp"

namespace kizuna {

DistributedSampler::DistributedSampler(const DistributedSamplerOptions& options)
    : options_(options) {
  KIZUNA_CHECK_ARG(options.world_size >= 1, "DistributedSampler: world_size ", options.world_size,
                   " must be at least 1");
  KIZUNA_CHECK_ARG(options.rank >= 0 && options.rank < options.world_size,
                   "DistributedSampler: rank ", options.rank, " is outside [0, ",
                   options.world_size, ")");
  const auto world = static_cast<std::uint64_t>(options.world_size);
  num_samples_ = options.drop_last ? options.dataset_size / world
                                   : (options.dataset_size + world - 1) / world;
}

DistributedSampler::DistributedSampler(std::uint64_t dataset_size, int world_size, int rank,
                                       bool shuffle, std::uint64_t seed, bool drop_last)
    : DistributedSampler(DistributedSamplerOptions{dataset_size, world_size, rank, shuffle, seed,
                                                   drop_last}) {}

std::vector<std::uint64_t> DistributedSampler::permutation() const {
  std::vector<std::uint64_t> p(options_.dataset_size);
  std::iota(p.begin(), p.end(), std::uint64_t{0});
  if (!options_.shuffle || p.size() < 2) return p;
  const std::uint64_t key = ddp::splitmix64_mix(ddp::splitmix64_mix(options_.seed) + epoch_);
  ddp::Xoshiro256StarStar rng(key);
  for (std::uint64_t i = p.size() - 1; i > 0; --i) std::swap(p[i], p[rng.uniform(i + 1)]);
  return p;
}

// Position k of the padded epoch is perm[k mod N] (wrapping, as often as
// needed); with drop_last the epoch simply stops at total_size().
std::vector<std::uint64_t> DistributedSampler::indices() const {
  std::vector<std::uint64_t> out;
  if (num_samples_ == 0) return out;
  const std::vector<std::uint64_t> perm = permutation();
  const std::uint64_t n = perm.size();
  const auto world = static_cast<std::uint64_t>(options_.world_size);
  out.reserve(num_samples_);
  for (std::uint64_t k = static_cast<std::uint64_t>(options_.rank); k < total_size(); k += world)
    out.push_back(perm[k % n]);
  return out;
}

}  // namespace kizuna
