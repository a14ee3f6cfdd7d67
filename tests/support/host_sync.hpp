// tests/support/host_sync.hpp: the Sync policy of kernels/fifo_program.cuh
// for host threads: one thread per block, flags through std::atomic_ref,
// and a walk that gives up after `patience` without progress (as the
// kernel's DeviceSync does) or when `abort` is set.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace kizuna::test {

struct HostSync {
  std::chrono::steady_clock::duration patience;
  const std::atomic<bool>* abort = nullptr;
  std::chrono::steady_clock::time_point waiting_since{};  // epoch: not waiting
  std::uint64_t fences = 0;  // batches published
  int thread() const { return 0; }
  int threads() const { return 1; }
  void barrier() {}
  std::uint64_t load_acquire(const std::uint64_t* p) const {
    return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(p)).load(std::memory_order_acquire);
  }
  void store_release(std::uint64_t* p, std::uint64_t v) const {
    std::atomic_ref<std::uint64_t>(*p).store(v, std::memory_order_release);
  }
  // A batch: counted as the one fence the GPU's publish costs, stored as
  // release stores (what the fence and relaxed stores amount to, and what
  // ThreadSanitizer can see: it does not model fences).
  void publish(std::uint64_t* p, std::uint64_t v, std::uint32_t k) {
    ++fences;
    for (std::uint32_t i = 0; i < k; ++i) store_release(p + i, v + i);
  }
  bool keep_waiting() {
    std::this_thread::yield();
    const auto now = std::chrono::steady_clock::now();
    if (waiting_since == std::chrono::steady_clock::time_point{}) waiting_since = now;
    return now - waiting_since < patience && !(abort && abort->load());
  }
  void progressed() { waiting_since = {}; }
};

}  // namespace kizuna::test
