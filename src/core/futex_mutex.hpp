// core/futex_mutex.hpp: a mutex whose uncontended lock and unlock are one
// atomic instruction each, inline, for a lock taken on every call.
//
// std::mutex costs a call into libc for each of try_lock, lock and unlock
// (about 150 instructions for a trylock-unlock pair with its wrappers,
// counted with callgrind on a 2-rank 8-byte all-reduce). This is the
// three-state futex mutex of Drepper's "Futexes Are Tricky": 0 free, 1
// held, 2 held with a waiter that may sleep; a contended lock() sleeps on
// the word (a process-private futex), and unlock() wakes one sleeper only
// when the word said there might be one.
//
// Meets the standard Lockable requirements (std::unique_lock works). Not
// recursive; unlock() only by the holder.
#pragma once

#include <atomic>
#include <cstdint>

namespace kizuna::core {

class FutexMutex {
 public:
  bool try_lock() noexcept {
    std::uint32_t free = 0;
    return state_.compare_exchange_strong(free, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void lock() noexcept {
    if (!try_lock()) lock_contended();
  }
  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) wake_one();
  }

 private:
  void lock_contended() noexcept;
  void wake_one() noexcept;

  std::atomic<std::uint32_t> state_{0};
};

}  // namespace kizuna::core
