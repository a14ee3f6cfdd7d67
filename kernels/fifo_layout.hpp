// kernels/fifo_layout.hpp: where kernels/fifo_program.cuh's channels lie in
// the memory every rank exports (CUDA IPC, or the emulated device's host
// memory), so that no rank ever waits on a peer's memory.
//
// Each rank exports `blocks * world` records; record b * world + q of rank
// r's memory holds `slots` ready words, one tail word, then the slots. The
// slots and ready words of that record are channel q -> r of block b: the
// sender q writes them over the link, the receiver r waits on the ready
// words in its own memory. The record's tail word is the credit word of the
// opposite channel, r -> q: the receiver q writes it over the link, the
// sender r waits on it in its own memory. A wait on a peer's memory would
// cost a round trip over NVLink or PCIe per poll and load the link the
// data travels on, as NCCL's connections avoid too (their head and tail
// each live with the side that polls them).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/fifo_program.cuh"

namespace kizuna::kernels {

struct FifoShape {
  std::uint32_t blocks = 0;      // channel sets: parts run at once
  std::uint32_t slots = 0;
  std::uint32_t slot_bytes = 0;  // a multiple of 16 (of 256 for CUDA IPC)
};

// A record's ready words and tail word, padded so that its slots start
// 256-byte aligned.
inline std::size_t fifo_control_bytes(const FifoShape& s) {
  return (std::size_t(s.slots) * 8 + 8 + 255) / 256 * 256;
}

inline std::size_t fifo_record_bytes(const FifoShape& s) {
  return fifo_control_bytes(s) + std::size_t(s.slots) * s.slot_bytes;
}

// The bytes each rank exports, zeroed before any peer may touch them.
inline std::size_t fifo_memory_bytes(const FifoShape& s, int world) {
  return fifo_record_bytes(s) * std::size_t(world) * s.blocks;
}

// Where, in the sender's memory, the credit word of channel `from` -> `to`
// of `block` lies (bytes from its start).
inline std::size_t fifo_credit_offset(int world, const FifoShape& s, std::uint32_t block, int to) {
  return (std::size_t(block) * world + to) * fifo_record_bytes(s) + std::size_t(s.slots) * 8;
}

// Channel `from` -> `to` of `block`, as this process addresses it:
// memory[r] is rank r's exported memory as mapped here.
inline FifoChannel fifo_channel(unsigned char* const* memory, int world, const FifoShape& s, std::uint32_t block,
                                int from, int to) {
  unsigned char* home = memory[to] + (std::size_t(block) * world + from) * fifo_record_bytes(s);  // the receiver's
  FifoChannel ch;
  ch.ready = reinterpret_cast<std::uint64_t*>(home);
  ch.data = home + fifo_control_bytes(s);
  ch.tail = reinterpret_cast<std::uint64_t*>(memory[from] + fifo_credit_offset(world, s, block, to));
  return ch;
}

// Every word a peer's walk may wait on for `rank` (the ready words of
// rank's channels to it, the credit words of its channels to rank), as
// this process addresses them: an aborting rank writes kFifoPoison into
// each, so that its peers' kernels stop at once rather than at their
// deadlines. All lie in the peers' memory. `out(word)` is called per word.
template <class Out>
void fifo_poison_words(unsigned char* const* memory, int world, const FifoShape& s, int rank, Out&& out) {
  for (std::uint32_t b = 0; b < s.blocks; ++b)
    for (int p = 0; p < world; ++p) {
      if (p == rank) continue;
      const FifoChannel to_peer = fifo_channel(memory, world, s, b, rank, p);
      for (std::uint32_t k = 0; k < s.slots; ++k) out(to_peer.ready + k);
      out(fifo_channel(memory, world, s, b, p, rank).tail);
    }
}

// Whether every chunk a rank sent has come home as a credit: `sent[b][p]`
// its count of chunks sent to p on block b (FifoCounters::sent), and
// `credit(b, p)` the credit word of that channel in its own memory. Then no
// receiver writes into its memory again (a receiver writes a credit only
// as it releases a chunk), and the memory may be freed.
template <class Credit>
bool fifo_credits_home(int rank, int world, std::uint32_t blocks, const FifoCounters* counters, Credit&& credit) {
  for (std::uint32_t b = 0; b < blocks; ++b)
    for (int p = 0; p < world; ++p)
      if (p != rank && credit(b, p) != counters[b].sent[p]) return false;
  return true;
}

}  // namespace kizuna::kernels
