// One-shot all-reduce, for small buffers: one round of messages instead of
// 2(N-1) (ring) or 2 log N (tree).
//
// Every rank sends its whole input to every other rank, then folds all N
// buffers together itself. The fold runs in rank order on every rank,
//     out = ((x0 op x1) op x2) op ... op x(N-1),
// so every rank computes bit-identical floating-point results (a ring or
// tree also guarantees that: each chunk is reduced once and then copied).
//
//   N = 3, rank 1:  copy in -> scratch; send scratch to 0 and 2;
//                   recv x0 -> out; out op= scratch (x1); recv_reduce x2
//
// The own contribution goes through scratch first, so the schedule is also
// right in place (out aliasing in, overwritten by x0).
#include "algo/builder.hpp"

namespace kizuna::algo {

void one_shot_all_reduce(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  const int r = req.rank;
  const std::uint64_t count = req.count;
  out.input_count = out.output_count = count;
  StepWriter w(out.steps);
  if (count == 0) return;
  out.scratch_count = count;
  w.copy(Buffer::Input, 0, Buffer::Scratch, 0, count);
  for (int k = 1; k < n; ++k) w.send(mod(r + k, n), Buffer::Scratch, 0, count);
  for (int p = 0; p < n; ++p) {
    if (p == 0) {
      if (r == 0) w.copy(Buffer::Scratch, 0, Buffer::Output, 0, count);
      else w.recv(0, Buffer::Output, 0, count);
    } else if (p == r) {
      w.local_reduce(Buffer::Scratch, 0, Buffer::Output, 0, count);
    } else {
      w.recv_reduce(p, Buffer::Output, 0, Buffer::Output, 0, count);
    }
  }
}

}  // namespace kizuna::algo
