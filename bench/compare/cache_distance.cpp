// cache-distance: how far apart two CPUs' caches are, as a shared-memory
// all-reduce between two ranks on them feels it.
//
//   cache-distance [--cpus A,B] [--quick]
//
// Two threads, pinned to CPUs A and B (default: the first two this process
// may run on), measure
//   - the round trip of one cache line: A writes, B answers, A sees it
//     (the median of 5 batches of 20 000);
//   - the rate at which 64 KiB blocks written on A are copied out on B,
//     through 4 slots, with ordinary stores (the block stays dirty in A's
//     caches until B fetches it) and with streaming stores (it goes to
//     memory, core/stream_copy.hpp), 64 MiB each.
// --quick measures 50 times less (for the tests: on busy cores each round
// trip can take a scheduler's time slice).
// On a virtual machine the host places its virtual CPUs, and moves them:
// the same two CPUs can be near (sharing a last-level cache) one minute and
// far the next. scripts/bench_compare.sh runs it before each configuration
// so that a result can be read with the placement it drew.
//
// Prints one line:
//   cache-distance cpus A B round-trip-ns X ordinary-GBps Y streaming-GBps Z
// Exit status 2 on bad usage, 1 when the threads cannot be pinned.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/spin_lock.hpp"
#include "core/stream_copy.hpp"

namespace {

using Clock = std::chrono::steady_clock;

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

struct alignas(64) Flag {
  std::atomic<std::int64_t> value{0};
};

double round_trip_ns(int a, int b, int trips) {
  constexpr int kBatches = 5;
  Flag ping, pong;
  std::thread echo([&] {
    pin(b);
    for (std::int64_t i = 1; i <= std::int64_t{kBatches} * trips; ++i) {
      while (ping.value.load(std::memory_order_acquire) != i) kizuna::core::cpu_relax();
      pong.value.store(i, std::memory_order_release);
    }
  });
  pin(a);
  std::array<double, kBatches> ns{};
  std::int64_t i = 0;
  for (double& batch : ns) {
    const Clock::time_point start = Clock::now();
    for (int k = 0; k < trips; ++k) {
      ping.value.store(++i, std::memory_order_release);
      while (pong.value.load(std::memory_order_acquire) != i) kizuna::core::cpu_relax();
    }
    batch = std::chrono::duration<double, std::nano>(Clock::now() - start).count() / trips;
  }
  echo.join();
  std::sort(ns.begin(), ns.end());
  return ns[kBatches / 2];
}

// GB/s of 64 KiB blocks written on `a` (from a block in its cache) and
// copied out on `b`, through 4 slots.
double handoff_gbps(int a, int b, bool streaming, std::size_t total) {
  constexpr std::size_t kBlock = 64 << 10, kSlots = 4;
  const std::size_t blocks = total / kBlock;
  std::vector<unsigned char> slots(kBlock * kSlots), source(kBlock, 1), sink(kBlock);
  std::array<Flag, kSlots> full, empty;
  std::thread reader([&] {
    pin(b);
    for (std::size_t i = 0; i < blocks; ++i) {
      const std::size_t k = i % kSlots;
      const auto round = static_cast<std::int64_t>(i / kSlots) + 1;
      while (full[k].value.load(std::memory_order_acquire) != round) kizuna::core::cpu_relax();
      std::memcpy(sink.data(), slots.data() + k * kBlock, kBlock);
      empty[k].value.store(round, std::memory_order_release);
    }
  });
  pin(a);
  const Clock::time_point start = Clock::now();
  for (std::size_t i = 0; i < blocks; ++i) {
    const std::size_t k = i % kSlots;
    const auto round = static_cast<std::int64_t>(i / kSlots);
    while (empty[k].value.load(std::memory_order_acquire) != round) kizuna::core::cpu_relax();
    if (streaming) kizuna::core::stream_copy(slots.data() + k * kBlock, source.data(), kBlock);
    else std::memcpy(slots.data() + k * kBlock, source.data(), kBlock);
    full[k].value.store(round + 1, std::memory_order_release);
  }
  reader.join();
  return double(kBlock * blocks) / std::chrono::duration<double>(Clock::now() - start).count() / 1e9;
}

int usage() {
  std::fprintf(stderr, "usage: cache-distance [--cpus A,B] [--quick]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int a = -1, b = -1;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--cpus" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d,%d", &a, &b) != 2 || a < 0 || b < 0 || a == b) return usage();
    } else {
      return usage();
    }
  }
  if (a < 0) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 1;
    for (int cpu = 0; cpu < CPU_SETSIZE && b < 0; ++cpu)
      if (CPU_ISSET(cpu, &allowed)) (a < 0 ? a : b) = cpu;
    if (b < 0) {
      std::fprintf(stderr, "cache-distance: this process may run on one CPU only\n");
      return 1;
    }
  }
  if (!pin(b) || !pin(a)) {
    std::fprintf(stderr, "cache-distance: cannot pin to CPUs %d and %d\n", a, b);
    return 1;
  }
  const int trips = quick ? 400 : 20'000;
  const std::size_t total = (quick ? std::size_t{2} : std::size_t{64}) << 20;
  const double rt = round_trip_ns(a, b, trips);
  const double ordinary = handoff_gbps(a, b, false, total);
  const double streaming = handoff_gbps(a, b, true, total);
  std::printf("cache-distance cpus %d %d round-trip-ns %.0f ordinary-GBps %.2f streaming-GBps %.2f\n", a, b, rt, ordinary,
              streaming);
  return 0;
}
