// core/spin_lock.hpp: a lock for a few stores' worth of work, taken on
// every call of a collective.
//
// An uncontended std::mutex costs two atomic read-modify-writes and two
// calls into libc; this costs one exchange and a plain store. A waiter
// spins briefly and then yields, so a holder that the scheduler stopped
// gets the core back. Hold it only around short, non-blocking work.
//
// Meets the standard Lockable requirements (std::lock_guard works).
#pragma once

#include <atomic>
#include <thread>

namespace kizuna::core {

// Tells the CPU this is a spin-wait loop (frees the sibling hyperthread).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire);) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace kizuna::core
