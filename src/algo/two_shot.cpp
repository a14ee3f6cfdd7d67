// Two-shot all-reduce: a reduce-scatter and an all-gather, each done in one
// round of direct messages instead of N-1 ring steps.
//
// The buffer is cut into N chunks, chunk q owned by rank q (as in the ring).
//
//   round 1  every rank sends chunk q of its input to rank q, for each q it
//            is not, and folds the N-1 pieces it receives into its own:
//              out[C_r] = (((x_r op x_(r-1)) op x_(r-2)) ... op x_(r+1))
//   round 2  every rank sends its finished chunk to every other rank and
//            receives theirs into place. Each slice of the chunk leaves
//            as soon as it is folded, so the rounds overlap.
//
// Every link carries 2(N-1)/N of the data in total per rank, as in the ring,
// but a rank's work depends on its peers only twice per call instead of
// 2(N-1) times in a chain. That is what pays where ranks outnumber cores: a
// ring step waits for its one predecessor to be scheduled, and each of the
// 2(N-1) steps can cost a context switch; here a rank waits for its
// peers at two points and whatever has arrived by then is all used. Each chunk
// is reduced once, by its owner, and then copied, so every rank ends with
// the same bits.
//
//   N = 3, rank 1 (chunks a b c):
//     send c to 2; send a to 0;
//     recv_reduce b from 0 (in b -> out b); recv_reduce b from 2 (out b);
//     send b to 2; send b to 0;          (slice by slice when b is sliced)
//     recv a from 0; recv c from 2
//
// In place (out aliasing in) the round-2 receives overwrite chunks that
// round 1 sent; the executor waits for such a send before overwriting its
// data (algo/schedule.hpp), and the peer cannot have sent its finished chunk
// before receiving ours anyway.
#include "algo/builder.hpp"

namespace kizuna::algo {

void two_shot_all_reduce(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  const int r = req.rank;
  out.input_count = out.output_count = req.count;
  StepWriter w(out.steps);
  const std::uint64_t se = slice_elems(req);
  const std::uint64_t align = align_elems(req);
  const Range own = chunk(req.count, n, r, align);
  // Round 1: chunk q of the input to its owner, nearest peers first.
  for (int k = 1; k < n; ++k) {
    const int q = mod(r + k, n);
    const Range c = chunk(req.count, n, q, align);
    for (std::uint64_t s = 0; s < slice_count(c.count, se); ++s) {
      const Range part = slice(c, se, s);
      w.send(q, Buffer::Input, part.offset, part.count);
    }
  }
  // Fold the peers' pieces of our chunk slice by slice, each slice in the
  // order its pieces were sent to us (rank r-1 sent first to us, as its
  // nearest peer), and send each finished slice to everyone at once
  // (round 2) while the next one is folded: the rounds overlap, and the
  // slice is still in cache when it leaves.
  for (std::uint64_t s = 0; s < slice_count(own.count, se); ++s) {
    const Range part = slice(own, se, s);
    for (int k = 1; k < n; ++k) {
      const Buffer src = k == 1 ? Buffer::Input : Buffer::Output;
      w.recv_reduce(mod(r - k, n), src, part.offset, Buffer::Output, part.offset, part.count);
    }
    for (int k = 1; k < n; ++k) w.send(mod(r + k, n), Buffer::Output, part.offset, part.count);
  }
  // Everyone's finished chunk into place.
  for (int k = 1; k < n; ++k) {
    const int from = mod(r - k, n);
    const Range c = chunk(req.count, n, from, align);
    for (std::uint64_t s = 0; s < slice_count(c.count, se); ++s) {
      const Range part = slice(c, se, s);
      w.recv(from, Buffer::Output, part.offset, part.count);
    }
  }
}

}  // namespace kizuna::algo
