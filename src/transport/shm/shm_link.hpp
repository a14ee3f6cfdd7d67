// transport/shm/shm_link.hpp: a Link between two ranks of one node, through
// shared memory.
//
// Outbound messages are copied into the peer's inbound channel (a ring of
// slots in the peer's segment); inbound messages are reduced or copied
// straight out of this rank's own channel for that peer: one copy in, one
// pass out, no socket. Small messages ride inside the slot header.
//
// Waiting is the executor's: it spins on progress(), yields, then sleeps on
// this rank's doorbell (doorbell_sleep), which a peer rings whenever it
// publishes or releases a slot while the owner sleeps. Whether it sleeps is
// a store-load race that both sides fence, or, once the owner has called
// use_light_ring, only the sleeper: a rank publishing a small message
// otherwise waits, at its fence, for the line its peer polls to come and
// go (a cache-line round trip on every call).
//
// The TCP connection to the same peer stays open as the control link: its
// end-of-file means the peer died (checked every few hundred idle
// progress() calls and before sleeping), and abort notices travel on it.
//
// Not thread-safe, like every Link; interrupt() may come from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include "transport/link.hpp"
#include "transport/shm/segment.hpp"

namespace kizuna::transport::shm {

// `inbound`: channel `peer_slot` of this rank's segment; `outbound`:
// channel `my_slot` of the peer's segment. Both segments outlive the link.
// While `*stream_stores` holds (if given; it must outlive the link too),
// payloads of 16 KiB and more go into the peer's slots with streaming
// stores (core/stream_copy.hpp), past this rank's caches, which a peer in
// another cache domain reads faster.
std::unique_ptr<Link> make_shm_link(int peer, const Segment& mine, std::uint32_t peer_slot,
                                    const Segment& theirs, std::uint32_t my_slot,
                                    std::unique_ptr<Link> control,
                                    const std::atomic<bool>* stream_stores = nullptr);

// Sleeps on `owner`'s doorbell for at most `timeout`, unless `progress()`
// (called once after announcing the sleep) finds something to do. Returns
// what progress() returned.
bool doorbell_sleep(SegmentHeader* owner, const std::function<bool()>& progress,
                    std::chrono::microseconds timeout);

// Lets the peers that ring `owner`'s doorbell skip their fence: the owner
// fences heavily (tens of microseconds) each time it goes to sleep instead.
// For a rank that sleeps only after spinning, never for one that sleeps on
// every wait (more ranks than cores). False, changing nothing, where the
// system has no such fence.
bool use_light_ring(SegmentHeader* owner);

}  // namespace kizuna::transport::shm
