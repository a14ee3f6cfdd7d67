#include "core/futex_mutex.hpp"

#include "core/futex.hpp"

namespace kizuna::core {

// Marks the word contended (2) before each sleep, so that the holder's
// unlock() wakes a sleeper; a thread that takes the lock this way leaves
// it marked 2, which at worst costs one needless wake. No spinning first,
// as std::mutex's: with more ranks than cores the holder may be waiting
// for this very core.
void FutexMutex::lock_contended() noexcept {
  while (state_.exchange(2, std::memory_order_acquire) != 0) futex_wait(state_, 2, FutexScope::Process);
}

void FutexMutex::wake_one() noexcept { futex_wake(state_, 1, FutexScope::Process); }

}  // namespace kizuna::core
