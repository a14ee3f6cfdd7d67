// comm/device_queue.hpp: the device's side of a staged collective, an
// in-order queue of copies between device memory and host memory that
// runs beside the caller's stream.
//
// A queue belongs to one device backend (a CUDA stream of its own in
// src/cuda/copy_queue.hpp; a host thread in the tests' emulated device,
// tests/support/emulated_device.hpp). Everything enqueued runs in order,
// later, on the device; the methods themselves only enqueue and return,
// except that the destructor waits for the queue to drain (bounded).
// One thread enqueues at a time (the communicator's caller, under its
// lock); open() and a mark's reached() may be called from any thread.
//
// Gates are how the host holds the queue without holding a thread: gate()
// enqueues a wait for a new ticket, and the queue goes on once open() has
// been given that ticket or a later one. Tickets grow by one per gate, so
// open(t) lets every gate up to t pass; a gate never opened lets the
// queue go on after `patience` where the device can tell the time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace kizuna::comm {

class DeviceQueue {
 public:
  virtual ~DeviceQueue() = default;

  // `bytes` of host memory the queue copies to and from at full speed
  // (pinned), given back when the last owner lets go.
  virtual std::shared_ptr<unsigned char> host_buffer(std::size_t bytes) = 0;

  // The queue waits for everything `stream` was given so far.
  virtual void follow(void* stream) = 0;
  virtual void copy_to_host(void* host, const void* device, std::size_t bytes) = 0;
  virtual void copy_to_device(void* device, const void* host, std::size_t bytes) = 0;
  // A point in the queue: the function answers, without blocking, whether
  // everything enqueued before it has run.
  virtual std::function<bool()> mark() = 0;
  virtual std::uint64_t gate(std::chrono::milliseconds patience) = 0;
  virtual void open(std::uint64_t ticket) = 0;
  // Runs fn(nullptr) on a host thread of the queue's own once everything
  // before it has run; fn(error) instead if the device fails first
  // (CudaError) or that has not happened within `patience` (Timeout
  // naming `what`), so that a fault or a stuck copy ends the call, never
  // hangs it. Found by polling a mark, not by a device callback
  // (core/completion_poller.hpp).
  virtual void then(std::chrono::milliseconds patience, const std::string& what,
                    std::function<void(std::exception_ptr)> fn) = 0;
  // `stream` waits for everything the queue was given so far.
  virtual void lead(void* stream) = 0;
};

}  // namespace kizuna::comm
