#include "comm/device_parts.hpp"

#include <algorithm>

namespace kizuna::comm {

std::vector<DevicePart> split_parts(algo::Collective c, std::uint64_t count, std::size_t elem, int max_parts,
                                    std::size_t min_part_bytes, RankBlocks blocks) {
  const bool by_rank = c == algo::Collective::AllGather || c == algo::Collective::ReduceScatter;
  const bool splits = by_rank ? blocks == RankBlocks::Strided : c != algo::Collective::Barrier;
  const std::uint64_t bytes = count * elem;
  std::uint64_t parts = 1;
  if (splits && max_parts > 1 && min_part_bytes > 0)
    parts = std::clamp<std::uint64_t>(bytes / min_part_bytes, 1, static_cast<std::uint64_t>(max_parts));
  if (parts == 1) return {DevicePart{0, count}};
  const std::uint64_t align = std::max<std::uint64_t>(1, 256 / elem);
  std::vector<DevicePart> out;
  std::uint64_t start = 0;
  for (std::uint64_t k = 1; k <= parts; ++k) {
    std::uint64_t end = k == parts ? count : count * k / parts / align * align;
    end = std::max(end, start);
    if (end > start) out.push_back({start, end - start});
    start = end;
  }
  return out;
}

}  // namespace kizuna::comm
