#include "collective.hpp"

#include <algorithm>
#include <cctype>
#include <string>

namespace kizuna::perf {

std::string_view name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::Broadcast: return "broadcast";
    case Collective::Reduce: return "reduce";
  }
  return "?";
}

std::optional<Collective> parse_collective(std::string_view text) {
  std::string key;
  for (const char ch : text)
    if (ch != '_' && ch != '-') key += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const Collective c : kAllCollectives) {
    std::string canonical;
    for (const char ch : name(c))
      if (ch != '_') canonical += ch;
    if (key == canonical) return c;
  }
  return std::nullopt;
}

bool has_op(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::Reduce;
}

bool has_root(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

Sizing size_for(Collective c, std::size_t bytes, std::size_t elem_size, int world) {
  const std::size_t n = static_cast<std::size_t>(world);
  // A rank's part of an all-gather or reduce-scatter is a whole number of
  // 16-byte units, as in nccl-tests, so that the parts stay aligned.
  const std::size_t unit = std::max<std::size_t>(1, 16 / elem_size);
  Sizing s;
  switch (c) {
    case Collective::AllReduce:
    case Collective::Broadcast:
    case Collective::Reduce:
      s.count = bytes / elem_size;
      s.send_count = s.recv_count = s.count;
      s.bytes = s.count * elem_size;
      break;
    case Collective::AllGather:
      s.count = bytes / elem_size / n / unit * unit;
      s.send_count = s.count;
      s.recv_count = s.count * n;
      s.bytes = s.recv_count * elem_size;
      break;
    case Collective::ReduceScatter:
      s.count = bytes / elem_size / n / unit * unit;
      s.send_count = s.count * n;
      s.recv_count = s.count;
      s.bytes = s.send_count * elem_size;
      break;
  }
  return s;
}

double bus_factor(Collective c, int world) {
  const double n = world;
  switch (c) {
    case Collective::AllReduce: return 2.0 * (n - 1) / n;
    case Collective::AllGather:
    case Collective::ReduceScatter: return (n - 1) / n;
    case Collective::Broadcast:
    case Collective::Reduce: return 1.0;
  }
  return 1.0;
}

std::vector<std::size_t> size_sweep(std::size_t min_bytes, std::size_t max_bytes,
                                    std::size_t step_factor, std::size_t step_bytes) {
  std::vector<std::size_t> sizes;
  if (min_bytes > max_bytes) return sizes;
  for (std::size_t size = min_bytes;;) {
    sizes.push_back(size);
    // Stop at max, on a step of 0 (min 0 with a factor), and before the next
    // size would pass max (which also keeps it from overflowing).
    if (step_factor > 1 ? size == 0 || size > max_bytes / step_factor
                        : step_bytes == 0 || step_bytes > max_bytes - size)
      break;
    size = step_factor > 1 ? size * step_factor : size + step_bytes;
  }
  return sizes;
}

}  // namespace kizuna::perf
