// comm/device_backend.hpp: collectives on device buffers, and the executor
// registry, the one place that knows which device backends exist (and the
// only file outside src/cuda and kernels/ with #if KIZUNA_HAS_CUDA).
//
// A device call is either direct (launch(): the GPUs run the schedule
// themselves, after connect() joined them) or staged: the backend arms the caller's stream so that
// the input reaches a host buffer, the stream then waits while the
// communicator runs the ordinary host collective on that buffer, and the
// result goes back to the device in stream order; `on_done` runs once it is
// there (see src/cuda/staging.hpp).
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

#include "core/check.hpp"
#include "kernels/step_table.cuh"

namespace kizuna::comm {

class StagedCall {
 public:
  virtual ~StagedCall() = default;
  virtual void* host() = 0;
  // False when the stream did not deliver the input by the deadline.
  virtual bool wait_input(std::chrono::steady_clock::time_point deadline) = 0;
  // The host collective is over (with `error`, or nullptr): let the stream go.
  virtual void release(std::exception_ptr error) = 0;
};

struct StageRequest {
  void* stream = nullptr;
  const void* send = nullptr;
  std::size_t send_bytes = 0;
  std::size_t in_offset = 0;
  void* recv = nullptr;
  std::size_t recv_bytes = 0;
  std::size_t out_offset = 0;
  std::size_t host_bytes = 0;
  std::chrono::milliseconds timeout{0};
};

// One part of a direct call (comm/device_parts.hpp): the rank's schedule
// for it, encoded, its scratch, and where its elements start.
struct DirectPart {
  const std::vector<kernels::DeviceStep>* table = nullptr;
  std::size_t scratch_bytes = 0;
  std::size_t offset_bytes = 0;
};

// A collective run on the devices themselves, GPU to GPU (CUDA IPC among
// the ranks of one node): its parts, run at once, and the buffers.
struct DirectCall {
  std::vector<DirectPart> parts;
  const void* input = nullptr;
  void* output = nullptr;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  std::size_t avg_count = 0;  // Avg: the output elements to divide by avg_divisor
  double avg_divisor = 1.0;
  void* stream = nullptr;
  std::chrono::milliseconds timeout{0};
  std::string what;  // the call, for errors
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // "cuda:0 (NVIDIA H200), staged through pinned host memory"
  virtual std::string describe() const = 0;
  virtual std::shared_ptr<StagedCall> stage(const StageRequest& request,
                                            std::function<void(std::exception_ptr)> on_done) = 0;

  // Joins this rank's device to its peers' for direct calls, collectively
  // over `store` (every rank of the communicator calls it). False, with
  // `why`, when that is not possible on every rank: then no rank uses
  // direct calls.
  virtual bool connect(Store& store, const std::string& prefix, int rank, int world,
                       std::chrono::milliseconds timeout, std::string* why) {
    (void)store, (void)prefix, (void)rank, (void)world, (void)timeout;
    *why = "this device backend has no direct path";
    return false;
  }
  // After a successful connect(): enqueues `call` on its stream and
  // returns; `on_done` runs once the stream has run it.
  virtual void launch(const DirectCall& call, std::function<void(std::exception_ptr)> on_done) {
    (void)call, (void)on_done;
    KIZUNA_THROW(ErrorCode::Internal, "launch() on a device backend without a direct path");
  }
  // How many parts a direct call may have.
  virtual int direct_parts() const { return 1; }
  // Stops direct calls running or queued (they end with an error).
  virtual void abort() {}
};

// `device` is "cuda" (index -1: the GPU local_rank picks) or another name.
// Throws InvalidArgument for a device this build does not know, CudaError
// when CUDA cannot be used here (no driver, no GPU), naming the cause.
std::unique_ptr<DeviceBackend> make_device_backend(const std::string& device, int index, int local_rank);

}  // namespace kizuna::comm
