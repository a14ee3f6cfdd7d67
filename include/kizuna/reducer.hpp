// kizuna/reducer.hpp: data-parallel gradient averaging that overlaps backward
// (the Reducer of PyTorch's DistributedDataParallel, for a C++ trainer that
// computes its own gradients).
//
// The trainer keeps parameters and gradients in two flat buffers of the same
// layout and registers them as named views (kizuna/parameter.hpp). The
// Reducer groups the gradients into buckets (kizuna/bucket_spec.hpp: reverse
// registration order, the first bucket capped at first_bucket_bytes, the
// others at bucket_cap_bytes, one dtype per bucket) and, each iteration:
//
//   backward of layer L computes its gradients   -> mark_ready(each of them)
//     the last gradient of a bucket arrives      -> its all-reduce is queued
//   backward goes on with layer L-1 while the communicator's worker thread
//   reduces the bucket: communication overlaps compute
//   finalize()                                   -> waits for every bucket;
//     the gradient buffer then holds the mean over ranks (or the sum)
//
// Buckets are launched in index order on every rank, whatever order their
// gradients complete in: a bucket that fills early waits until every bucket
// before it has been launched. So every rank queues the same collectives in
// the same order, which the communicator requires.
//
// Construction is collective. It checks that every rank registered the same
// parameters (names, shapes, dtypes, offsets) and options, by exchanging a
// digest with all_gather; a difference is Error(Mismatch) on every rank,
// naming the first differing parameter and which ranks have which version.
// Then, with options.broadcast_parameters, it copies rank broadcast_root's
// parameters to every rank (broadcast_parameters()).
//
// Iterations. An iteration starts with the first mark_ready after
// finalize() (or construction). Each registered parameter must be marked
// exactly once per synchronised iteration; marking one twice is an
// InvalidArgument. A parameter not marked by finalize() is zeroed and
// reduced as zero with options.find_unused_parameters (what DDP does:
// the result is the other ranks' contributions over n). Without it,
// finalize() still zeroes and reduces it, so that every rank runs the same
// collectives and none is left waiting, and then throws InvalidArgument
// naming the parameters; the gradients of that iteration are not to be used.
//
// Rebuild: with options.rebuild_buckets, the first synchronised finalize()
// broadcasts the order rank 0 saw gradients become ready in and rebuilds the
// buckets in that order (the same buckets on every rank), so that buckets
// fill in the order backward really produces them.
//
// no_sync(): while the returned guard lives, mark_ready() and finalize()
// communicate nothing: the trainer accumulates gradients into the gradient
// buffer (+=) over several micro-batches, and the first synchronised
// iteration after the guard ends reduces the accumulated sums.
//
// Threading: mark_ready() may be called from several threads at once (an
// autograd engine's workers); every other call comes from one thread at a
// time and not during another's iteration. The hook runs inside
// mark_ready(), on the caller's thread. While an iteration is in flight the
// gradient buffer belongs to the Reducer: do not touch a marked gradient
// until finalize() has returned.
//
// Blocking: mark_ready() never waits for the network; finalize() waits for
// every bucket (bounded by the communicator's deadline, KIZUNA_TIMEOUT), and
// so do the constructor and broadcast_parameters(). A communication failure
// is rethrown by finalize(); the communicator is then unusable (see
// kizuna/comm.hpp), and so is the Reducer.
//
// Ownership: the Reducer shares the communicator and borrows the two flat
// buffers, which must outlive it. Destruction waits for buckets in flight.
#pragma once

#include <kizuna/bucket_spec.hpp>
#include <kizuna/comm.hpp>
#include <kizuna/comm_hook.hpp>
#include <kizuna/parameter.hpp>
#include <kizuna/reducer_options.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace kizuna {

class Reducer {
  struct Impl;

 public:
  // `parameters` may be null when options.broadcast_parameters is false
  // (then broadcast_parameters() cannot be called); `gradients` may not.
  // Both buffers are `buffer_bytes` long and every view lies inside them.
  Reducer(std::shared_ptr<Communicator> comm, void* parameters, void* gradients,
          std::size_t buffer_bytes, std::vector<Parameter> views,
          const ReducerOptions& options = {});
  ~Reducer();
  Reducer(Reducer&&) noexcept;
  Reducer& operator=(Reducer&&) noexcept;
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  std::size_t num_parameters() const;
  const Parameter& parameter(std::size_t index) const;
  // The index of a registered name; InvalidArgument if there is none.
  std::size_t index_of(std::string_view name) const;

  // The gradient of parameter `index` is final for this iteration.
  void mark_ready(std::size_t index);
  void mark_ready(std::string_view name);

  // Waits for every bucket; then the gradients hold the result.
  void finalize();

  // RAII guard of a gradient-accumulation scope; see above. Guards nest; a
  // guard must not outlive its Reducer.
  class NoSync {
   public:
    NoSync(NoSync&& other) noexcept;
    NoSync& operator=(NoSync&&) = delete;
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    ~NoSync();

   private:
    friend class Reducer;
    explicit NoSync(Impl* impl) : impl_(impl) {}
    Impl* impl_;
  };
  // InvalidArgument in the middle of a synchronised iteration.
  [[nodiscard]] NoSync no_sync();

  // Collective: copies rank `root`'s parameters (every registered view) to
  // every rank, and waits.
  void broadcast_parameters(int root = 0);

  // The current bucket layout, in launch order.
  std::vector<BucketSpec> buckets() const;
  // Synchronised iterations finished (finalize() calls outside no_sync).
  std::uint64_t iteration() const;
  bool buckets_rebuilt() const;
  Communicator& communicator() const;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kizuna
