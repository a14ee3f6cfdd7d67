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

}  // namespace kizuna::core
