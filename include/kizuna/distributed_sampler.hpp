// kizuna/distributed_sampler.hpp: which samples of a data set each rank
// trains on in an epoch (PyTorch's DistributedSampler).
//
// Each epoch, the indices 0..dataset_size-1 are shuffled by a permutation
// seeded by (seed, epoch) that every rank computes identically, with no
// communication; rank r then takes every world_size-th index starting at r:
//
//   permutation  p0 p1 p2 p3 p4 p5 p6 | p0 p1     (N = 7, world 3, padded to 9)
//   rank 0       p0       p3       p6
//   rank 1          p1       p4       p0
//   rank 2             p2       p5       p1
//
// So the ranks' lists are disjoint and together cover the data set. When
// dataset_size is not a multiple of world_size:
//   drop_last = false: the permutation is padded by wrapping around to its
//     start (again and again when dataset_size < world_size) up to
//     ceil(N / world) * world, so every rank gets the same count and the
//     first (padded - N) samples of the permutation are seen twice;
//   drop_last = true: the tail is dropped, down to floor(N / world) * world,
//     and the last (N mod world) samples of the permutation are not seen
//     this epoch (another epoch's permutation drops others).
//
// The permutation is specified exactly, so that it is the same on every
// machine, compiler and standard library (std::shuffle's is not):
//   state  the four 64-bit words of xoshiro256** are four successive outputs
//          of SplitMix64 started at k = mix(mix(seed) + epoch), mix being
//          SplitMix64's output function (a bijection, so different epochs of
//          one seed never share a stream);
//   shuffle Fisher-Yates from the back: for i = N-1 down to 1, swap a[i] and
//          a[j], j uniform in [0, i] by Lemire's multiply-and-reject on the
//          next xoshiro256** output.
// With shuffle = false the permutation is the identity.
//
// A plain value: cheap to copy, no threading concerns; indices() computes
// the epoch's list in O(dataset_size).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kizuna {

struct DistributedSamplerOptions {
  std::uint64_t dataset_size = 0;
  int world_size = 1;
  int rank = 0;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // InvalidArgument when world_size < 1 or rank is outside [0, world_size).
  explicit DistributedSampler(const DistributedSamplerOptions& options);
  // PyTorch's argument order.
  DistributedSampler(std::uint64_t dataset_size, int world_size, int rank, bool shuffle = true,
                     std::uint64_t seed = 0, bool drop_last = false);

  // The epoch whose permutation indices() returns; call it at the start of
  // every epoch, or every epoch sees the same order.
  void set_epoch(std::uint64_t epoch) { epoch_ = epoch; }
  std::uint64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch, in the order to visit them.
  std::vector<std::uint64_t> indices() const;
  // The whole epoch's permutation (before padding or dropping).
  std::vector<std::uint64_t> permutation() const;

  // Samples per rank each epoch (the length of indices()).
  std::uint64_t num_samples() const { return num_samples_; }
  // num_samples() * world_size: the padded or truncated epoch length.
  std::uint64_t total_size() const { return num_samples_ * options_.world_size; }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  DistributedSamplerOptions options_;
  std::uint64_t num_samples_ = 0;
  std::uint64_t epoch_ = 0;
};

}  // namespace kizuna
