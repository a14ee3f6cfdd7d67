// cuda/staging.hpp: collectives on GPU buffers, staged through pinned host
// memory and ordered on the caller's stream.
//
// A StagedCall arms the stream at once and returns:
//
//   stream:  D2H copy (send -> pinned) | gate | H2D copy (pinned -> recv) | finish
//   worker:                wait_input ... host collective ... release
//
// The gate is a host function (cudaLaunchHostFunc) that tells the
// communicator's worker the input has landed and blocks the stream until
// the worker has run the collective on the pinned buffer and called
// release(); then the result goes back to the device and `on_done` runs on
// CUDA's callback thread once it is there. Both sides wait with deadlines:
// a stream that never reaches the gate is a Timeout for the worker, and a
// worker that never releases is the gate's (it then lets the stream go on,
// and on_done receives the error).
//
// This path works on any GPU and across nodes (the host collective uses
// shared memory or TCP); it costs a copy each way over the host bus.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace kizuna::cuda {

// Makes the GPU this rank uses current on the calling thread: `requested`
// if >= 0, else local_rank modulo the number of GPUs. Throws CudaError
// naming the cause (no driver, no GPU, bad index). Returns the index.
int select_device(int requested, int local_rank);
std::string device_name(int index);
void set_device(int index);

class StagedCall {
 public:
  using Done = std::function<void(std::exception_ptr)>;

  // `host_bytes` of pinned memory: the D2H copy of `send_bytes` lands at
  // `in_offset`, the H2D copy takes `recv_bytes` from `out_offset`.
  static std::shared_ptr<StagedCall> start(int device, void* stream, const void* send,
                                           std::size_t send_bytes, std::size_t in_offset, void* recv,
                                           std::size_t recv_bytes, std::size_t out_offset,
                                           std::size_t host_bytes, std::chrono::milliseconds timeout,
                                           Done on_done);
  ~StagedCall();

  void* host() const;
  bool wait_input(std::chrono::steady_clock::time_point deadline);
  void release(std::exception_ptr error);

  struct State;

 private:
  explicit StagedCall(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kizuna::cuda
