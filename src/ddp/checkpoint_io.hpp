// ddp/checkpoint_io.hpp: what the collective save and load
// (checkpoint_collective.cpp) need of the file code in checkpoint.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kizuna::ddp {

// The CRC-32C trailer that ends every checkpoint file (kizuna/checkpoint.hpp).
inline constexpr std::size_t kCheckpointTrailerBytes = 4;

// The whole file at `path`; its size is checked against the format's limit
// first (InvalidArgument), SystemError when the OS refuses to open or read.
std::vector<std::uint8_t> read_checkpoint_bytes(const std::string& path);

}  // namespace kizuna::ddp
