#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <new>
#include <thread>

#include "core/futex.hpp"

using kizuna::core::futex_wait_for;
using kizuna::core::futex_wake;
using kizuna::core::FutexScope;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST_CASE("futex_wait_for returns at once when the word no longer holds the value", "[futex]") {
  std::atomic<std::uint32_t> word{1};
  const auto start = Clock::now();
  futex_wait_for(word, 0, std::chrono::seconds(30), FutexScope::Process);
  CHECK(Clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("futex_wait_for gives up after its timeout when nobody wakes it", "[futex]") {
  std::atomic<std::uint32_t> word{0};
  const auto start = Clock::now();
  // A spurious wake may end a wait early; the caller looks again, as here.
  while (Clock::now() - start < milliseconds(20)) futex_wait_for(word, 0, milliseconds(20), FutexScope::Process);
  const auto waited = Clock::now() - start;
  CHECK(waited >= milliseconds(20));
  CHECK(waited < std::chrono::seconds(10));
}

TEST_CASE("futex_wake wakes a thread of this process asleep on the word", "[futex]") {
  std::atomic<std::uint32_t> word{0};
  std::atomic<bool> woke{false};
  Clock::time_point woke_at;
  std::thread sleeper([&] {
    while (word.load() == 0) futex_wait_for(word, 0, std::chrono::seconds(30), FutexScope::Process);
    woke_at = Clock::now();
    woke = true;
  });
  std::this_thread::sleep_for(milliseconds(50));  // asleep on the word by now
  CHECK_FALSE(woke.load());
  const auto rung = Clock::now();
  word.store(1);
  futex_wake(word, INT_MAX, FutexScope::Process);
  sleeper.join();
  CHECK(woke_at - rung < std::chrono::seconds(10));  // by the wake, not its 30 s timeout
}

TEST_CASE("futex_wake with the shared scope wakes another process asleep on a word both map", "[futex]") {
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(page != MAP_FAILED);
  auto* word = new (page) std::atomic<std::uint32_t>{0};
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Exits 0 when woken by the parent's change, 1 when the 30 s ran out.
    const auto start = Clock::now();
    while (word->load() == 0 && Clock::now() - start < std::chrono::seconds(30))
      futex_wait_for(*word, 0, std::chrono::seconds(30), FutexScope::Shared);
    ::_exit(word->load() == 1 && Clock::now() - start < std::chrono::seconds(20) ? 0 : 1);
  }
  std::this_thread::sleep_for(milliseconds(50));
  word->store(1);
  futex_wake(*word, INT_MAX, FutexScope::Shared);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  ::munmap(page, 4096);
}
