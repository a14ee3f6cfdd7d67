#include "algo/simulator.hpp"

#include <cstring>
#include <deque>
#include <sstream>

#include "core/check.hpp"
#include "core/reduce.hpp"

namespace kizuna::algo {

std::size_t simulate(const std::vector<RankSchedule>& schedules, DataType dtype, ReduceOp op,
                     const std::vector<SimRank>& buffers) {
  const int n = static_cast<int>(schedules.size());
  KIZUNA_CHECK_EQ(buffers.size(), schedules.size());
  const std::size_t elem = size_of(dtype);
  std::vector<std::vector<unsigned char>> scratch(n);
  for (int r = 0; r < n; ++r) scratch[r].resize(schedules[r].scratch_count * elem);

  auto at = [&](int r, Buffer b, std::uint64_t offset, std::uint64_t count,
                const Step& step) -> unsigned char* {
    const RankSchedule& s = schedules[r];
    const std::uint64_t limit = b == Buffer::Input    ? s.input_count
                                : b == Buffer::Output ? s.output_count
                                                      : s.scratch_count;
    if (offset + count > limit)
      KIZUNA_THROW(ErrorCode::Internal, "rank ", r, " step '", describe(step),
                   "' is outside its buffer of ", limit, " elements");
    unsigned char* base = b == Buffer::Input    ? buffers[r].input
                          : b == Buffer::Output ? buffers[r].output
                                                : scratch[r].data();
    return base + offset * elem;
  };

  // fifo[from * n + to]: messages in flight from `from` to `to`.
  std::vector<std::deque<std::vector<unsigned char>>> fifo(static_cast<std::size_t>(n) * n);
  std::vector<std::size_t> pc(n, 0);
  std::size_t delivered = 0;
  for (;;) {
    bool progress = false;
    bool finished = true;
    for (int r = 0; r < n; ++r) {
      const std::vector<Step>& steps = schedules[r].steps;
      while (pc[r] < steps.size()) {
        const Step& step = steps[pc[r]];
        std::vector<unsigned char> message;
        if (step.receives()) {
          KIZUNA_CHECK(step.recv_peer >= 0 && step.recv_peer < n, "rank ", r, ": ", describe(step));
          auto& queue = fifo[static_cast<std::size_t>(step.recv_peer) * n + r];
          if (queue.empty()) break;
          message = std::move(queue.front());
          queue.pop_front();
          ++delivered;
          if (message.size() != step.count * elem)
            KIZUNA_THROW(ErrorCode::Internal, "rank ", r, " step ", pc[r], " '", describe(step),
                         "' received ", message.size() / elem, " elements from rank ",
                         step.recv_peer, ", expected ", step.count);
        }
        const std::size_t bytes = step.count * elem;
        switch (step.op) {
          case StepOp::Send: break;
          case StepOp::Recv:
          case StepOp::RecvCopySend:
            if (bytes) std::memcpy(at(r, step.dst, step.dst_offset, step.count, step), message.data(), bytes);
            break;
          case StepOp::RecvReduce:
          case StepOp::RecvReduceSend:
            core::reduce_into(at(r, step.dst, step.dst_offset, step.count, step),
                              at(r, step.src, step.src_offset, step.count, step), message.data(),
                              step.count, dtype, op);
            break;
          case StepOp::LocalReduce:
            core::reduce(at(r, step.dst, step.dst_offset, step.count, step),
                         at(r, step.src, step.src_offset, step.count, step), step.count, dtype, op);
            break;
          case StepOp::Copy: {
            unsigned char* dst = at(r, step.dst, step.dst_offset, step.count, step);
            const unsigned char* src = at(r, step.src, step.src_offset, step.count, step);
            if (bytes && dst != src) std::memmove(dst, src, bytes);
            break;
          }
        }
        if (step.sends()) {
          KIZUNA_CHECK(step.send_peer >= 0 && step.send_peer < n, "rank ", r, ": ", describe(step));
          const unsigned char* src =
              at(r, step.send_buffer(), step.send_offset(), step.count, step);
          fifo[static_cast<std::size_t>(r) * n + step.send_peer].emplace_back(src, src + bytes);
        }
        ++pc[r];
        progress = true;
      }
      if (pc[r] < steps.size()) finished = false;
    }
    if (finished) break;
    if (!progress) {
      std::ostringstream blocked;
      for (int r = 0; r < n; ++r) {
        const auto& steps = schedules[r].steps;
        if (pc[r] < steps.size())
          blocked << "\n  rank " << r << " at step " << pc[r] << "/" << steps.size() << ": "
                  << describe(steps[pc[r]]);
      }
      KIZUNA_THROW(ErrorCode::Internal, "deadlock in ", name(schedules[0].request.collective), " (",
                   name(schedules[0].algorithm), ", world ", n, "):", blocked.str());
    }
  }
  for (int from = 0; from < n; ++from)
    for (int to = 0; to < n; ++to)
      if (const auto& q = fifo[static_cast<std::size_t>(from) * n + to]; !q.empty())
        KIZUNA_THROW(ErrorCode::Internal, "rank ", from, " sent ", q.size(),
                     " message(s) to rank ", to, " that were never received");
  return delivered;
}

}  // namespace kizuna::algo
