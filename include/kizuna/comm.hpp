// kizuna/comm.hpp: a communicator, the group of ranks that run collectives
// together (NCCL's ncclComm_t, torch.distributed's process group).
//
// Creation is collective: every rank calls create() with the same store and
// name, its own rank and the same world size; it returns once every rank
// is connected (or throws after setup_timeout). from_env() does the same
// from the launcher's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...; see
// docs/env.md); with KIZUNA_JOIN=1, which kizuna-run --elastic sets for a
// replacement, it joins the running group instead (join() below).
//
// Collectives: every call returns a Work at once and is queued; one worker
// thread per communicator runs the queue in call order, so every rank must
// make the same collective calls in the same order (KIZUNA_CHECK=1 verifies
// it). Buffers must stay valid and untouched until the Work is done.
// Counts are elements. Out-of-place and in-place (send == recv; for
// all_gather send == recv + rank * count; for reduce_scatter
// recv == send + rank * count) are both supported. ReduceOp::Avg is for
// floating types only.
//
// Argument errors (null buffer with count > 0, root out of range, Avg on
// integers) throw InvalidArgument at the call, before anything is sent. A
// failure while running (a peer lost, a timeout, a mismatch) fails that
// Work and every later one: the communicator is then unusable and says so;
// create a new one. abort() fails everything pending at once. When it
// becomes unusable, a communicator logs (KIZUNA_LOG error level) one status
// line holding kStatusMarker and space-separated key=value fields: rank,
// world, comm, call, seq, algo, step, waiting_for, waited_s, last_done,
// error; kizuna-run gathers these into its failure table.
//
// Threading: calls may come from any thread; their order of arrival is the
// order of execution. Destruction waits for queued work to finish.
#pragma once

#include <kizuna/comm_options.hpp>
#include <kizuna/error.hpp>
#include <kizuna/types.hpp>
#include <kizuna/work.hpp>

#include <chrono>
#include <climits>
#include <cstddef>
#include <exception>
#include <memory>
#include <string>

namespace kizuna {

inline constexpr const char* kStatusMarker = "[kizuna-status]";

class Communicator {
 public:
  static std::shared_ptr<Communicator> create(const CommOptions& options);
  static std::shared_ptr<Communicator> from_env();

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;

  Work all_reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op);
  Work all_reduce(void* buffer, std::size_t count, DataType dtype, ReduceOp op) {
    return all_reduce(buffer, buffer, count, dtype, op);
  }
  // recv is significant on every rank; send only on the root.
  Work broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root);
  Work broadcast(void* buffer, std::size_t count, DataType dtype, int root) {
    return broadcast(buffer, buffer, count, dtype, root);
  }
  // recv is significant only on the root (it may be null elsewhere).
  Work reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root);
  // recv holds size() * send_count elements, rank r's block at r * send_count.
  Work all_gather(const void* send, void* recv, std::size_t send_count, DataType dtype);
  // send holds size() * recv_count elements; rank r receives block r reduced.
  Work reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype,
                      ReduceOp op);
  Work barrier();
  // Point to point (host memory), as MPI matches it: each message carries
  // a tag, and the messages from one rank with one tag are received in the
  // order they were sent; a receive from kAnySource takes the earliest
  // matching message of any rank (Work::source says whose). Sizes must
  // agree (Mismatch otherwise). Sends and receives run apart from the
  // collectives' queue, on connections of their own: a pending receive
  // holds back neither later calls nor the peers, so ranks may post their
  // sends and receives in any order (a batch of them never deadlocks).
  // Each starts once the collectives called before it on this
  // communicator are done (a send sees their results); later collectives
  // do not wait for it. A send is done once its buffer may be reused, a
  // receive once the data are in place. Bounded by KIZUNA_TIMEOUT from the
  // call; a failure fails that call only, and the communicator stays
  // usable (docs/architecture.md#point-to-point).
  Work send(const void* buffer, std::size_t count, DataType dtype, int peer, int tag = 0);
  Work recv(void* buffer, std::size_t count, DataType dtype, int peer, int tag = 0);

  // Device memory (CommOptions.device or KIZUNA_DEVICE = cuda): the same
  // calls, ordered on `stream`. They return at once; the data move when the
  // stream gets there, and the Work finishes once the result is in place on
  // the device. Among the ranks of one node joined through CUDA IPC the
  // GPUs run the collective themselves (a kernel per call); otherwise the
  // stream copies the input to pinned memory, waits while the host runs
  // the collective, and copies the result back (KIZUNA_CUDA_IPC, docs/env.md).
  Work all_reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                  DeviceStream stream);
  Work broadcast(const void* send, void* recv, std::size_t count, DataType dtype, int root,
                 DeviceStream stream);
  Work reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op, int root,
              DeviceStream stream);
  Work all_gather(const void* send, void* recv, std::size_t send_count, DataType dtype, DeviceStream stream);
  Work reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType dtype, ReduceOp op,
                      DeviceStream stream);
  // Device sends and receives take their turn in the collectives' queue
  // (which waits for them) and carry tag 0: a device send meets a host
  // receive of tag 0.
  Work send(const void* buffer, std::size_t count, DataType dtype, int peer, DeviceStream stream);
  Work recv(void* buffer, std::size_t count, DataType dtype, int peer, DeviceStream stream);

  // Symmetric memory (NCCL's registered buffers, PyTorch's SymmetricMemory):
  // `bytes` of zeroed, page-aligned host memory that the other ranks of the
  // node can read directly. Collective: every rank calls it in the same
  // order with the same size. All-reduces whose buffers (input and output)
  // lie in such memory on every rank skip the shared-memory slots: each
  // rank reduces its share straight from its peers' buffers and copies the
  // results straight out of theirs, which moves about 5/9 of the bytes
  // (docs/symmetric-memory.md). Every rank must then pass such memory for
  // the same calls, at any offset. Where the ranks span several nodes, talk
  // over TCP, or cannot share memory, it is ordinary memory and calls on
  // it run as usual. The memory lives while the returned pointer (or a
  // call on it) does, even past the communicator.
  std::shared_ptr<void> allocate_symmetric(std::size_t bytes);

  // "cpu", or the GPU stream calls use and how ("cuda:0 (NVIDIA H200), ...").
  std::string device() const;

  // The tuning this communicator runs by, as KIZUNA_LOG=info prints it at
  // creation: every threshold that picks a call's route and every pace
  // (docs/tuning.md explains each).
  std::string tuning() const;

  // A sub-communicator of the ranks that pass the same color, ordered by
  // (key, rank); like MPI_Comm_split and ncclCommSplit. Collective over
  // this communicator. A negative color takes no part and gets nullptr.
  std::shared_ptr<Communicator> split(int color, int key);

  // A communicator of the survivors, after a failure (ULFM's
  // MPIX_Comm_shrink, ncclCommShrink). Collective over every rank still
  // alive: each calls it once the old communicator has failed (typically on
  // catching PeerLost). The survivors agree through the store on one set of
  // failed ranks: a rank named lost by any survivor, or whose process this
  // one sees gone, and that has not itself called shrink(); every survivor
  // gets the same set, or an error. The new communicator holds the others,
  // numbered in the old order, with every transport set up afresh; it has
  // this one's options (store, timeouts, tuning). A rank that dies while it
  // is set up is added to the set and the survivors try again. Bounded by
  // CommOptions.setup_timeout (else KIZUNA_STORE_TIMEOUT): a rank that
  // neither calls shrink() nor is seen to fail ends it with Timeout naming
  // it; a rank the others decided without gets Aborted. This communicator
  // is aborted first (if it had not failed) and stays unusable. The store
  // must outlive the failure: when its host was the rank that died, every
  // survivor fails with the store's error (docs/reliability.md#shrinking).
  std::shared_ptr<Communicator> shrink();

  // Growing back: a process started to replace a lost one (or to add
  // capacity) calls join() with the group's store; the group's ranks call
  // grow() at a point of their choosing (a step boundary), which admits up
  // to `most` of the processes waiting in join(). Both then hold a new
  // communicator: the members keep their ranks, the joiners follow in the
  // order they came. grow() is collective over this communicator; it
  // returns nullptr when nobody waits (at the cost of one small broadcast),
  // and leaves this communicator usable either way (also when a joiner dies
  // while the new one is set up: it throws then). The state a joiner needs
  // (a model, a step count) is the caller's to send, e.g. a broadcast from
  // rank 0 on the new communicator.
  std::shared_ptr<Communicator> grow(int most = INT_MAX);
  // Joins the group whose first communicator was named `options.name`
  // (empty: the default first name, "kizuna/comm0", as the job's ranks
  // named theirs) through `options.store`; rank and world size come from
  // the group. Waits up to options.setup_timeout (else KIZUNA_STORE_TIMEOUT)
  // for a grow(), then throws Timeout.
  static std::shared_ptr<Communicator> join(const CommOptions& options);

  // Fails every pending and queued collective with Aborted and closes the
  // connections. Any thread; returns at once.
  void abort(const std::string& reason = "abort() called");

  // The error that made the communicator unusable, or nullptr.
  std::exception_ptr async_error() const;

  struct Impl;
  explicit Communicator(std::shared_ptr<Impl> impl);

 private:
  // shrink(), grow() and join(): create `options`, then commit to it with every
  // other member of it, or throw.
  static std::shared_ptr<Communicator> set_up(const CommOptions& options,
                                              std::chrono::steady_clock::time_point deadline);

  std::shared_ptr<Impl> impl_;
};

}  // namespace kizuna
