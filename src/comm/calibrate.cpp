#include "comm/calibrate.hpp"

#include <kizuna/comm.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>

#include "comm/comm_impl.hpp"
#include "core/check.hpp"
#include "core/median.hpp"

namespace kizuna::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kNever = SIZE_MAX;

CommOptions forcing(const CommOptions& base, Candidate c, const std::string& tag) {
  CommOptions o = base;
  o.name = (base.name.empty() ? std::string("kizuna") : base.name) + "/" + tag + "/" + std::string(name(c));
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

// A communicator that forces `c`; the profile of its creation is not
// loaded (each candidate is forced anyway).
std::shared_ptr<Communicator::Impl> force(const CommOptions& base, Candidate c, const std::string& tag) {
  return Communicator::Impl::create(forcing(base, c, tag), false);
}

double slowest(Communicator& comm, double mine) {
  comm.all_reduce(&mine, 1, DataType::Float64, ReduceOp::Max).wait();
  return mine;
}

// One call of what is measured: an in-place float32 sum, waited for.
void sum(Communicator& comm, float* buffer, std::size_t count) {
  comm.all_reduce(buffer, buffer, count, DataType::Float32, ReduceOp::Sum).wait();
}

// This rank's time (us) for `calls` in-place sums, started together.
double time_calls(Communicator& comm, float* buffer, std::size_t count, int calls) {
  comm.barrier().wait();
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) sum(comm, buffer, count);
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
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

void check_sizes(const std::vector<std::uint64_t>& sizes, const char* who) {
  KIZUNA_CHECK_ARG(!sizes.empty(), who, ": no sizes");
  for (std::size_t i = 0; i < sizes.size(); ++i)
    KIZUNA_CHECK_ARG(sizes[i] >= 4 && sizes[i] % 4 == 0 && (i == 0 || sizes[i] > sizes[i - 1]), who,
                     ": sizes must ascend, each a multiple of 4 bytes (float32); ", sizes[i], " is not");
}

}  // namespace

// How many calls fill `per_measurement`, the same on every rank. One call
// timed alone is mostly the ranks' skew as they leave the barrier (several
// microseconds where a small call takes a fraction of one), so the batch
// grows tenfold until it lasts a tenth of the measurement and holds 100
// calls or more (one rank descheduled during a batch of 10 would pass the
// first test alone), or lasts half of it; its mean per call sets the count.
// Never fewer than 3 calls, though a large call alone outlasts the
// measurement: one call's time spreads between rounds by enough to set the
// medians of one route's rounds 10% apart or more, the mean of 3 calls,
// each in a slice of its own, far less (docs/tuning.md#tuner).
int calls_to_fill(Communicator& comm, float* buffer, std::size_t count, std::chrono::microseconds per_measurement) {
  constexpr int kFewestCalls = 3;
  constexpr int kMostCalls = 1'000'000;
  const double budget = static_cast<double>(per_measurement.count());
  for (int batch = 1;; batch *= 10) {
    const double each = slowest(comm, time_calls(comm, buffer, count, batch) / batch);  // alike on every rank
    const double lasted = each * batch;
    if ((lasted >= budget / 10 && batch >= 100) || lasted >= budget / 2 || batch >= kMostCalls / 10)
      return static_cast<int>(
          std::clamp(std::ceil(budget / std::max(each, 0.001)), double{kFewestCalls}, double{kMostCalls}));
  }
}

int calls_in_slice(int calls, int slice) {
  const auto upto = [&](int s) { return static_cast<int>(static_cast<long long>(calls) * s / kRaceSlices); };
  return upto(slice + 1) - upto(slice);
}

std::vector<Forced> forced_communicators(const CommOptions& base, bool symmetric, const std::string& tag) {
  const auto first = force(base, Candidate::Ring, tag);
  std::vector<Forced> out;
  for (Candidate c : candidates_of(*first, symmetric)) {
    auto impl = c == Candidate::Ring ? first : force(base, c, tag);
    out.push_back({c, impl, std::make_shared<Communicator>(impl)});
  }
  return out;
}

std::vector<std::shared_ptr<void>> buffers_of(std::vector<Forced>& ways, std::uint64_t bytes) {
  std::vector<std::shared_ptr<void>> out;
  const auto symmetric = std::find_if(ways.begin(), ways.end(),
                                      [](const Forced& w) { return w.candidate == Candidate::Symmetric; });
  if (symmetric != ways.end()) {
    const std::shared_ptr<Communicator> owner = symmetric->comm;
    for (const Forced& w : ways) {
      const bool mailbox = w.candidate == Candidate::Mailbox;
      out.push_back(owner->allocate_symmetric(mailbox ? std::min<std::uint64_t>(bytes, Mailbox::capacity()) : bytes));
      if (!out.back()) break;  // none to be had here after all
    }
    if (out.size() == ways.size() && out.back()) return out;  // zeros, as a new shared file's pages are
    out.clear();
    std::erase_if(ways, [](const Forced& w) { return w.candidate == Candidate::Symmetric; });
  }
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  KIZUNA_CHECK(p != nullptr, "calibrate: cannot allocate ", bytes, " bytes");
  std::memset(p, 0, bytes);  // zeros: sums stay zero, never denormal
  const std::shared_ptr<void> shared(p, std::free);
  out.assign(ways.size(), shared);
  return out;
}

Placement agreed_placement(const std::vector<Forced>& ways) {
  for (const Forced& w : ways)
    if (w.candidate == Candidate::Staged && w.impl->symmetric) return w.impl->symmetric->agreed_placement();
  return Placement::Unknown;
}

Candidate taken(const Communicator::Impl& impl, std::uint64_t bytes, bool symmetric) {
  Call call;
  call.count = bytes / 4;
  const Buffers buffers = symmetric && impl.symmetric_may_count(call) ? Buffers::Symmetric : Buffers::Host;
  const Placement placement = impl.placement_now();
  const Route route = choose_route({call.kind, call.collective, bytes}, buffers, placement, impl.paths, impl.tuning);
  if (const std::optional<Candidate> c = route_candidate(route)) return *c;
  return schedule_candidate(impl.choose(call, buffers, placement));
}

std::vector<std::vector<std::vector<double>>> race(const std::vector<Entrant>& entrants,
                                                   const std::vector<std::uint64_t>& sizes, int repetitions,
                                                   std::chrono::microseconds per_measurement,
                                                   const std::function<void(const std::string&)>& progress,
                                                   const std::function<std::string()>& after_round,
                                                   const std::function<bool()>& more) {
  check_sizes(sizes, "race");
  KIZUNA_CHECK_ARG(repetitions >= 1, "race: repetitions is ", repetitions, "; at least 1");
  KIZUNA_CHECK_ARG(!entrants.empty(), "race: no entrants");
  const bool printing = entrants.front().comm->rank() == 0 && progress;
  // How many calls fill a measurement, per size and entrant (0: not
  // measured), after a warm-up call.
  std::vector<std::vector<int>> calls(sizes.size(), std::vector<int>(entrants.size(), 0));
  for (std::size_t i = 0; i < sizes.size(); ++i)
    for (std::size_t w = 0; w < entrants.size(); ++w) {
      const Entrant& e = entrants[w];
      if (sizes[i] > e.upto) continue;
      sum(*e.comm, e.buffer, sizes[i] / 4);
      calls[i][w] = calls_to_fill(*e.comm, e.buffer, sizes[i] / 4, per_measurement);
    }
  // Rounds over every size: a size's rounds lie far apart in time, so that
  // a burst of noise (another job, the host moving a CPU) lands on one of
  // them, not on all. Within a round a size's measurements are cut into
  // slices and the entrants take turns slice by slice, so that each
  // entrant's time spans the same stretch of the host's pace as the
  // others': the host changes pace for tenths of a second at a time
  // (docs/performance.md#small-all-reduces-over-tcp-against-open-mpi),
  // about as long as one measurement of every entrant together, so
  // entrants measured one after the other would each meet another pace
  // (docs/tuning.md#tuner). Each slice's entrants run in a shuffled order,
  // the same on every rank (a fixed seed): an entrant runs after a
  // different one each time, so what one leaves behind (caches, threads
  // still polling) does not always slow the same one down.
  std::vector<std::vector<std::vector<double>>> runs(sizes.size(), std::vector<std::vector<double>>(entrants.size()));
  std::mt19937 shuffle(12345);
  std::vector<std::size_t> order(entrants.size());
  for (int round = 0; round < repetitions || (more && more()); ++round) {
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const std::size_t count = sizes[i] / 4;
      std::vector<double> spent(entrants.size(), 0.0);  // this rank's us, over the slices
      for (int slice = 0; slice < kRaceSlices; ++slice) {
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::shuffle(order.begin(), order.end(), shuffle);
        for (const std::size_t w : order) {
          const int in_slice = calls_in_slice(calls[i][w], slice);
          if (in_slice == 0) continue;
          const Entrant& e = entrants[w];
          // A warm-up call first, so that the timed ones find the buffer
          // and the entrant's own memory where its own call of this size
          // leaves them, as in a loop of calls, not where the previous
          // entrant did: also where the slice holds one call (sizes of a
          // millisecond or more), for there the previous entrant decided
          // by 10-30% whether the timed call found its buffer in the
          // caches (docs/tuning.md#tuner).
          sum(*e.comm, e.buffer, count);
          spent[w] += time_calls(*e.comm, e.buffer, count, in_slice);
        }
      }
      for (std::size_t w = 0; w < entrants.size(); ++w)
        if (calls[i][w] > 0) runs[i][w].push_back(slowest(*entrants[w].comm, spent[w] / calls[i][w]));
    }
    const std::string note = after_round ? after_round() : "";
    if (printing)
      progress("round " + std::to_string(round + 1) +
               (round < repetitions ? " of " + std::to_string(repetitions) : std::string()) + " done" +
               (note.empty() ? "" : " (" + note + ")"));
  }
  return runs;
}

bool placements_short(const std::vector<Placement>& rounds, int repetitions) {
  const auto near = std::count(rounds.begin(), rounds.end(), Placement::Near);
  const auto far = std::count(rounds.begin(), rounds.end(), Placement::Far);
  return near + far > 0 && std::min(near, far) < repetitions;
}

std::vector<ProfileSection> sections_from(const ProfileSection& blank, const std::vector<std::uint64_t>& sizes,
                                         const std::vector<std::vector<std::vector<double>>>& runs,
                                         const std::vector<Placement>& rounds) {
  const bool near = std::count(rounds.begin(), rounds.end(), Placement::Near) > 0;
  const bool far = std::count(rounds.begin(), rounds.end(), Placement::Far) > 0;
  // One section of the rounds `kept` keeps.
  auto section_of = [&](MeasuredPlacement placement, auto&& kept) {
    ProfileSection section = blank;
    section.placement = placement;
    section.rows.clear();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      ProfileSection::Row row;
      row.bytes = sizes[i];
      for (const std::vector<double>& times : runs[i]) {
        std::vector<double> mine;
        for (std::size_t k = 0; k < times.size(); ++k)
          if (kept(k)) mine.push_back(times[k]);
        row.us.push_back(mine.empty() ? std::nan("") : core::median(mine));
      }
      section.rows.push_back(std::move(row));
    }
    return section;
  };
  if (near && far)
    return {section_of(MeasuredPlacement::Near, [&](std::size_t k) { return rounds.at(k) == Placement::Near; }),
            section_of(MeasuredPlacement::Far, [&](std::size_t k) { return rounds.at(k) == Placement::Far; })};
  const MeasuredPlacement all = near ? MeasuredPlacement::Near : far ? MeasuredPlacement::Far : MeasuredPlacement::Unknown;
  return {section_of(all, [](std::size_t) { return true; })};
}

std::vector<ProfileSection> faster_of(std::vector<ProfileSection> a, const std::vector<ProfileSection>& b) {
  KIZUNA_CHECK(a.size() == b.size(), "faster_of: ", a.size(), " sections against ", b.size());
  for (std::size_t s = 0; s < a.size(); ++s) {
    KIZUNA_CHECK(a[s].rows.size() == b[s].rows.size() && a[s].placement == b[s].placement,
                 "faster_of: sections of other sizes or placements");
    for (std::size_t i = 0; i < a[s].rows.size(); ++i) {
      std::vector<double>& mine = a[s].rows[i].us;
      const std::vector<double>& theirs = b[s].rows[i].us;
      KIZUNA_CHECK(mine.size() == theirs.size() && a[s].rows[i].bytes == b[s].rows[i].bytes,
                   "faster_of: rows of other sizes or candidates");
      for (std::size_t c = 0; c < mine.size(); ++c)
        if (!std::isnan(theirs[c]) && (std::isnan(mine[c]) || theirs[c] < mine[c])) mine[c] = theirs[c];
    }
  }
  return a;
}

std::vector<ProfileSection> calibrate(const CommOptions& base, const CalibrateOptions& o) {
  check_sizes(o.sizes, "calibrate");
  KIZUNA_CHECK_ARG(o.repetitions >= 1, "calibrate: repetitions is ", o.repetitions, "; at least 1");
  std::vector<Forced> ways = forced_communicators(base, o.symmetric, "calibrate");
  // The twins: the same candidates again, each on a communicator and a
  // buffer of its own, for the sizes up to twins_upto. A call of a few
  // microseconds is a few cache lines passed between the CPUs, and where
  // one communicator's lines happen to pass slowly, they do so in every
  // round: a median of rounds cannot see it, a second communicator can
  // (docs/tuning.md#tuner).
  const auto twin_sizes = static_cast<std::size_t>(
      std::upper_bound(o.sizes.begin(), o.sizes.end(), o.twins_upto) - o.sizes.begin());
  std::vector<Forced> twins;
  if (twin_sizes > 0) twins = forced_communicators(base, o.symmetric, "calibrate/twin");
  ProfileSection blank;
  blank.key = ways.front().impl->profile_key;
  blank.key.symmetric = o.symmetric;

  const std::vector<std::shared_ptr<void>> buffers = buffers_of(ways, o.sizes.back());
  const std::vector<std::shared_ptr<void>> twin_buffers =
      twins.empty() ? std::vector<std::shared_ptr<void>>{} : buffers_of(twins, o.sizes[twin_sizes - 1]);
  for (const Forced& w : ways) blank.candidates.push_back(w.candidate);
  std::vector<Entrant> entrants;
  for (std::size_t w = 0; w < ways.size(); ++w)
    entrants.push_back({ways[w].comm.get(), static_cast<float*>(buffers[w].get()),
                        ways[w].candidate == Candidate::Mailbox ? Mailbox::capacity() : UINT64_MAX});
  // twin_of[w]: the entrant of ways[w]'s twin; none where buffers_of left
  // a twin out (no symmetric memory for it).
  std::vector<std::optional<std::size_t>> twin_of(ways.size());
  for (std::size_t t = 0; t < twins.size(); ++t)
    for (std::size_t w = 0; w < ways.size(); ++w)
      if (ways[w].candidate == twins[t].candidate) {
        twin_of[w] = entrants.size();
        entrants.push_back({twins[t].comm.get(), static_cast<float*>(twin_buffers[t].get()),
                            std::min(entrants[w].upto, o.sizes[twin_sizes - 1])});
      }
  // Where the CPUs were, round by round.
  std::vector<Placement> rounds;
  auto placement_seen = [&]() -> std::string {
    rounds.push_back(agreed_placement(ways));
    return rounds.back() == Placement::Unknown ? "" : "CPUs " + std::string(name(rounds.back()));
  };
  // More rounds while a placement lacks rounds, for up to placement_wait
  // after the first ones, by the slowest rank's clock so that every rank
  // stops after the same round.
  std::optional<Clock::time_point> waiting_since;
  auto more = [&] {
    if (o.placement_wait.count() <= 0 || !placements_short(rounds, o.repetitions)) return false;
    if (!waiting_since) waiting_since = Clock::now();
    const double waited = std::chrono::duration<double, std::milli>(Clock::now() - *waiting_since).count();
    return slowest(*ways.front().comm, waited) < static_cast<double>(o.placement_wait.count());
  };
  const auto runs = race(entrants, o.sizes, o.repetitions, o.per_measurement, o.progress, placement_seen, more);
  // [size][candidate] -> rounds, of the first communicators and of the twins.
  std::vector<std::vector<std::vector<double>>> firsts(o.sizes.size()), seconds(o.sizes.size());
  for (std::size_t i = 0; i < o.sizes.size(); ++i)
    for (std::size_t w = 0; w < ways.size(); ++w) {
      firsts[i].push_back(runs[i][w]);
      seconds[i].push_back(twin_of[w] ? runs[i][*twin_of[w]] : std::vector<double>{});
    }
  const std::vector<ProfileSection> first = sections_from(blank, o.sizes, firsts, rounds);
  const std::vector<ProfileSection> twin = sections_from(blank, o.sizes, seconds, rounds);

  // Each candidate's time, and its twin's after a slash where it has one.
  if (ways.front().comm->rank() == 0 && o.progress)
    for (std::size_t s = 0; s < first.size(); ++s)
      for (std::size_t i = 0; i < first[s].rows.size(); ++i) {
        const ProfileSection::Row& row = first[s].rows[i];
        std::string line = std::to_string(row.bytes) + " B";
        if (first[s].placement != MeasuredPlacement::Unknown)
          line += std::string(", CPUs ") + std::string(name(first[s].placement));
        line += ":";
        for (std::size_t w = 0; w < ways.size(); ++w) {
          if (std::isnan(row.us[w])) continue;
          char text[96];
          std::snprintf(text, sizeof text, " %s %.4g", std::string(name(ways[w].candidate)).c_str(), row.us[w]);
          line += text;
          const double second = twin[s].rows[i].us[w];
          if (!std::isnan(second)) std::snprintf(text, sizeof text, "/%.4g", second), line += text;
        }
        o.progress(line + " us");
      }
  return faster_of(first, twin);
}

}  // namespace kizuna::comm
