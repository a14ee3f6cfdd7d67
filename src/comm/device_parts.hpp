// comm/device_parts.hpp: a device collective cut into parts that separate
// thread blocks run at once, each on its own FIFO channels.
//
// One block moves what one multiprocessor can; a large collective needs
// several. An all-reduce, broadcast or reduce of n elements is n
// independent element-wise problems, so it splits into contiguous ranges,
// each the same collective on fewer elements at an offset into the same
// buffers (and the same schedules, for the smaller count). All-gather and
// reduce-scatter lay one buffer out by rank: a part is the same range of
// every rank's share, the same collective on fewer elements per rank at
// an offset into both buffers, whose rank blocks lie a whole share apart
// (algo::ScheduleRequest::block_stride). They split where the runner can
// address blocks that way (the kernels' step tables can, the host's calls
// cannot), and stay whole otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algo/schedule.hpp"

namespace kizuna::comm {

struct DevicePart {
  std::uint64_t offset = 0;  // elements
  std::uint64_t count = 0;
};

// Whether a runner may address rank blocks a stride apart.
enum class RankBlocks { SideBySide, Strided };

// At most `max_parts` parts of at least `min_part_bytes` each (one part
// when the collective cannot split or is small), in order, covering
// [0, count) (all-gather's and reduce-scatter's count per rank); every
// part but the last starts and ends on a 256-byte boundary of its element
// type.
std::vector<DevicePart> split_parts(algo::Collective c, std::uint64_t count, std::size_t elem, int max_parts,
                                    std::size_t min_part_bytes, RankBlocks blocks = RankBlocks::SideBySide);

}  // namespace kizuna::comm
