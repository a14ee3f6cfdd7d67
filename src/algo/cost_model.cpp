#include "algo/cost_model.hpp"

namespace kizuna::algo {
namespace {
int ceil_log2(int n) {
  int s = 0;
  while ((1 << s) < n) ++s;
  return s;
}
int floor_log2(int n) {
  int s = 0;
  while ((2 << s) <= n) ++s;
  return s;
}
}  // namespace

double predicted_us(Collective c, Algorithm a, std::uint64_t bytes, int world,
                    const LinkModel& link) {
  const double n = static_cast<double>(bytes);
  const double N = world;
  const double S = ceil_log2(world);
  const double alpha = link.alpha_us;
  const double beta = link.beta_us_per_byte;
  const double mu = link.message_us;
  const double L = floor_log2(world);
  const double E = (1 << floor_log2(world)) == world ? 0 : 2;
  if (world <= 1) return 0.0;
  switch (c) {
    case Collective::AllReduce:
      if (a == Algorithm::Ring) return 2 * (N - 1) * alpha + 2 * (N - 1) / N * n * beta;
      if (a == Algorithm::OneShot) return alpha + 2 * (N - 2) * mu + 2 * (N - 1) * n * beta;
      if (a == Algorithm::TwoShot) return 2 * alpha + 4 * (N - 2) * mu + 2 * (N - 1) / N * n * beta;
      if (a == Algorithm::Doubling) return (L + E) * alpha + (2 * L + 1.5 * E) * n * beta;
      return 2 * (S + 1) * alpha + 2 * n * beta;
    case Collective::Broadcast:
    case Collective::Reduce:
      if (a == Algorithm::Ring) return (N - 1) * alpha + n * beta;
      return S * alpha + S * n * beta;
    case Collective::AllGather:
    case Collective::ReduceScatter:
      return (N - 1) * alpha + (N - 1) * n * beta;
    case Collective::Barrier:
      return S * alpha;
  }
  return 0.0;
}

Algorithm choose_algorithm(Collective c, std::uint64_t bytes, int world, const LinkModel& link,
                           bool direct) {
  if (c != Collective::AllReduce && c != Collective::Broadcast && c != Collective::Reduce)
    return Algorithm::Ring;
  if (c == Collective::AllReduce && world > 1 && bytes >= link.large_all_reduce_from) return link.large_all_reduce;
  Algorithm best = Algorithm::Ring;
  double best_us = predicted_us(c, Algorithm::Ring, bytes, world, link);
  for (Algorithm a : {Algorithm::Tree, Algorithm::OneShot, Algorithm::TwoShot, Algorithm::Doubling}) {
    const bool is_direct = a == Algorithm::OneShot || a == Algorithm::TwoShot;
    if (is_direct && !(direct && c == Collective::AllReduce)) continue;
    if (a == Algorithm::Doubling && c != Collective::AllReduce) continue;
    const double us = predicted_us(c, a, bytes, world, link);
    if (us < best_us) best = a, best_us = us;
  }
  return best;
}

}  // namespace kizuna::algo
