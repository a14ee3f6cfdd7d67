// transport/shm/layout.hpp: what lives in a rank's shared-memory segment.
//
// Rank R's segment holds R's doorbell and one inbound channel per rank of
// its node (the one for R itself is unused); the sender S writes into
// channel S of R's segment, R reads it. Everything that another process
// reads or writes is a fixed-size, trivially copyable struct of atomics and
// plain integers, at fixed offsets, with every field that two processes
// write on its own cache line.
//
//   [SegmentHeader 128 B][ChannelControl x channels, 256 B each]
//   [slots of channel 0][slots of channel 1]...
//   slot = SlotHeader (64 B) + slot_bytes of payload
//
// A channel is a ring of `slots` slots, a power of two (so that slot
// number % slots stays in step when the numbers wrap at 2^32). The sender
// numbers the slots it publishes 1, 2, 3, ... and publishes one by storing
// its number in the slot's `ready` flag (release) after the header and the
// payload; the receiver waits for the number it expects in the next slot's
// flag (acquire), so data and flag travel together. `tail` counts slots the
// receiver has released; the sender reuses a slot only once it has been
// released. A message occupies ceil(bytes / slot_bytes) slots (one for an
// empty message); up to kInlineBytes travel inside the slot header next to
// the flag, so a small message is a single cache line.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace kizuna::transport::shm {

inline constexpr std::uint64_t kSegmentMagic = 0x4d48535a4b5a4b31ull;  // "1KZKZSHM"
inline constexpr std::uint32_t kSegmentVersion = 4;
inline constexpr std::size_t kInlineBytes = 24;
// The most payload one channel's slots may hold (KIZUNA_SHM_BYTES's bound).
inline constexpr std::uint64_t kMaxChannelBytes = 1ull << 30;

struct alignas(64) SegmentHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t channels;
  std::uint64_t slot_bytes;
  std::uint32_t slots;
  std::uint32_t owner_rank;
  std::uint64_t comm_id;
  // The owner sleeps on the doorbell; a peer that gives it something to do
  // (a published slot, a released slot) rings it if `sleeping` is set.
  // With `light_ring` set (by the owner, before it first sleeps so), the
  // owner fences heavily before it sleeps and the peers skip their fence
  // before they look at `sleeping` (core/asymmetric_fence.hpp).
  alignas(64) std::atomic<std::uint32_t> doorbell;
  std::atomic<std::uint32_t> sleeping;
  std::atomic<std::uint32_t> light_ring;
};

struct alignas(64) ChannelControl {
  alignas(64) std::atomic<std::uint32_t> tail;  // written by the receiver
  alignas(64) std::uint8_t reserved[64];
  alignas(64) std::uint8_t reserved2[64];
  alignas(64) std::uint8_t reserved3[64];
};

struct alignas(64) SlotHeader {
  std::uint64_t seq;            // message tag: collective sequence
  std::uint64_t message_bytes;  // the whole message
  std::uint64_t offset;         // of this slot's payload within the message
  std::uint32_t index;          // message tag: index on this link
  std::uint32_t slot_bytes;     // payload bytes in this slot
  std::uint32_t ready;          // the slot's number once published (std::atomic_ref)
  std::uint32_t call;           // message tag: the call's code
  std::uint8_t inline_data[kInlineBytes];
};

static_assert(sizeof(SegmentHeader) == 128);
static_assert(sizeof(ChannelControl) == 256);
static_assert(sizeof(SlotHeader) == 64);
static_assert(std::is_trivially_copyable_v<SlotHeader>);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(offsetof(SlotHeader, ready) % std::atomic_ref<std::uint32_t>::required_alignment == 0);

struct Geometry {
  std::uint32_t channels = 0;
  std::uint32_t slots = 0;
  std::uint64_t slot_bytes = 0;

  std::size_t slot_stride() const { return sizeof(SlotHeader) + slot_bytes; }
  std::size_t channel_offset(std::uint32_t c) const {
    return sizeof(SegmentHeader) + sizeof(ChannelControl) * c;
  }
  std::size_t slot_offset(std::uint32_t c, std::uint32_t s) const {
    return sizeof(SegmentHeader) + sizeof(ChannelControl) * channels +
           (static_cast<std::size_t>(c) * slots + s) * slot_stride();
  }
  std::size_t total_bytes() const { return slot_offset(channels, 0); }
  // What a segment may declare: at least one channel, a power-of-two
  // number of slots, slots of 64 B .. 1 GiB in whole cache lines (so that
  // a message split at slot boundaries is split between elements of every
  // type), and a size that fits 64 bits (a peer's header is checked with
  // this before its size is computed).
  bool valid() const {
    constexpr std::uint64_t kMaxSlotBytes = 1ull << 30;
    if (channels == 0 || !std::has_single_bit(slots) || slot_bytes < 64 || slot_bytes > kMaxSlotBytes ||
        slot_bytes % 64 != 0)
      return false;
    std::uint64_t per_channel = 0, all = 0;
    return !__builtin_mul_overflow(std::uint64_t{slots}, slot_stride(), &per_channel) &&
           !__builtin_mul_overflow(per_channel, std::uint64_t{channels}, &all) &&
           all <= (1ull << 62);
  }
};

}  // namespace kizuna::transport::shm
