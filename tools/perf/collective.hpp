// perf/collective.hpp: one small descriptor per benchmarked collective, as
// nccl-tests has (all_reduce.cu, all_gather.cu, ...), shared by kizuna-perf
// and the comparison harnesses in bench/compare/.
//
// A benchmark asks for a size in bytes; the descriptor turns it into the
// counts the call takes and the figures the table prints, exactly as
// nccl-tests does:
//
//   collective      count column        send elems    recv elems    size column    busbw factor
//   all_reduce      bytes/elem          count         count         count*elem     2(n-1)/n
//   all_gather      bytes/elem/n        count         n*count       n*count*elem   (n-1)/n
//   reduce_scatter  bytes/elem/n        n*count       count         n*count*elem   (n-1)/n
//   broadcast       bytes/elem          count         count         count*elem     1
//   reduce          bytes/elem          count         count         count*elem     1
//
// algbw = size / time; busbw = algbw x factor: the rate each rank's busiest
// link must sustain, comparable across world sizes.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace kizuna::perf {

enum class Collective { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce };

inline constexpr Collective kAllCollectives[] = {Collective::AllReduce, Collective::AllGather,
                                                 Collective::ReduceScatter, Collective::Broadcast,
                                                 Collective::Reduce};

// "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce".
std::string_view name(Collective c);
// Accepts those names, with '-' for '_' and without it ("allreduce").
std::optional<Collective> parse_collective(std::string_view text);

// Whether the table's redop and root columns mean something for `c`.
bool has_op(Collective c);
bool has_root(Collective c);

struct Sizing {
  std::size_t count = 0;       // the count column: the count argument of the call
  std::size_t send_count = 0;  // elements each rank sends from
  std::size_t recv_count = 0;  // elements each rank receives into
  std::size_t bytes = 0;       // the size column; algbw = bytes / time
};

// The largest call of `c` that fits in `bytes` for `world` ranks.
Sizing size_for(Collective c, std::size_t bytes, std::size_t elem_size, int world);

double bus_factor(Collective c, int world);

// The sizes -b/-e/-f/-i describe: min, then x factor when factor > 1, else
// + increment, up to max inclusive (nccl-tests' loop).
std::vector<std::size_t> size_sweep(std::size_t min_bytes, std::size_t max_bytes,
                                    std::size_t step_factor, std::size_t step_bytes);

}  // namespace kizuna::perf
