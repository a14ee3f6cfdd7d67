// core/futex.hpp: sleeping on a 32-bit word until another thread, or
// another process, changes it (Linux futex).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

namespace kizuna::core {

static_assert(sizeof(std::atomic<std::uint32_t>) == 4 && std::atomic<std::uint32_t>::is_always_lock_free);

// Who may wake a sleeper: threads of this process only (the word is in
// its private memory; the kernel's cheaper form), or any process that maps
// the word (it is in shared memory).
enum class FutexScope { Process, Shared };

namespace detail {
inline long futex(std::atomic<std::uint32_t>& word, int op, std::uint32_t value, const timespec* timeout,
                  FutexScope scope) {
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word),
                   op | (scope == FutexScope::Process ? FUTEX_PRIVATE_FLAG : 0), value, timeout, nullptr, 0);
}
}  // namespace detail

// Sleeps while `word` holds `expected`, until woken (or a spurious wake:
// callers look again). For a lock's waiter, whose holder always wakes it.
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, FutexScope scope) {
  detail::futex(word, FUTEX_WAIT, expected, nullptr, scope);
}

// The same, for at most `timeout`.
inline void futex_wait_for(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                           std::chrono::microseconds timeout, FutexScope scope) {
  const timespec ts{static_cast<time_t>(timeout.count() / 1'000'000),
                    static_cast<long>(timeout.count() % 1'000'000) * 1000};
  detail::futex(word, FUTEX_WAIT, expected, &ts, scope);
}

// Wakes up to `count` sleepers on `word` (INT_MAX: all of them).
inline void futex_wake(std::atomic<std::uint32_t>& word, int count, FutexScope scope) {
  detail::futex(word, FUTEX_WAKE, static_cast<std::uint32_t>(count), nullptr, scope);
}

}  // namespace kizuna::core
