#include "core/asymmetric_fence.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace kizuna::core {
namespace {

long membarrier(int command) { return ::syscall(__NR_membarrier, command, 0, 0); }

}  // namespace

bool asymmetric_fence_available() {
  static const bool available = [] {
    const long commands = membarrier(MEMBARRIER_CMD_QUERY);
    return commands > 0 && (commands & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
           membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
  }();
  return available;
}

bool heavy_fence() noexcept { return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0; }

bool fence_before_sleep(std::atomic<std::uint32_t>* light_ring) noexcept {
  if (light_ring == nullptr || !light_ring->load(std::memory_order_relaxed)) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return true;
  }
  if (heavy_fence()) return true;
  // Not expected once registered.
  light_ring->store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return false;
}

}  // namespace kizuna::core
