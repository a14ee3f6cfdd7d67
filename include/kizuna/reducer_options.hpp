// kizuna/reducer_options.hpp: how to build a Reducer (kizuna/reducer.hpp).
//
// Every rank must pass the same options: the Reducer checks it at
// construction, with the parameter list, because they decide which
// collectives run (bucket sizes, compression, rebuilds).
#pragma once

#include <kizuna/types.hpp>

#include <cstddef>
#include <memory>

namespace kizuna {

class CommHook;

// What gradients travel as. None: their own type; Float16 / BFloat16:
// float32 and float64 buckets are cast to 16 bits for the all-reduce and
// back afterwards (half the bytes, at the precision stated in
// kizuna/comm_hook.hpp).
enum class Compression { None, Float16, BFloat16 };

struct ReducerOptions {
  static constexpr std::size_t kDefaultBucketCapBytes = std::size_t{25} << 20;
  static constexpr std::size_t kDefaultFirstBucketBytes = std::size_t{1} << 20;

  // Cap of every bucket but the first (kizuna/bucket_spec.hpp).
  std::size_t bucket_cap_bytes = kDefaultBucketCapBytes;
  // Cap of the first bucket: small, so that communication starts early.
  std::size_t first_bucket_bytes = kDefaultFirstBucketBytes;
  Compression compression = Compression::None;
  // Leave the mean over ranks (true) or the sum (false). Averaging needs
  // floating-point gradients.
  bool average = true;
  // A parameter that was not marked ready by finalize() is reduced as zero
  // (false: that is an error naming it).
  bool find_unused_parameters = false;
  // After the first synchronised iteration, rebuild the buckets in the order
  // gradients became ready on rank 0.
  bool rebuild_buckets = true;
  // At construction, copy rank broadcast_root's parameters to every rank.
  bool broadcast_parameters = true;
  int broadcast_root = 0;
  // A hook of your own; null: the built-in that `compression` names. Setting
  // both is an InvalidArgument.
  std::shared_ptr<CommHook> comm_hook;
  // Device gradients: with a stream, `parameters` and `gradients` are memory
  // of the communicator's GPU (CommOptions.device "cuda") and every
  // collective runs on this stream; finalize() returns once the stream has
  // run them. Each bucket is reduced in place, so the parameters must lie
  // back to back in the buffers; buckets are not rebuilt
  // (rebuild_buckets is ignored), compression and find_unused_parameters
  // are refused (their casts and zeroing run on the host), and a parameter
  // never marked ready is an error whose gradient was reduced as it was.
  DeviceStream stream;
};

}  // namespace kizuna
