// kizuna/comm_hook.hpp: how a Reducer communicates one bucket.
//
// A CommHook decides what travels for a bucket (after PyTorch's DDP
// communication hooks): launch() starts the reduction of a ready bucket and
// returns the Work of the last collective it queued; once that Work is done,
// finalize() calls finish() to turn what arrived into the bucket's result
// (decompress, divide, ...). The contract is the one of Bucket: afterwards
// data() holds the sum over ranks, divided by world_size() if average().
//
// Rules for a hook, because every rank must queue the same collectives in
// the same order: launch() queues the same calls (same counts, types and
// operations) on every rank for the same bucket, and returns without
// waiting for them. launch() runs on the thread that made the bucket ready
// (the trainer's, inside Reducer::mark_ready or finalize) with the
// Reducer's lock held, so it must be quick and must not call back into the
// Reducer; the compute it does (a cast) delays that thread's backward.
// finish() runs on the thread in finalize(). A hook object is shared by all
// buckets of a Reducer; keep per-bucket state in Bucket::scratch().
//
// Built-ins:
//   allreduce()      all_reduce of data() in its own type, ReduceOp::Avg when
//                    averaging floating types (Sum otherwise). Exact up to
//                    the type's own rounding: each element is within
//                    n·u·mean_r|g_r| of the true mean, u the type's unit
//                    roundoff (2^-24 for float32).
//   fp16_compress()  float32/float64 buckets travel as float16: each rank
//                    casts g/n (g when not averaging) into scratch, the
//                    all_reduce sums float16, finish() casts back. Half the
//                    bytes; each element is within (n+1)·2^-11·mean_r|g_r| +
//                    n·2^-24 of the true mean (float16 rounding of each
//                    input and partial sum, plus its subnormal spacing).
//                    Values beyond float16's range (65504) become Inf: the
//                    pre-division keeps averaged gradients of normal scale
//                    far from it, as in PyTorch.
//   bf16_compress()  the same through bfloat16: float32's range, so no
//                    overflow, but a coarser bound of (n+1)·2^-8·mean_r|g_r|.
// The compression hooks pass buckets of other types (16-bit floats,
// integers) through allreduce() unchanged.
//
// Threading: see above. Ownership: held by std::shared_ptr, shared by every
// bucket of the Reducers that use it.
#pragma once

#include <kizuna/bucket.hpp>
#include <kizuna/comm.hpp>
#include <kizuna/work.hpp>

#include <memory>
#include <string>

namespace kizuna {

class CommHook {
 public:
  virtual ~CommHook() = default;

  // A short name, for logs and for the cross-rank registration check (every
  // rank must use the same hook).
  virtual std::string name() const = 0;

  // Queues the reduction of `bucket` on `comm`; returns the Work to wait for.
  virtual Work launch(Communicator& comm, Bucket& bucket) = 0;

  // After that Work has finished: leave the result in bucket.data().
  virtual void finish(Bucket& bucket) {}

  static std::shared_ptr<CommHook> allreduce();
  static std::shared_ptr<CommHook> fp16_compress();
  static std::shared_ptr<CommHook> bf16_compress();
};

}  // namespace kizuna
