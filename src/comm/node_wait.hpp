// comm/node_wait.hpp: how a rank waits in shared memory for the other
// ranks of its node, as symmetric memory's meetings (symmetric.hpp) and
// the mailboxes (mailbox.hpp) do.
//
// NodeWait is what it needs: who it is, whose connections to watch for a
// death or an abort notice, how long to spin and yield before sleeping,
// the communicator's abort flag, and where to show progress.
//
// A sleeper and the peer that would wake it each need a full fence between
// their store and their look at the other's (Dekker's pattern). The
// ringer's fence waits for its store to leave the store buffer, on every
// small call (a bare 2-thread loop of mailbox calls: 111-140 ns a call
// with it, 87-88 without, the two CPUs near; far, 664-674 against 676-700,
// none), so where the owner of a doorbell has set its `light_ring` flag
// it fences heavily before it sleeps, and a ringer whose process takes
// part in asymmetric fences (NodeWait::light, core/asymmetric_fence.hpp)
// only orders the compiler, as transport/shm's doorbells do.
//
// wait_for_peer() is the wait itself: spin, yield, then sleep on the
// rank's doorbell; ring_sleepers() is the other side, which wakes the
// peers that sleep; check_not_aborted() and peer_closed() are what a wait
// watches.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <kizuna/error.hpp>

#include "comm/executor.hpp"
#include "comm/history.hpp"
#include "core/asymmetric_fence.hpp"
#include "core/check.hpp"
#include "core/futex.hpp"
#include "core/spin_lock.hpp"
#include "transport/link.hpp"

namespace kizuna::comm {

struct NodeWait {
  int rank = 0;
  int world = 1;
  std::vector<transport::Link*> links;  // by rank: whose death and notices to watch
  std::chrono::microseconds spin{0}, yield{0};
  const std::atomic<bool>* aborted = nullptr;  // the communicator's broken flag
  LiveProgress* live = nullptr;
  // This process takes part in asymmetric fences, and this rank's
  // doorbells set light_ring: it fences heavily before it sleeps, and
  // skips its fence when it rings a peer whose doorbell says the same.
  bool light = false;
  // How long a sleep lasts before the wait looks again (a ring wakes it).
  std::chrono::milliseconds nap{2};
};

// Throws Aborted when the communicator was aborted.
inline void check_not_aborted(const NodeWait& node, const RunLabel& label) {
  if (node.aborted && node.aborted->load(std::memory_order_relaxed))
    KIZUNA_THROW(ErrorCode::Aborted, label.str(), ": the communicator was aborted");
}

// Whether `peer`'s connection has closed. When it closed behind an abort
// notice, throws the error the notice stands for, kept in `cause` to pass
// on unchanged; `failed_peer` is the peer in both cases (the caller decides
// whether a closed connection is a PeerLost).
inline bool peer_closed(const NodeWait& node, int peer, int& failed_peer,
                        std::optional<transport::AbortNotice>& cause) {
  transport::Link* link = node.links.at(peer);
  if (link == nullptr || !link->peer_closed()) return false;
  failed_peer = peer;
  if (const transport::AbortNotice* notice = link->received_abort()) {
    cause = *notice;
    throw transport::notice_error(*notice);
  }
  return true;
}

// A rank's doorbell, in its own part of shared memory: its peers ring it
// when `sleeping` says the rank sleeps on it. `light_ring`, where there is
// one, is set by the owner when it fences heavily before it sleeps (and
// cleared should that fence ever fail).
struct Doorbell {
  std::atomic<std::uint32_t>& bell;
  std::atomic<std::uint32_t>& sleeping;
  std::atomic<std::uint32_t>* light_ring = nullptr;
};

// Rings the doorbell of every peer that sleeps. Call it after the release
// store a peer may be waiting for: the fence here pairs with the sleeper's
// (see wait_for_peer), so either the sleeper sees the store or this rank
// sees it asleep. The fence is a compiler barrier alone towards peers that
// fence heavily before they sleep, when this process takes part.
template <class DoorbellOf>
void ring_sleepers(const NodeWait& node, DoorbellOf&& doorbell_of) {
  core::light_fence();
  bool fenced = false;
  for (int r = 0; r < node.world; ++r) {
    if (r == node.rank) continue;
    const Doorbell d = doorbell_of(r);
    const bool light = node.light && d.light_ring && d.light_ring->load(std::memory_order_relaxed);
    if (!light && !fenced) {
      std::atomic_thread_fence(std::memory_order_seq_cst);
      fenced = true;
    }
    if (d.sleeping.load(std::memory_order_relaxed)) {
      d.bell.fetch_add(1, std::memory_order_relaxed);
      core::futex_wake(d.bell, INT_MAX, core::FutexScope::Shared);
    }
  }
}

// Waits until `arrived()` holds for `peer`. A peer that is there answers
// within the first rounds, so most waits never look at the clock. Then it
// spins for node.spin, offering the core every few microseconds so that a
// peer sharing it runs; yields for node.yield; then sleeps on `mine`, a
// nap at a time. `check()` throws when the peer is lost or the
// communicator aborted: every so often while spinning and before each
// nap. Timeout at the deadline, naming the peer. A caller that must not be
// held (`patience` other than Executor::kHoldOn) never sleeps, and gets
// false once `patience` has passed; true when the peer arrived.
template <class Arrived, class Check>
bool wait_for_peer(const NodeWait& node, Doorbell mine, int peer, std::chrono::steady_clock::time_point deadline,
                   std::chrono::steady_clock::duration patience, const RunLabel& label, Arrived&& arrived,
                   Check&& check) {
  using Clock = std::chrono::steady_clock;
  constexpr int kClockEvery = 16;
  constexpr auto kSpinYieldEvery = std::chrono::microseconds(5);
  if (arrived()) return true;
  Clock::time_point start, spin_until, yield_until, next_yield;
  bool asleep_shown = false;
  for (int idle = 1; !arrived(); ++idle) {
    if (idle % kClockEvery != 0) {
      core::cpu_relax();
      continue;
    }
    const Clock::time_point now = Clock::now();
    if (idle == kClockEvery) {
      start = now;
      spin_until = now + node.spin;
      yield_until = spin_until + node.yield;
      next_yield = now + kSpinYieldEvery;
      if (node.live) node.live->awaiting.store(peer, std::memory_order_relaxed);
    }
    if (now >= deadline) {
      std::string step;  // as the executor's timeouts name theirs
      if (node.live)
        step = ", step " + std::to_string(node.live->step.load(std::memory_order_relaxed) + 1) + " of " +
               std::to_string(node.live->steps.load(std::memory_order_relaxed));
      KIZUNA_THROW(ErrorCode::Timeout, "timed out after ",
                   std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count(), " ms waiting for rank ",
                   peer, " in ", label.str(), step);
    }
    if (patience != Executor::kHoldOn && now - start >= patience) return false;
    if (idle % (kClockEvery * 64) == 0) check();
    if (now < spin_until) {
      if (now >= next_yield) {
        std::this_thread::yield();
        next_yield = now + kSpinYieldEvery;
      }
      continue;
    }
    if (now < yield_until || patience != Executor::kHoldOn) {
      std::this_thread::yield();
      continue;
    }
    if (node.live && !asleep_shown) {  // for the stuck-rank report
      node.live->asleep_since(now);
      asleep_shown = true;
    }
    check();
    // Announced, fenced, then a last look: either the peer sees this rank
    // asleep and rings (ring_sleepers), or this rank sees it arrived.
    mine.sleeping.store(1, std::memory_order_relaxed);
    Clock::duration longest = node.nap;
    if (!core::fence_before_sleep(mine.light_ring))
      longest = std::min<Clock::duration>(longest, std::chrono::milliseconds(1));
    const std::uint32_t bell = mine.bell.load(std::memory_order_acquire);
    if (!arrived()) {
      const auto nap = std::min<Clock::duration>(longest, std::max<Clock::duration>(deadline - now, {}));
      core::futex_wait_for(mine.bell, bell, std::chrono::duration_cast<std::chrono::microseconds>(nap),
                           core::FutexScope::Shared);
    }
    mine.sleeping.store(0, std::memory_order_relaxed);
  }
  if (node.live) node.live->done_waiting();
  return true;
}

}  // namespace kizuna::comm
