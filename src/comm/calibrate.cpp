#include "comm/calibrate.hpp"

#include <kizuna/comm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/comm_impl.hpp"
#include "core/check.hpp"

namespace kizuna::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kNever = SIZE_MAX;

// One candidate: a communicator that forces it.
struct Way {
  Candidate candidate = Candidate::Ring;
  std::shared_ptr<Communicator::Impl> impl;
  std::shared_ptr<Communicator> comm;
};

CommOptions forcing(const CommOptions& base, Candidate c) {
  CommOptions o = base;
  o.name = (base.name.empty() ? std::string("kizuna") : base.name) + "/calibrate/" + std::string(name(c));
  switch (c) {
    case Candidate::Mailbox:
      o.mailbox_upto = Mailbox::capacity(), o.staged_from = kNever, o.symmetric_from = kNever;
      break;
    case Candidate::Staged: o.mailbox_upto = 0, o.staged_from = 0, o.symmetric_from = kNever; break;
    case Candidate::Symmetric: o.mailbox_upto = 0, o.staged_from = kNever, o.symmetric_from = 0; break;
    default: o.algorithm = algorithm_of(c); break;
  }
  return o;
}

Way make_way(const CommOptions& base, Candidate c) {
  Way w;
  w.candidate = c;
  w.impl = Communicator::Impl::create(forcing(base, c), false);
  w.comm = std::make_shared<Communicator>(w.impl);
  return w;
}

double slowest(Communicator& comm, double mine) {
  comm.all_reduce(&mine, 1, DataType::Float64, ReduceOp::Max).wait();
  return mine;
}

// One call of what is measured: an in-place float32 sum, waited for.
void sum(Communicator& comm, float* buffer, std::size_t count) {
  comm.all_reduce(buffer, buffer, count, DataType::Float32, ReduceOp::Sum).wait();
}

// The slowest rank's mean time per call of `calls` in-place sums.
double time_calls(Communicator& comm, float* buffer, std::size_t count, int calls) {
  comm.barrier().wait();
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) sum(comm, buffer, count);
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / calls;
  return slowest(comm, us);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The candidates that apply on the communicator `first` describes; the
// same on every rank, as what they read is.
std::vector<Candidate> candidates_of(const Communicator::Impl& first, bool symmetric) {
  std::vector<Candidate> out;
  if (first.paths.mailbox) out.push_back(Candidate::Mailbox);
  out.push_back(Candidate::Ring);
  out.push_back(Candidate::Tree);
  if (first.tuning.single_host) out.push_back(Candidate::OneShot), out.push_back(Candidate::TwoShot);
  out.push_back(Candidate::Doubling);
  if (first.paths.staging) out.push_back(Candidate::Staged);
  if (symmetric && first.symmetric) out.push_back(Candidate::Symmetric);
  return out;
}

}  // namespace

ProfileSection calibrate(const CommOptions& base, const CalibrateOptions& o) {
  KIZUNA_CHECK_ARG(!o.sizes.empty(), "calibrate: no sizes");
  KIZUNA_CHECK_ARG(o.repetitions >= 1, "calibrate: repetitions is ", o.repetitions, "; at least 1");
  for (std::size_t i = 0; i < o.sizes.size(); ++i)
    KIZUNA_CHECK_ARG(o.sizes[i] >= 4 && o.sizes[i] % 4 == 0 && (i == 0 || o.sizes[i] > o.sizes[i - 1]),
                     "calibrate: sizes must ascend, each a multiple of 4 bytes (float32); ", o.sizes[i], " is not");
  std::vector<Way> ways;
  ways.push_back(make_way(base, Candidate::Ring));
  const Communicator::Impl& first = *ways.front().impl;
  ProfileSection section;
  section.key = first.profile_key;
  section.key.symmetric = o.symmetric;
  section.candidates = candidates_of(first, o.symmetric);
  for (Candidate c : section.candidates)
    if (c != Candidate::Ring) ways.push_back(make_way(base, c));
  std::sort(ways.begin(), ways.end(), [](const Way& a, const Way& b) { return a.candidate < b.candidate; });

  // One buffer for every candidate: symmetric memory of the symmetric
  // route's communicator, or private memory.
  const std::uint64_t largest = o.sizes.back();
  std::shared_ptr<void> memory;
  for (Way& w : ways)
    if (w.candidate == Candidate::Symmetric) memory = w.comm->allocate_symmetric(largest);
  if (!memory && o.symmetric) {  // none to be had here: no symmetric candidate either
    std::erase_if(ways, [](const Way& w) { return w.candidate == Candidate::Symmetric; });
    std::erase(section.candidates, Candidate::Symmetric);
  }
  if (!memory) {
    void* p = std::aligned_alloc(4096, (largest + 4095) / 4096 * 4096);
    KIZUNA_CHECK(p != nullptr, "calibrate: cannot allocate ", largest, " bytes");
    std::memset(p, 0, largest);  // zeros: sums stay zero, never denormal
    memory.reset(p, std::free);
  }
  auto* buffer = static_cast<float*>(memory.get());
  const bool printing = first.rank == 0 && o.progress;

  // How many calls fill a measurement, per size and candidate (0: not
  // measured), from the slowest rank's warm-up call.
  std::vector<std::vector<int>> calls(o.sizes.size(), std::vector<int>(ways.size(), 0));
  for (std::size_t i = 0; i < o.sizes.size(); ++i)
    for (std::size_t w = 0; w < ways.size(); ++w) {
      if (ways[w].candidate == Candidate::Mailbox && o.sizes[i] > Mailbox::capacity()) continue;
      Communicator& comm = *ways[w].comm;
      sum(comm, buffer, o.sizes[i] / 4);  // warm-up
      const double once = time_calls(comm, buffer, o.sizes[i] / 4, 1);
      calls[i][w] = static_cast<int>(std::clamp(std::ceil(o.per_measurement.count() / std::max(once, 0.01)), 1.0, 1e4));
    }
  // Rounds over every size, each round's candidates in another order: a
  // size's rounds lie far apart in time, so that a burst of noise (another
  // job, the host moving a CPU) lands on one of them, not on all.
  std::vector<std::vector<std::vector<double>>> runs(o.sizes.size(), std::vector<std::vector<double>>(ways.size()));
  for (int round = 0; round < o.repetitions; ++round) {
    for (std::size_t i = 0; i < o.sizes.size(); ++i)
      for (std::size_t j = 0; j < ways.size(); ++j) {
        const std::size_t w = (j + round) % ways.size();
        if (calls[i][w] == 0) continue;
        Communicator& comm = *ways[w].comm;
        const std::size_t count = o.sizes[i] / 4;
        // A warm-up call where a measurement holds several, so that the
        // timed ones find the buffer where the previous size left it.
        if (calls[i][w] > 1) sum(comm, buffer, count);
        runs[i][w].push_back(time_calls(comm, buffer, count, calls[i][w]));
      }
    if (printing) o.progress("round " + std::to_string(round + 1) + " of " + std::to_string(o.repetitions) + " done");
  }
  for (std::size_t i = 0; i < o.sizes.size(); ++i) {
    ProfileSection::Row row;
    row.bytes = o.sizes[i];
    std::string line = std::to_string(row.bytes) + " B:";
    for (std::size_t w = 0; w < ways.size(); ++w) {
      row.us.push_back(runs[i][w].empty() ? std::nan("") : median(runs[i][w]));
      if (runs[i][w].empty()) continue;
      char text[64];
      std::snprintf(text, sizeof text, " %s %.4g", std::string(name(ways[w].candidate)).c_str(), row.us.back());
      line += text;
    }
    section.rows.push_back(std::move(row));
    if (printing) o.progress(line + " us");
  }
  return section;
}

}  // namespace kizuna::comm
