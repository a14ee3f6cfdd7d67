// comm/device_backend.hpp: collectives on device buffers, and the executor
// registry, the one place that knows which device backends exist (and the
// only file outside src/cuda and kernels/ with #if KIZUNA_HAS_CUDA).
//
// A device call is either direct (launch(): the GPUs run the schedule
// themselves, after connect() joined them) or staged: the input goes to a
// host buffer on the backend's DeviceQueue, the communicator runs the
// ordinary host collective on it, part by part, and the results go back
// in stream order (comm/staged_call.hpp).
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

#include "comm/device_queue.hpp"
#include "core/check.hpp"
#include "kernels/step_table.cuh"

namespace kizuna::comm {

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
  // Where staged calls copy, created on first use and owned by the
  // backend (it outlives every call staged on it).
  virtual DeviceQueue& queue() = 0;

  // Joins this rank's device to its peers' for direct calls, collectively
  // over `store` (every rank of the communicator calls it). False, with
  // `why`, when that is not possible on every rank: then no rank uses
  // direct calls. The backend may keep the store, for its teardown.
  virtual bool connect(const std::shared_ptr<Store>& store, const std::string& prefix, int rank, int world,
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

// Tests only: while set, make_device_backend() returns what `make` makes
// for every device but "cpu" (tests/support/emulated_device.hpp emulates
// a device on the host, so that the communicator's device paths run on
// machines without one). Reset with an empty function.
using DeviceBackendFactory = std::function<std::unique_ptr<DeviceBackend>(int index, int local_rank)>;
void set_device_backend_for_tests(DeviceBackendFactory make);

}  // namespace kizuna::comm
