// tests/support/fifo_memory.hpp: the memory one rank exports for the GPU
// FIFOs, in host memory, as kernels/fifo_layout.hpp lays it out: zeroed,
// and 16-byte aligned, for the walk moves 16-byte packs.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/fifo_layout.hpp"

namespace kizuna::test {

class FifoMemory {
 public:
  FifoMemory(const kernels::FifoShape& shape, int world)
      : packs_(kernels::fifo_memory_bytes(shape, world) / sizeof(Pack) + 1) {}
  unsigned char* data() { return reinterpret_cast<unsigned char*>(packs_.data()); }

 private:
  struct alignas(16) Pack {
    std::uint64_t words[2];
  };
  std::vector<Pack> packs_;
};

}  // namespace kizuna::test
