#include "comm/device_steps.hpp"

#include <cstring>

#include "core/check.hpp"

namespace kizuna::comm {

std::vector<kernels::DeviceStep> encode_steps(const algo::RankSchedule& schedule) {
  std::vector<kernels::DeviceStep> table;
  table.reserve(schedule.steps.size());
  for (const algo::Step& s : schedule.steps) {
    kernels::DeviceStep d{};
    d.op = static_cast<kernels::DeviceOp>(s.op);
    d.src = static_cast<kernels::DeviceBuffer>(s.src);
    d.dst = static_cast<kernels::DeviceBuffer>(s.dst);
    d.recv_peer = s.recv_peer;
    d.send_peer = s.send_peer;
    d.src_offset = s.src_offset;
    d.dst_offset = s.dst_offset;
    d.count = s.count;
    table.push_back(d);
  }
  return table;
}

std::vector<algo::Step> decode_steps(const unsigned char* bytes, std::size_t size, int world,
                                     std::uint64_t input_count, std::uint64_t output_count,
                                     std::uint64_t scratch_count) {
  constexpr std::size_t kEntry = sizeof(kernels::DeviceStep);
  KIZUNA_CHECK_ARG(size % kEntry == 0, "step table of ", size, " bytes is not a whole number of ",
                   kEntry, "-byte entries");
  const std::uint64_t limits[3] = {input_count, output_count, scratch_count};
  std::vector<algo::Step> steps;
  steps.reserve(size / kEntry);
  for (std::size_t i = 0; i < size / kEntry; ++i) {
    kernels::DeviceStep d;
    std::memcpy(&d, bytes + i * kEntry, kEntry);
    const auto op = static_cast<unsigned>(d.op);
    KIZUNA_CHECK_ARG(op <= static_cast<unsigned>(algo::StepOp::LocalReduce), "step ", i,
                     ": unknown operation ", op);
    KIZUNA_CHECK_ARG(static_cast<unsigned>(d.src) <= 2 && static_cast<unsigned>(d.dst) <= 2, "step ", i,
                     ": unknown buffer");
    algo::Step s;
    s.op = static_cast<algo::StepOp>(op);
    s.src = static_cast<algo::Buffer>(d.src);
    s.dst = static_cast<algo::Buffer>(d.dst);
    s.recv_peer = d.recv_peer;
    s.send_peer = d.send_peer;
    s.src_offset = d.src_offset;
    s.dst_offset = d.dst_offset;
    s.count = d.count;
    const bool receives = s.receives(), sends = s.sends();
    KIZUNA_CHECK_ARG(!receives || (s.recv_peer >= 0 && s.recv_peer < world), "step ", i,
                     ": receives from rank ", s.recv_peer, " of a world of ", world);
    KIZUNA_CHECK_ARG(!sends || (s.send_peer >= 0 && s.send_peer < world), "step ", i,
                     ": sends to rank ", s.send_peer, " of a world of ", world);
    const bool reads_src = s.op != algo::StepOp::Recv && s.op != algo::StepOp::RecvCopySend;
    const bool writes_dst = s.op != algo::StepOp::Send;
    auto fits = [&](algo::Buffer b, std::uint64_t offset) {
      const std::uint64_t limit = limits[static_cast<int>(b)];
      return offset <= limit && s.count <= limit - offset;
    };
    KIZUNA_CHECK_ARG(!reads_src || fits(s.src, s.src_offset), "step ", i, ": source range [",
                     s.src_offset, ", +", s.count, ") is outside its buffer");
    KIZUNA_CHECK_ARG(!writes_dst || fits(s.dst, s.dst_offset), "step ", i, ": destination range [",
                     s.dst_offset, ", +", s.count, ") is outside its buffer");
    steps.push_back(s);
  }
  return steps;
}

}  // namespace kizuna::comm
