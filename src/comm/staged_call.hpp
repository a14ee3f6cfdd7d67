// comm/staged_call.hpp: a collective on device buffers, staged through
// host memory in parts, so that the copies over the host bus overlap the
// host collective (the path across nodes, and wherever GPUs cannot reach
// each other's memory).
//
// start() enqueues the whole call on the backend's DeviceQueue at once and
// returns; the caller's stream is never held by a host thread:
//
//   caller's stream:  ... | waits for the queue's "done" | ...
//   device queue:     follow(stream) | in 0 | in 1 | .. | gate 0 | out 0 | gate 1 | out 1 | .. | then(on_done)
//   worker:                  wait_input(0), collective on part 0, release(0); wait_input(1), ..., release(1); ...
//
// "in k" copies part k of the send buffer into the host buffer and marks
// the queue; "out k" copies part k of the result back once the worker has
// released it. Part k's result goes back while part k+1 is reduced, and
// the inputs arrive ahead of the collective that needs them. on_done runs
// (on a host thread) once the last result is on the device, with the
// first error any release() reported; the output is then undefined, as in
// NCCL.
//
// Every part is released exactly once: by the worker, or with an error by
// whoever fails the queued calls; a StagedCall dropped before that opens
// its gates itself, so the device queue never waits for a call that is
// gone. wait_input() polls and never blocks past its deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/device_queue.hpp"

namespace kizuna::comm {

struct StageRequest {
  void* stream = nullptr;
  const void* send = nullptr;
  std::size_t send_bytes = 0;
  std::size_t in_offset = 0;  // where the send buffer lands in the host buffer
  void* recv = nullptr;
  std::size_t recv_bytes = 0;
  std::size_t out_offset = 0;  // where the result is taken from in the host buffer
  std::size_t host_bytes = 0;
  // Part boundaries in bytes, from 0 to the end: part k is [cuts[k],
  // cuts[k+1]) of both buffers, each clipped to its own size. Empty: one
  // part covering both.
  std::vector<std::size_t> cuts;
  std::chrono::milliseconds timeout{0};
  std::string what = "a staged device call";  // names the call in errors
};

class StagedCall {
 public:
  using Done = std::function<void(std::exception_ptr)>;

  static std::shared_ptr<StagedCall> start(DeviceQueue& queue, const StageRequest& request, Done on_done);
  ~StagedCall();
  StagedCall(const StagedCall&) = delete;
  StagedCall& operator=(const StagedCall&) = delete;

  unsigned char* host() const { return host_.get(); }
  std::size_t parts() const { return inputs_.size(); }
  // False when part `part`'s input had not reached the host by `deadline`.
  bool wait_input(std::size_t part, std::chrono::steady_clock::time_point deadline) const;
  // The host collective of part `part` is over, with `error` or nullptr:
  // its result may go back. A second release of a part is ignored.
  void release(std::size_t part, std::exception_ptr error);

 private:
  StagedCall(DeviceQueue& queue, std::shared_ptr<unsigned char> host);
  std::exception_ptr finished();

  DeviceQueue& queue_;
  std::shared_ptr<unsigned char> host_;
  std::vector<std::function<bool()>> inputs_;
  std::vector<std::uint64_t> tickets_;
  std::mutex mutex_;
  std::vector<bool> released_;
  std::exception_ptr error_;
};

}  // namespace kizuna::comm
