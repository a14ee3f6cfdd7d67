// comm/device_backend.hpp: collectives on device buffers, and the executor
// registry, the one place that knows which device backends exist (and the
// only file outside src/cuda and kernels/ with #if KIZUNA_HAS_CUDA).
//
// A device call is staged: the backend arms the caller's stream so that
// the input reaches a host buffer, the stream then waits while the
// communicator runs the ordinary host collective on that buffer, and the
// result goes back to the device in stream order; `on_done` runs once it is
// there (see src/cuda/staging.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>

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

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // "cuda:0 (NVIDIA H200), staged through pinned host memory"
  virtual std::string describe() const = 0;
  virtual std::shared_ptr<StagedCall> stage(const StageRequest& request,
                                            std::function<void(std::exception_ptr)> on_done) = 0;
};

// `device` is "cuda" (index -1: the GPU local_rank picks) or another name.
// Throws InvalidArgument for a device this build does not know, CudaError
// when CUDA cannot be used here (no driver, no GPU), naming the cause.
std::unique_ptr<DeviceBackend> make_device_backend(const std::string& device, int index, int local_rank);

}  // namespace kizuna::comm
