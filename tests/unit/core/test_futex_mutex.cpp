#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "core/futex_mutex.hpp"

using kizuna::core::FutexMutex;

TEST_CASE("FutexMutex: try_lock fails while held and succeeds once unlocked", "[futex_mutex]") {
  FutexMutex m;
  REQUIRE(m.try_lock());
  bool other = true;
  std::thread([&] { other = m.try_lock(); }).join();
  CHECK_FALSE(other);
  m.unlock();
  std::thread([&] {
    other = m.try_lock();
    if (other) m.unlock();
  }).join();
  CHECK(other);
}

TEST_CASE("FutexMutex: threads contending for it never overlap", "[futex_mutex]") {
  FutexMutex m;
  constexpr int kThreads = 4, kRounds = 50000;
  long counter = 0;  // not atomic: the lock alone orders it
  std::atomic<int> inside{0}, overlaps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        std::unique_lock lock(m);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        ++counter;
        inside.fetch_sub(1);
      }
    });
  for (auto& t : threads) t.join();
  CHECK(overlaps.load() == 0);
  CHECK(counter == long{kThreads} * kRounds);
}

TEST_CASE("FutexMutex: a waiter sleeps until the holder unlocks, then gets it", "[futex_mutex]") {
  using Clock = std::chrono::steady_clock;
  FutexMutex m;
  m.lock();
  std::atomic<bool> got{false};
  Clock::time_point unlocked_at, got_at;
  std::thread waiter([&] {
    m.lock();
    got_at = Clock::now();
    got = true;
    m.unlock();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the waiter is asleep on the word by now
  CHECK_FALSE(got.load());
  unlocked_at = Clock::now();
  m.unlock();
  waiter.join();
  CHECK(got.load());
  CHECK(got_at >= unlocked_at);
  // The lock is free again, uncontended.
  CHECK(m.try_lock());
  m.unlock();
}
