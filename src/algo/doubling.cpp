// Recursive-doubling all-reduce, for small buffers: log2 N rounds of one
// message each way, where one-shot sends N-1 messages in one round and the
// ring takes 2(N-1) rounds.
//
// In round k a rank swaps its whole partial result with the rank whose
// number differs in bit k, and both fold the two the same way round,
//     lower rank's value op higher rank's value,
// so after round k the 2^(k+1) ranks of each block hold bit-identical
// values, and after the last every rank holds the same result.
//
//   N = 4:  round 0: 0 <-> 1, 2 <-> 3    round 1: 0 <-> 2, 1 <-> 3
//
// When N is not a power of two, with P the largest power of two below it
// and R = N - P, the first 2R ranks pair up before and after: even rank r
// sends its input to r+1 and waits; odd rank r folds it in and stands for
// both in the rounds among P ranks (ranks 2R.. stand for themselves), then
// sends r-1 the result. That costs two rounds more.
//
// Each round sends a copy of the rank's value from scratch, never the
// output itself: a receive into a buffer waits until every send out of it
// has gone (comm/executor), and a send of more than the transport holds
// goes only as fast as the peer takes it, so two partners each sending out
// of the buffer they then receive into would wait for each other. The copy
// also keeps the rank's own value for the higher rank of a pair, which
// folds it after its partner's.
#include "algo/builder.hpp"

namespace kizuna::algo {

void doubling_all_reduce(const ScheduleRequest& req, RankSchedule& out) {
  const int n = req.world_size;
  const int r = req.rank;
  const std::uint64_t count = req.count;
  out.input_count = out.output_count = count;
  StepWriter w(out.steps);
  if (count == 0) return;
  out.scratch_count = count;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int paired = 2 * (n - p);  // ranks [0, paired) pair up around the rounds

  if (r < paired && r % 2 == 0) {
    // Stands aside: its input goes to r+1, the result comes back.
    w.send(r + 1, Buffer::Input, 0, count);
    w.recv(r + 1, Buffer::Output, 0, count);
    return;
  }
  w.copy(Buffer::Input, 0, Buffer::Output, 0, count);
  if (r < paired) {
    // Output = the partner's input folded before ours.
    w.copy(Buffer::Output, 0, Buffer::Scratch, 0, count);
    w.recv(r - 1, Buffer::Output, 0, count);
    w.local_reduce(Buffer::Scratch, 0, Buffer::Output, 0, count);
  }

  // Rank numbers among the P ranks that take part in the rounds.
  const int v = r < paired ? r / 2 : r - paired / 2;
  const auto world_rank = [&](int vr) { return vr < paired / 2 ? 2 * vr + 1 : vr + paired / 2; };
  for (int bit = 1; bit < p; bit <<= 1) {
    const int partner = world_rank(v ^ bit);
    w.copy(Buffer::Output, 0, Buffer::Scratch, 0, count);
    w.send(partner, Buffer::Scratch, 0, count);
    if (partner > r) {
      w.recv_reduce(partner, Buffer::Output, 0, Buffer::Output, 0, count);
    } else {
      w.recv(partner, Buffer::Output, 0, count);
      w.local_reduce(Buffer::Scratch, 0, Buffer::Output, 0, count);
    }
  }

  if (r < paired) w.send(r - 1, Buffer::Output, 0, count);
}

}  // namespace kizuna::algo
