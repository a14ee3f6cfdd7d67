// transport/shm/futex.hpp: sleeping on a 32-bit word in shared memory until
// another process changes it (Linux futex, the process-shared form).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kizuna::transport {

static_assert(sizeof(std::atomic<std::uint32_t>) == 4 && std::atomic<std::uint32_t>::is_always_lock_free);

// Sleeps while *word == expected, for at most `timeout` (or until woken).
inline void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                       std::chrono::microseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1'000'000),
              static_cast<long>(timeout.count() % 1'000'000) * 1000};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void futex_wake_all(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace kizuna::transport
