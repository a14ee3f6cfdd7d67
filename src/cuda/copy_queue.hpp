// cuda/copy_queue.hpp: the CUDA side of a staged collective, a stream of
// the backend's own that copies between device memory and pinned host
// memory beside the caller's stream (comm/device_queue.hpp says what each
// operation means; comm/staged_call.hpp how a collective uses them).
//
// The caller's stream and the queue's meet through events only, so no
// host thread ever holds the caller's stream. A gate is a wait, on the
// queue's stream, for a word in mapped pinned memory to reach a ticket
// (cuStreamWaitValue32, fetched from the driver at run time; the GPU's
// front end waits and no SM spins), opened by the queue's own poller at
// `patience` if the host has not opened it by then, so that a lost call
// never holds the stream for good. Where the driver does not offer it,
// or KIZUNA_CUDA_STREAM_WAIT=0, a host function on the queue's stream
// waits instead, until the ticket or `patience` (it holds CUDA's callback
// thread meanwhile, and only this queue's stream).
//
// Pinned buffers and events are pooled (cudaHostAlloc and cudaEventCreate
// cost more than a small collective) and handed back without a CUDA call,
// since the last owner may be CUDA's callback thread.
//
// Threads: one thread enqueues at a time; open() and marks from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/completion_poller.hpp"

namespace kizuna::cuda {

// Makes the GPU this rank uses current on the calling thread: `requested`
// if >= 0, else local_rank modulo the number of GPUs. Throws CudaError
// naming the cause (no driver, no GPU, bad index). Returns the index.
int select_device(int requested, int local_rank);
std::string device_name(int index);
void set_device(int index);

class CopyQueue {
 public:
  // `stream_wait`: gates may use cuStreamWaitValue32 when the driver has it.
  CopyQueue(int device, bool stream_wait);
  // Waits up to 10 s for the stream to drain (every call's gates are open
  // by then, or their patience runs out), then destroys it.
  ~CopyQueue();
  CopyQueue(const CopyQueue&) = delete;
  CopyQueue& operator=(const CopyQueue&) = delete;

  std::shared_ptr<unsigned char> host_buffer(std::size_t bytes);
  void follow(void* stream);
  void copy_to_host(void* host, const void* device, std::size_t bytes);
  void copy_to_device(void* device, const void* host, std::size_t bytes);
  std::function<bool()> mark();
  std::uint64_t gate(std::chrono::milliseconds patience);
  void open(std::uint64_t ticket);
  // fn runs on a thread of the queue's own (comm/device_queue.hpp).
  void then(std::chrono::milliseconds patience, const std::string& what, std::function<void(std::exception_ptr)> fn);
  void lead(void* stream);
  // "cuStreamWaitValue32" or "host function"
  const char* gate_kind() const;

  struct Shared;  // what host functions and marks may outlive the queue with
  // Raises the gate word to `ticket` (no-op when it is there already).
  static void open_gate(Shared& shared, std::uint64_t ticket);

 private:
  int device_;
  void* stream_ = nullptr;  // cudaStream_t
  void* wait_value_ = nullptr;  // the driver's cuStreamWaitValue32, or null
  void* word_device_ = nullptr;  // the gate word's device address
  std::uint64_t next_ticket_ = 0;
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<core::CompletionPoller> completions_;
};

}  // namespace kizuna::cuda
