// integrations/torch/csrc/torch_comm.hpp: a kizuna Communicator speaking
// torch's language: at::Tensor arguments, c10d's *Options structs, and
// c10d::Work handles.
//
// TorchComm is everything the torch.distributed backend does, written
// against the parts of c10d that torch 1.13 and 2.x share (Store, Work, the
// *Options structs, ReduceOp). The torch-version-specific class
// (process_group_kizuna.cpp: a c10d::ProcessGroup in 1.13, a c10d::Backend
// in 2.x, see torch_compat.hpp) only forwards its virtual methods here.
//
// Construction is collective: every rank of the group builds a TorchComm
// from the same c10d store (torch's per-group PrefixStore) and it returns
// once the kizuna Communicator is connected, or throws after `timeout`.
// The communicator's name is "kizuna/pg<N>" under that prefix, N counting
// the process groups this rank has created under the same prefix, so a group
// destroyed and re-created over one store never meets the old keys.
//
// Calls: each returns a KizunaWork at once and they run in call order (see
// "Order"; like a CUDA stream), so all ranks must make the same collective
// calls in the same order. Tensors must be CPU, strided
// (dense), of a supported dtype (float16, bfloat16, float32, float64, int8,
// uint8, int32, int64, bool); one tensor per process per call (torch's
// Python API always passes one). Non-contiguous tensors are staged through a
// contiguous copy and the result copied back. Argument errors raise at the
// call, naming the call; failures while running fail the Work (see
// kizuna_work.hpp).
//
// Ordering of staging copies: a copy of an input made at call time must see
// the results of the calls before it (a tensor reduced by an async
// all_reduce and then sent), so a call that stages an input first waits for
// the calls still queued. Calls on contiguous tensors never wait.
//
// Sparse (COO) tensors: all_reduce with SUM, as Gloo does it (every rank's
// indices and values gathered and added up; the call waits for the ranks'
// entry counts first). Other calls take dense tensors only.
//
// Coalesced calls (allreduce_coalesced, allgather_coalesced): the tensors
// are packed end to end, one buffer per dtype, and each buffer takes one
// collective. The *_tensor_coalesced calls of torch 2.x queue one
// collective per tensor pair, as parts of one Work.
//
// Point to point: kizuna's, which matches as MPI does (by tag, in order per
// sender and tag; recvAnysource takes the earliest message of any rank and
// its Work's sourceRank() says whose) and runs apart from the collectives'
// queue, so a posted receive holds back nothing (batch_isend_irecv in any
// order). Tags are 0 to INT_MAX - 1. all-to-all, gather and scatter are
// built from sends and receives of their own tag, INT_MAX: all-to-all as
// n-1 rounds of a round-robin tournament (each round a perfect matching of
// the ranks, the lower rank of each pair sending first).
//
// Order: calls run in call order. Collectives go through kizuna's queue;
// a send or receive starts once the collectives called before it are done.
// A call built from sends and receives (gather, scatter, all-to-all) is not
// in the queue, so the next call of any kind first waits for it to finish:
// its results are then in place for whatever comes next. A plain send or
// receive holds back nothing after it (as in torch's other backends, a
// tensor being received into must not be used until its Work is done).
//
// monitored_barrier (Gloo's monitoredBarrier, which torch 2.x lets any
// backend provide): rank 0 waits for every other rank to check in, in rank
// order, then publishes its verdict, which the others wait for; it runs
// through the group's store, not the communicator, so it never waits behind
// queued calls and a rank that fails it leaves the communicator usable. Its
// messages are Gloo's ("[Rank 0]: Rank 2 failed to pass monitoredBarrier in
// 1000 ms", "Rank 0 timed out in monitoredBarrier after 0 ms", "Rank 1
// successfully reached monitoredBarrier, but received errors while waiting
// for send/recv from rank 0..."), which tools and tests match.
//
// Threading: calls may come from several threads (DDP's autograd threads
// and the Python thread). Each call holds a mutex from its checks to its
// last enqueue, so that its parts are contiguous in kizuna's queue and the
// record of the last one queued is exact. Staging copies run with autograd
// off (like an optimizer's update), so tensors that require grad are fine.
//
// Timeouts: every call runs under the group's timeout (init_process_group's),
// which kizuna enforces. A call whose options carry a shorter timeout of its
// own is watched (call_timeouts.hpp): if it is not done by then, its Work
// fails with "kizuna: timeout in <call> on rank <r>: ..." and the
// communicator is aborted, as after kizuna's own timeout; later calls fail
// with Aborted. A per-call timeout longer than the group's cannot extend it.
//
// Sequence number: the number of calls this rank has made on the group
// (Gloo's count, which TORCH_DISTRIBUTED_DEBUG=DETAIL compares across ranks).
//
// Shrinking (kizuna_torch.shrink): after a rank is lost, shrink() runs
// kizuna's Communicator::shrink() over the survivors and returns the new
// communicator with each member's rank in this group, which a new TorchComm
// then adopts (the second constructor): same store and timeout, the shrunk
// communicator's name. This TorchComm stays failed; later calls raise.
#pragma once

#include "call_timeouts.hpp"
#include "kizuna_work.hpp"
#include "store_adapter.hpp"

#include <kizuna/comm.hpp>

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kizuna_torch {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

class TorchComm {
 public:
  TorchComm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
            std::chrono::milliseconds timeout);
  // Adopts `comm` (a communicator shrunk from a TorchComm over `store`).
  TorchComm(std::shared_ptr<C10dStoreAdapter> store, std::shared_ptr<kizuna::Communicator> comm,
            std::chrono::milliseconds timeout);

  // The survivors of a failure: the new communicator, and for each of its
  // ranks, that member's rank in this group.
  struct Survivors {
    std::shared_ptr<kizuna::Communicator> comm;
    std::vector<int> old_ranks;
  };
  // Collective over the survivors (see "Shrinking"); throws kizuna's error
  // (Timeout, Aborted, the store's) as a backend error. Blocks.
  Survivors shrink();
  const std::shared_ptr<C10dStoreAdapter>& store() const { return store_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& name() const { return name_; }

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Lets go of the communicator (its destructor finishes queued calls and
  // joins its worker thread); later calls raise. Idempotent.
  void close();
  // Fails every queued call with Aborted at once (kizuna's abort()).
  void abort(const std::string& reason);
  std::uint64_t sequence_number() const { return calls_.load(); }

  WorkPtr allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);
  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts);
  WorkPtr broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts);
  WorkPtr reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts);
  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts);
  WorkPtr allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts);
  WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts);
  WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions& opts);
  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts);
  WorkPtr scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts);
  WorkPtr reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ReduceScatterOptions& opts);
  WorkPtr reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts);
  WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts);
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts);
  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                   const c10d::AllToAllOptions& opts);
  WorkPtr barrier(const c10d::BarrierOptions& opts);
  // Blocks; throws on failure (see "monitored_barrier" above).
  void monitored_barrier(const c10d::BarrierOptions& opts, bool wait_all_ranks);
  WorkPtr send(std::vector<at::Tensor>& tensors, int dst, int tag);
  WorkPtr recv(std::vector<at::Tensor>& tensors, int src, int tag);
  WorkPtr recv_anysource(std::vector<at::Tensor>& tensors, int tag);

 private:
  // One block of an exchange: `count` elements at `data` to or from `peer`.
  struct Block {
    void* data = nullptr;
    std::size_t count = 0;
  };
  // The send/recv pairs of an all-to-all, in tournament order; blocks
  // indexed by peer (this rank's own entries are ignored).
  std::vector<kizuna::Work> exchange(const std::vector<Block>& sends, const std::vector<Block>& recvs,
                                     kizuna::DataType dtype);
  // Holds the call mutex and turns autograd off for the whole of a call
  // (see "Threading"), after the last call built from sends and receives
  // has finished (see "Order"); raises once the group is closed.
  struct CallScope;
  // Starts `work` over its parts; `epilogue` runs once they all succeeded,
  // and `keep` (staging buffers the parts read or write) lives until then.
  // `timeout`: the call's own (opts.timeout), or kUnsetTimeout.
  WorkPtr start(c10::intrusive_ptr<KizunaWork> work, std::vector<kizuna::Work> parts,
                std::function<void()> epilogue, std::vector<at::Tensor> keep, std::chrono::milliseconds timeout);
  // start() for a collective: the call settle() waits for.
  WorkPtr launch(c10::intrusive_ptr<KizunaWork> work, std::vector<kizuna::Work> parts,
                 std::function<void()> epilogue, std::vector<at::Tensor> keep,
                 std::chrono::milliseconds timeout);
  // Fails `work`, past its own `timeout`, and aborts the communicator.
  void expire(const c10::intrusive_ptr<KizunaWork>& work, std::chrono::milliseconds timeout);
  // allreduce() of a sparse (COO) tensor; call scope held.
  WorkPtr allreduce_sparse(at::Tensor& t, std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);
  // Waits for every collective called so far (see "Ordering of staging copies").
  void settle();
  // Records the last kizuna Work queued.
  void queued(const std::vector<kizuna::Work>& parts);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;  // the group's (0: kizuna's default)
  std::shared_ptr<C10dStoreAdapter> store_;
  std::string name_;  // the communicator's, which prefixes this group's store keys
  std::shared_ptr<kizuna::Communicator> comm_;
  CallTimeouts call_timeouts_;
  std::atomic<std::uint64_t> calls_{0};
  std::uint64_t monitored_barriers_ = 0;  // guarded by call_mutex_
  std::mutex call_mutex_;  // held by each call from its checks to its last enqueue
  std::mutex comm_mutex_;  // held to replace comm_ (close) or to copy it outside a call (abort)
  kizuna::Work last_;      // the last kizuna Work queued (guarded by call_mutex_)
  // The last call's Work (guarded by call_mutex_): done once its results
  // are copied back, which its last kizuna Work being done does not say.
  // Weak: it lives while in flight (its parts' callbacks hold it) or while
  // the caller keeps it, and holds no tensor beyond that.
  c10::weak_intrusive_ptr<KizunaWork> last_work_{c10::intrusive_ptr<KizunaWork>()};
  // The last call built from sends and receives, until the next call has
  // waited for it (guarded by call_mutex_; weak, as last_work_).
  c10::weak_intrusive_ptr<KizunaWork> apart_{c10::intrusive_ptr<KizunaWork>()};
};

}  // namespace kizuna_torch
