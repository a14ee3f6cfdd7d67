// Ring schedules: all-reduce, all-gather and reduce-scatter.
//
// Ranks form a ring r -> r+1 (mod N). The buffer is cut into N chunks and
// every chunk into slices; each rank talks only to its two neighbours, and
// every link carries 2(N-1)/N of the data, which is optimal for bandwidth.
//
// All-reduce, N = 4, chunks a b c d, one line per step ("primitive" p);
// rank r works on chunk (r - p) mod N at step p:
//
//        rank 0         rank 1         rank 2         rank 3
//   p=0  send a         send b         send c         send d          reduce-scatter:
//   p=1  rrs d (+3)     rrs a (+0)     rrs b (+1)     rrs c (+2)      recv_reduce_send
//   p=2  rrs c          rrs d          rrs a          rrs b
//   p=3  rrs b*         rrs c*         rrs d*         rrs a*          * fully reduced here,
//   p=4  rcs a          rcs b          rcs c          rcs d             sent on at once
//   p=5  rcs d          rcs a          rcs b          rcs c           all-gather:
//   p=6  recv c         recv d         recv a         recv b          recv_copy_send, recv
//
// Every step is repeated for each slice of its chunk before the next step
// starts; since sends do not wait, slice k of step p travels while slice
// k+1 is being reduced, and the ring runs as a pipeline.
//
// All-gather is the second half alone (rank r starts by sending its own
// chunk), reduce-scatter the first half with the chunk indices shifted by one
// so that rank r ends owning chunk r.
#include "algo/builder.hpp"

namespace kizuna::algo {

void ring_all_reduce(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  const int r = req.rank;
  out.input_count = out.output_count = req.count;
  StepWriter w(out.steps);
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);
  const std::uint64_t se = slice_elems(req);
  for (int p = 0; p <= 2 * n - 2; ++p) {
    const Range c = chunk(req.count, n, mod(r - p, n), align_elems(req));
    for (std::uint64_t k = 0; k < slice_count(c.count, se); ++k) {
      const Range s = slice(c, se, k);
      if (p == 0) {
        // step 0: push own chunk to next
        w.send(next, Buffer::Input, s.offset, s.count);
      } else if (p <= n - 1) {
        // reduce-scatter: fold the incoming partial sum into our input, pass it on
        w.recv_reduce_send(prev, next, Buffer::Input, s.offset, Buffer::Output, s.offset, s.count);
      } else if (p <= 2 * n - 3) {
        // all-gather: keep the finished chunk and forward it
        w.recv_copy_send(prev, next, Buffer::Output, s.offset, s.count);
      } else {
        // last step: the chunk our next neighbour finished
        w.recv(prev, Buffer::Output, s.offset, s.count);
      }
    }
  }
}

void ring_all_gather(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  const int r = req.rank;
  const std::uint64_t count = req.count;
  const std::uint64_t stride = block_stride(req);
  out.input_count = count;
  out.output_count = stride * (n - 1) + count;
  StepWriter w(out.steps);
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);
  const std::uint64_t se = slice_elems(req);
  for (std::uint64_t k = 0; k < slice_count(count, se); ++k) {
    const Range s = slice({0, count}, se, k);
    // step 0: send our block straight from the input and place it in the output
    if (n > 1) w.send(next, Buffer::Input, s.offset, s.count);
    w.copy(Buffer::Input, s.offset, Buffer::Output, r * stride + s.offset, s.count);
  }
  for (int p = 1; p <= n - 1; ++p) {
    const std::uint64_t base = static_cast<std::uint64_t>(mod(r - p, n)) * stride;
    for (std::uint64_t k = 0; k < slice_count(count, se); ++k) {
      const Range s = slice({base, count}, se, k);
      if (p < n - 1) w.recv_copy_send(prev, next, Buffer::Output, s.offset, s.count);
      else w.recv(prev, Buffer::Output, s.offset, s.count);
    }
  }
}

void ring_reduce_scatter(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  const int r = req.rank;
  const std::uint64_t count = req.count;
  const std::uint64_t stride = block_stride(req);
  out.input_count = stride * (n - 1) + count;
  out.output_count = count;
  StepWriter w(out.steps);
  if (n == 1) {
    w.copy(Buffer::Input, 0, Buffer::Output, 0, count);
    return;
  }
  // Partial sums in flight alternate between two scratch blocks; the
  // executor waits for a block's previous send before reusing it.
  out.scratch_count = 2 * count;
  const int next = mod(r + 1, n);
  const int prev = mod(r - 1, n);
  const std::uint64_t se = slice_elems(req);
  for (int p = 0; p <= n - 1; ++p) {
    // rank r handles block (r - p - 1) at step p and ends with block r
    const std::uint64_t base = static_cast<std::uint64_t>(mod(r - p - 1, n)) * stride;
    const std::uint64_t scratch = static_cast<std::uint64_t>(p % 2) * count;
    for (std::uint64_t k = 0; k < slice_count(count, se); ++k) {
      const Range s = slice({0, count}, se, k);
      if (p == 0)
        w.send(next, Buffer::Input, base + s.offset, s.count);
      else if (p < n - 1)
        w.recv_reduce_send(prev, next, Buffer::Input, base + s.offset, Buffer::Scratch,
                           scratch + s.offset, s.count);
      else
        w.recv_reduce(prev, Buffer::Input, base + s.offset, Buffer::Output, s.offset, s.count);
    }
  }
}

}  // namespace kizuna::algo
