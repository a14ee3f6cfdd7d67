// tests/support/emulated_device.hpp: a device emulated on the host, so
// that the communicator's staged device path (comm/staged_call.hpp) runs,
// and is checked, on machines without a GPU.
//
// An EmulatedStream is an in-order queue run by a thread of its own, as a
// CUDA stream is run by the GPU: push() returns at once. "Device memory"
// is host memory. EmulatedQueue implements comm::DeviceQueue on one, and
// EmulatedDevice installs a backend that uses it for every communicator
// asking for a device while it lives (set_device_backend_for_tests), so a
// test passes `stream.handle()` where a program would pass a cudaStream_t.
#pragma once

#include <kizuna/types.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/device_backend.hpp"
#include "comm/device_queue.hpp"

namespace kizuna::test {

class EmulatedStream {
 public:
  EmulatedStream() : thread_([this] { run(); }) {}
  ~EmulatedStream() {
    push({});
    thread_.join();
  }
  EmulatedStream(const EmulatedStream&) = delete;
  EmulatedStream& operator=(const EmulatedStream&) = delete;

  DeviceStream handle() { return DeviceStream{this}; }
  static EmulatedStream& of(void* handle) { return *static_cast<EmulatedStream*>(handle); }

  // An empty op stops the thread once everything before it has run.
  void push(std::function<void()> op) {
    {
      std::lock_guard lock(mutex_);
      ops_.push_back(std::move(op));
    }
    cv_.notify_one();
  }
  std::function<bool()> mark() {
    auto reached = std::make_shared<std::atomic<bool>>(false);
    push([reached] { reached->store(true); });
    return [reached] { return reached->load(); };
  }
  // The stream waits until `reached` says so (at most 60 s: a test's bug
  // must not hang the suite).
  void wait_for(std::function<bool()> reached) {
    push([reached = std::move(reached)] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!reached() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
  }
  // True once everything pushed so far has run, within `timeout`.
  bool synchronize(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    const auto reached = mark();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!reached())
      if (std::chrono::steady_clock::now() > deadline) return false;
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    return true;
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return !ops_.empty(); });
        op = std::move(ops_.front());
        ops_.pop_front();
      }
      if (!op) return;
      op();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;
  std::thread thread_;
};

class EmulatedQueue final : public comm::DeviceQueue {
 public:
  std::shared_ptr<unsigned char> host_buffer(std::size_t bytes) override {
    return std::shared_ptr<unsigned char>(new unsigned char[bytes ? bytes : 1], std::default_delete<unsigned char[]>());
  }
  void follow(void* stream) override { stream_.wait_for(EmulatedStream::of(stream).mark()); }
  void copy_to_host(void* host, const void* device, std::size_t bytes) override {
    stream_.push([=] { std::memcpy(host, device, bytes); });
  }
  void copy_to_device(void* device, const void* host, std::size_t bytes) override {
    stream_.push([=] { std::memcpy(device, host, bytes); });
  }
  std::function<bool()> mark() override { return stream_.mark(); }
  std::uint64_t gate(std::chrono::milliseconds patience) override {
    const std::uint64_t ticket = ++next_ticket_;
    const auto deadline = std::chrono::steady_clock::now() + patience;
    stream_.push([this, ticket, deadline] {
      std::unique_lock lock(mutex_);
      cv_.wait_until(lock, deadline, [&] { return opened_ >= ticket; });
    });
    return ticket;
  }
  void open(std::uint64_t ticket) override {
    {
      std::lock_guard lock(mutex_);
      opened_ = std::max(opened_, ticket);
    }
    cv_.notify_all();
  }
  void then(std::function<void()> fn) override { stream_.push(std::move(fn)); }
  void lead(void* stream) override { EmulatedStream::of(stream).wait_for(stream_.mark()); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::uint64_t opened_ = 0;
  std::uint64_t next_ticket_ = 0;
  EmulatedStream stream_;  // last: its thread stops before the rest goes
};

class EmulatedBackend final : public comm::DeviceBackend {
 public:
  std::string describe() const override { return "emulated device (host memory)"; }
  comm::DeviceQueue& queue() override { return queue_; }

 private:
  EmulatedQueue queue_;
};

// While one lives, communicators created with a device get an emulated one.
class EmulatedDevice {
 public:
  EmulatedDevice() {
    comm::set_device_backend_for_tests([](int, int) { return std::make_unique<EmulatedBackend>(); });
  }
  ~EmulatedDevice() { comm::set_device_backend_for_tests({}); }
  EmulatedDevice(const EmulatedDevice&) = delete;
  EmulatedDevice& operator=(const EmulatedDevice&) = delete;
};

}  // namespace kizuna::test
