// core/asymmetric_fence.hpp: a store-load fence split unevenly between a
// side that runs often and one that runs rarely.
//
// Two threads that each store a flag and then load the other's (Dekker's
// pattern: "I published; is my peer asleep?" against "I am going to sleep;
// has anything been published?") each need a full fence between the store
// and the load. On x86 that fence waits for the store to leave the store
// buffer, which, when the line is one a peer is polling, takes a cache-line
// round trip: on every small collective. Here the frequent side issues
// light_fence(), which orders only the compiler, and the rare side issues
// heavy_fence(), membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED): it makes every
// running thread of every registered process execute a full fence before
// it returns (and a thread that is not running has passed one in its
// context switch), so either the light side's store is visible to the heavy
// side's load, or the light side's load sees the heavy side's store.
//
// It costs the heavy side tens of microseconds on a virtual machine (an
// inter-processor interrupt per CPU running a registered process; 50 us
// here against a spinning peer), so the heavy side must be one that is
// about to sleep anyway. Both sides must know that the pairing is in force:
// the light side only when its own process is registered
// (asymmetric_fence_available()) and the heavy side has said it will use
// heavy_fence(); otherwise both use std::atomic_thread_fence.
#pragma once

#include <atomic>
#include <cstdint>

namespace kizuna::core {

// Registers this process, once, for other processes' heavy_fence(). False
// when the kernel lacks membarrier's expedited global command or refuses
// it (a seccomp filter): then neither side may use the pairing.
bool asymmetric_fence_available();

// The frequent side: a compiler barrier only.
inline void light_fence() noexcept { std::atomic_signal_fence(std::memory_order_seq_cst); }

// The rare side. False when the system call failed; then nothing is
// assured about the light sides, and the caller must fall back.
bool heavy_fence() noexcept;

// A sleeper's fence on a doorbell whose owner may set `light_ring` (null:
// none) to tell its peers that it fences heavily before it sleeps, so that
// they need not fence when they ring: between its `sleeping` store and its
// last look at what it waits for, heavy_fence() where light_ring is set, a
// full fence otherwise. False when the heavy fence failed: light_ring is
// cleared (the peers fence from now on) and a full fence issued, but a
// ring a peer skipped meanwhile may be lost, so the caller sleeps at most
// a millisecond this time.
bool fence_before_sleep(std::atomic<std::uint32_t>* light_ring) noexcept;

}  // namespace kizuna::core
