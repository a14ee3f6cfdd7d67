// cuda/ipc_world.hpp: the ranks of one node joined GPU to GPU through CUDA
// IPC, and collectives run on that join by the FIFO kernel.
//
// connect() is collective over the store: each rank allocates the FIFOs of
// its inbound channels, and the credit words of its outbound ones, with
// cudaMalloc (kernels/fifo_layout.hpp), publishes their cudaIpcMemHandle,
// and maps every peer's with cudaIpcOpenMemHandle, so a rank's kernel
// writes straight into its peers' FIFOs and waits on its own memory only.
// Ranks that are threads of one process share the raw pointers instead (a
// process cannot open its own IPC handle, and needs none).
// Several ranks may share one GPU: processes under MPS, threads always. Every rank learns whether every
// other rank succeeded, so either all use the join or none does: a rank
// that cannot (no IPC in a container, an old driver) makes connect() throw
// CudaError on every rank, naming the rank and its cause.
//
// launch() enqueues one collective (a rank's encoded step table) on the
// caller's stream and returns; `on_done` runs on a thread of the world's
// own (core/completion_poller.hpp), which polls an event recorded after
// the kernel: with nullptr once it finished, Timeout if the kernel gave up
// (its deadline passed, or abort() was called) or did not end within the
// deadline and a grace of 2 s (then the kernels are told to stop),
// CudaError naming the call if the context failed (a kernel fault). Calls run one after
// another in call order whatever streams they are on (each waits for the
// previous one's event), as the channels are shared.
#pragma once

#include <kizuna/store.hpp>
#include <kizuna/types.hpp>

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/step_table.cuh"

namespace kizuna::cuda {

struct IpcGeometry {
  std::uint32_t blocks = 8;              // channel sets: parts run at once
  std::uint32_t slots = 4;
  std::uint32_t slot_bytes = 128 << 10;  // a multiple of 256
};

// One part of a call (comm/device_parts.hpp): a block's encoded schedule,
// the scratch it needs, and where its elements start in the buffers.
struct IpcPart {
  const std::vector<kernels::DeviceStep>* table = nullptr;
  std::size_t scratch_bytes = 0;
  std::size_t offset_bytes = 0;
};

class IpcWorld {
 public:
  using Done = std::function<void(std::exception_ptr)>;

  // `peers_closed` is called once, as the world is destroyed, after this
  // rank has closed its mappings of the peers' memory, when some peer is
  // another process: true when every peer has closed its mapping of this
  // rank's memory too (a barrier among the ranks, with a deadline). Only
  // then is that memory freed; otherwise it is left to the process's end.
  static std::unique_ptr<IpcWorld> connect(Store& store, const std::string& prefix, int rank, int world, int device,
                                           IpcGeometry geometry, std::chrono::milliseconds timeout,
                                           std::function<bool()> peers_closed);
  ~IpcWorld();
  IpcWorld(const IpcWorld&) = delete;
  IpcWorld& operator=(const IpcWorld&) = delete;

  // `parts`: at most blocks() of them, each run by its own block on its
  // own channels. `what` names the call in errors. Avg runs as Sum and then
  // divides by `avg_divisor` the `avg_count` elements of `output` that hold
  // the result (0: none on this rank).
  void launch(const std::vector<IpcPart>& parts, const void* input, void* output, DataType dtype, ReduceOp op,
              std::size_t avg_count, double avg_divisor, void* stream, std::chrono::milliseconds timeout,
              const std::string& what, Done on_done);

  // Parts a call may run at once: the channel sets, or fewer where the
  // ranks sharing a GPU could not all have that many blocks resident (one
  // per multiprocessor among them); the same on every rank.
  int blocks() const;

  // How the ranks are joined: "GPU to GPU through CUDA IPC", or "GPU to GPU
  // in one process" when every peer is a thread of this process (their
  // channels are shared by pointer, no IPC handle opened, no MPS needed).
  std::string how() const;

  // Stops the kernels that are running or queued (they report Timeout),
  // and poisons what the peers' kernels wait on from this rank, so that
  // theirs stop too.
  void abort();

  struct State;

 private:
  explicit IpcWorld(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kizuna::cuda
