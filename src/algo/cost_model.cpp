#include "algo/cost_model.hpp"

namespace kizuna::algo {
namespace {
int ceil_log2(int n) {
  int s = 0;
  while ((1 << s) < n) ++s;
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
  if (world <= 1) return 0.0;
  switch (c) {
    case Collective::AllReduce:
      if (a == Algorithm::Ring) return 2 * (N - 1) * alpha + 2 * (N - 1) / N * n * beta;
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

Algorithm choose_algorithm(Collective c, std::uint64_t bytes, int world, const LinkModel& link) {
  if (c != Collective::AllReduce && c != Collective::Broadcast && c != Collective::Reduce)
    return Algorithm::Ring;
  return predicted_us(c, Algorithm::Tree, bytes, world, link) <
                 predicted_us(c, Algorithm::Ring, bytes, world, link)
             ? Algorithm::Tree
             : Algorithm::Ring;
}

}  // namespace kizuna::algo
