#include "core/futex_mutex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

namespace kizuna::core {
namespace {

static_assert(sizeof(std::atomic<std::uint32_t>) == 4 && std::atomic<std::uint32_t>::is_always_lock_free);

long futex(std::atomic<std::uint32_t>& word, int op, std::uint32_t value) {
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op | FUTEX_PRIVATE_FLAG, value, nullptr,
                   nullptr, 0);
}

}  // namespace

// Marks the word contended (2) before each sleep, so that the holder's
// unlock() wakes a sleeper; a thread that takes the lock this way leaves
// it marked 2, which at worst costs one needless wake. No spinning first,
// as std::mutex's: with more ranks than cores the holder may be waiting
// for this very core.
void FutexMutex::lock_contended() noexcept {
  while (state_.exchange(2, std::memory_order_acquire) != 0) futex(state_, FUTEX_WAIT, 2);
}

void FutexMutex::wake_one() noexcept { futex(state_, FUTEX_WAKE, 1); }

}  // namespace kizuna::core
