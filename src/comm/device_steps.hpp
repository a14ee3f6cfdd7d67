// comm/device_steps.hpp: a rank's schedule as the table the CUDA executor
// uploads (kernels/step_table.cuh), and back.
//
// encode() is total: every Step has a DeviceStep. decode() is the
// untrusted direction (a table read back from a file or device memory, or a
// fuzzer's bytes): every field is checked against the world size and the
// buffer sizes, and a bad entry is an InvalidArgument naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algo/schedule.hpp"
#include "kernels/step_table.cuh"

namespace kizuna::comm {

std::vector<kernels::DeviceStep> encode_steps(const algo::RankSchedule& schedule);

// Checks and converts `count` table entries stored at `bytes` (little-endian
// host layout) for a rank of `world` ranks whose buffers hold the given
// numbers of elements.
std::vector<algo::Step> decode_steps(const unsigned char* bytes, std::size_t size, int world,
                                     std::uint64_t input_count, std::uint64_t output_count,
                                     std::uint64_t scratch_count);

}  // namespace kizuna::comm
