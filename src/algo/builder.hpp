// algo/builder.hpp: what every schedule generator shares: cutting a buffer
// into chunks and slices, and appending steps without repeating the Step
// fields each time. Internal to algo/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "algo/schedule.hpp"

namespace kizuna::algo {

struct Range {
  std::uint64_t offset = 0;
  std::uint64_t count = 0;
};

// Chunk `index` of `parts` equal chunks of [0, count). Chunk sizes are
// rounded up to `align` elements so chunk boundaries stay cache-line
// aligned; the trailing chunks of a small buffer may therefore be empty.
inline Range chunk(std::uint64_t count, std::uint64_t parts, std::uint64_t index,
                   std::uint64_t align) {
  std::uint64_t size = (count + parts - 1) / parts;
  size = (size + align - 1) / align * align;
  const std::uint64_t begin = std::min(count, index * size);
  const std::uint64_t end = std::min(count, begin + size);
  return {begin, end - begin};
}

inline std::uint64_t slice_count(std::uint64_t count, std::uint64_t slice_elems) {
  return (count + slice_elems - 1) / slice_elems;
}

// Slice `k` of a range cut into pieces of `slice_elems`.
inline Range slice(Range r, std::uint64_t slice_elems, std::uint64_t k) {
  const std::uint64_t begin = k * slice_elems;
  return {r.offset + begin, std::min(slice_elems, r.count - begin)};
}

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Appends steps to a rank's list. Offsets are elements.
class StepWriter {
 public:
  explicit StepWriter(std::vector<Step>& steps) : steps_(steps) {}

  void send(int to, Buffer src, std::uint64_t offset, std::uint64_t count) {
    push({StepOp::Send, src, src, -1, to, offset, offset, count});
  }
  void recv(int from, Buffer dst, std::uint64_t offset, std::uint64_t count) {
    push({StepOp::Recv, dst, dst, from, -1, offset, offset, count});
  }
  void recv_reduce(int from, Buffer src, std::uint64_t src_offset, Buffer dst,
                   std::uint64_t dst_offset, std::uint64_t count) {
    push({StepOp::RecvReduce, src, dst, from, -1, src_offset, dst_offset, count});
  }
  void recv_reduce_send(int from, int to, Buffer src, std::uint64_t src_offset, Buffer dst,
                        std::uint64_t dst_offset, std::uint64_t count) {
    push({StepOp::RecvReduceSend, src, dst, from, to, src_offset, dst_offset, count});
  }
  void recv_copy_send(int from, int to, Buffer dst, std::uint64_t offset, std::uint64_t count) {
    push({StepOp::RecvCopySend, dst, dst, from, to, offset, offset, count});
  }
  void copy(Buffer src, std::uint64_t src_offset, Buffer dst, std::uint64_t dst_offset,
            std::uint64_t count) {
    push({StepOp::Copy, src, dst, -1, -1, src_offset, dst_offset, count});
  }
  void local_reduce(Buffer src, std::uint64_t src_offset, Buffer dst, std::uint64_t dst_offset,
                    std::uint64_t count) {
    push({StepOp::LocalReduce, src, dst, -1, -1, src_offset, dst_offset, count});
  }

 private:
  void push(Step s) { steps_.push_back(s); }
  std::vector<Step>& steps_;
};

// Generators, one per algorithm family (ring.cpp, tree.cpp, rooted.cpp,
// barrier.cpp). Each fills `out.steps` and the buffer sizes. The all-reduce
// ones take worlds of two ranks or more: make_schedule() copies a lone
// rank's input itself.
void ring_all_reduce(const ScheduleRequest& req, RankSchedule& out);
void ring_all_gather(const ScheduleRequest& req, RankSchedule& out);
void ring_reduce_scatter(const ScheduleRequest& req, RankSchedule& out);
void tree_all_reduce(const ScheduleRequest& req, RankSchedule& out);
void chain_broadcast(const ScheduleRequest& req, RankSchedule& out);
void chain_reduce(const ScheduleRequest& req, RankSchedule& out);
void binomial_broadcast(const ScheduleRequest& req, RankSchedule& out);
void binomial_reduce(const ScheduleRequest& req, RankSchedule& out);
void dissemination_barrier(const ScheduleRequest& req, RankSchedule& out);
void one_shot_all_reduce(const ScheduleRequest& req, RankSchedule& out);
void two_shot_all_reduce(const ScheduleRequest& req, RankSchedule& out);
void doubling_all_reduce(const ScheduleRequest& req, RankSchedule& out);
void hierarchical_all_reduce(const ScheduleRequest& req, RankSchedule& out);

// Pipelining unit and chunk alignment, in elements.
inline std::uint64_t slice_elems(const ScheduleRequest& req) {
  return std::max<std::uint64_t>(1, req.slice_bytes / req.elem_size);
}
inline std::uint64_t align_elems(const ScheduleRequest& req) {
  return std::max<std::uint64_t>(1, 64 / req.elem_size);
}
// Elements from one rank's block of a gathered buffer to the next.
inline std::uint64_t block_stride(const ScheduleRequest& req) {
  return req.block_stride == 0 ? req.count : req.block_stride;
}

}  // namespace kizuna::algo
