#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <fstream>
#include <new>
#include <string>
#include <thread>

#include "core/futex.hpp"

using kizuna::core::futex_wait_for;
using kizuna::core::futex_wake;
using kizuna::core::FutexScope;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// Waits, up to 10 s, until the thread or process whose /proc stat file is
// `stat` sleeps (state S), as it does on the futex: a wake sent before
// that would test nothing. False when it never did.
bool wait_until_asleep(const std::string& stat) {
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    std::ifstream in(stat);
    std::string line;
    std::getline(in, line);
    const auto paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'S') return true;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return false;
}

}  // namespace

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
  // A wait that returned at once instead of sleeping would take hundreds.
  int calls = 0;
  while (Clock::now() - start < milliseconds(20)) {
    futex_wait_for(word, 0, milliseconds(20), FutexScope::Process);
    ++calls;
  }
  const auto waited = Clock::now() - start;
  CHECK(calls <= 3);
  CHECK(waited < std::chrono::seconds(10));
}

TEST_CASE("futex_wake wakes a thread of this process asleep on the word", "[futex]") {
  std::atomic<std::uint32_t> word{0};
  std::atomic<bool> woke{false};
  std::atomic<pid_t> tid{0};
  Clock::time_point woke_at;
  std::thread sleeper([&] {
    tid = ::gettid();
    while (word.load() == 0) futex_wait_for(word, 0, std::chrono::seconds(30), FutexScope::Process);
    woke_at = Clock::now();
    woke = true;
  });
  while (tid.load() == 0) std::this_thread::yield();
  CHECK(wait_until_asleep("/proc/self/task/" + std::to_string(tid.load()) + "/stat"));
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
  CHECK(wait_until_asleep("/proc/" + std::to_string(child) + "/stat"));
  word->store(1);
  futex_wake(*word, INT_MAX, FutexScope::Shared);
  int status = 0;
  const pid_t waited = ::waitpid(child, &status, 0);
  ::munmap(page, 4096);
  REQUIRE(waited == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
