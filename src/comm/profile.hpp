// comm/profile.hpp: a tuning profile, what `kizuna-perf --calibrate` measured
// on a machine, and the decisions made from it.
//
// A profile holds sections, one per kind of communicator it was measured
// on (ProfileKey: ranks, nodes, ranks per node, shared memory or TCP,
// private or symmetric buffers). A section is a table: for each size it
// measured, the time of one all-reduce (float32, sum, in place; the median
// of its repetitions) by each candidate, the ways an all-reduce can go:
// the mailboxes, a schedule of one algorithm through the links, the staged
// route, the symmetric route (comm/route.hpp).
//
// The decision is the measurement: at each measured size, the fastest
// candidate; between two measured sizes the boundary lies at their
// geometric mean; below the first and above the last, their choice holds
// (decide()). The alpha-beta terms of the cost model (algo/cost_model.hpp)
// are fitted to the schedules' times (fit_link()), for what the table does
// not cover: broadcast and reduce, and device calls' parts.
//
// The text form, which kizuna-perf writes and KIZUNA_TUNING_FILE loads:
//
//   kizuna-tuning 1
//   section world=2 nodes=1 local=2 transport=shm buffers=private placement=near
//   candidates mailbox ring tree oneshot twoshot doubling staged
//   8 0.31 0.80 0.79 0.66 0.71 0.66 -
//   ...
//   end
//
// Sizes in bytes, ascending; times in microseconds; "-" where a candidate
// was not measured (the mailboxes above their capacity). Lines starting
// with '#' and blank lines are ignored. docs/tuning.md#tuner.
#pragma once

#include <kizuna/comm_options.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algo/cost_model.hpp"

namespace kizuna::comm {

enum class Candidate : std::uint8_t { Mailbox, Ring, Tree, OneShot, TwoShot, Doubling, Staged, Symmetric };
inline constexpr Candidate kAllCandidates[] = {Candidate::Mailbox, Candidate::Ring,     Candidate::Tree,
                                               Candidate::OneShot, Candidate::TwoShot,  Candidate::Doubling,
                                               Candidate::Staged,  Candidate::Symmetric};

std::string_view name(Candidate candidate);
std::optional<Candidate> parse_candidate(std::string_view text);
// The algorithm of a candidate that is a schedule through the links; Auto
// for the mailboxes, the staged and the symmetric route.
Algorithm algorithm_of(Candidate candidate);
inline bool is_schedule(Candidate c) { return algorithm_of(c) != Algorithm::Auto; }
// The candidate of a schedule's algorithm (Ring for Auto).
Candidate schedule_candidate(Algorithm algorithm);

struct ProfileKey {
  int world = 1;
  int nodes = 1;
  int local_ranks = 1;
  bool shared_memory = true;  // transport=shm (within a node), else tcp
  bool symmetric = false;     // buffers=symmetric, else private
  bool operator==(const ProfileKey&) const = default;
};
std::string describe(const ProfileKey& key);  // "world=2 nodes=1 local=2 transport=shm buffers=private"

// Where the ranks' CPUs were while a section was measured, as the
// placement probe told (comm/placement_probe.hpp): near, far, or never
// told (unknown: no probe, or no verdict). The candidates' order at a size
// may differ between near and far (docs/tuning.md#tuner), so a profile may
// hold, for one key, a section measured near and one measured far; a
// section of unknown placement stands alone for its key. Written as
// placement=near|far, absent when unknown.
enum class MeasuredPlacement : std::uint8_t { Unknown, Near, Far };
std::string_view name(MeasuredPlacement placement);

struct ProfileSection {
  ProfileKey key;
  MeasuredPlacement placement = MeasuredPlacement::Unknown;
  std::vector<Candidate> candidates;  // the columns
  struct Row {
    std::uint64_t bytes = 0;
    std::vector<double> us;  // one per candidate; NaN: not measured
  };
  std::vector<Row> rows;  // by bytes, ascending
};

struct Profile {
  std::vector<ProfileSection> sections;
  std::string source;  // the file it was read from (not part of the text)

  // Throws InvalidArgument naming `source` and the line that is wrong.
  static Profile parse(std::string_view text, const std::string& source);
  std::string text() const;
  // The section of `key` (the first, where one was measured near and
  // one far).
  const ProfileSection* find(const ProfileKey& key) const;
  // Adds `section`, replacing those of the same key that it stands for:
  // of its placement, or any where it or they are of unknown placement.
  void put(ProfileSection section);
};

// From `bytes` on (up to the next band's start), an all-reduce takes
// `candidate`.
struct Band {
  std::uint64_t from = 0;
  Candidate candidate = Candidate::Ring;
  bool operator==(const Band&) const = default;
};

// The fastest candidate per measured size among those `allowed`
// (allowed(candidate, bytes)), as bands; but where `preferred(bytes)` (the
// built-in rules' choice) measured within kPreferWithin of the fastest, that
// one: a profile overrides the rules only where it shows them clearly
// slower, not where noise tips a near tie. Empty when nothing is allowed.
inline constexpr double kPreferWithin = 0.05;
template <class Allowed, class Preferred>
std::vector<Band> decide(const ProfileSection& section, Allowed&& allowed, Preferred&& preferred);
std::vector<Band> decide(const ProfileSection& section);  // every candidate measured, none preferred

// The candidate of `bytes` in `bands` (not empty).
Candidate pick(const std::vector<Band>& bands, std::uint64_t bytes);

// The cost model's alpha, beta and mu fitted (least squares on relative
// error, none negative) to the section's schedule times; `fallback`'s
// values where the section cannot tell (no schedule measured; mu with 2
// ranks, whose schedules send one message a round).
algo::LinkModel fit_link(const ProfileSection& section, const algo::LinkModel& fallback);

// --- inline

namespace detail {
// allowed[row][column]; preferred[row]: a column, or -1.
std::vector<Band> bands_of(const ProfileSection& section, const std::vector<std::vector<bool>>& allowed,
                           const std::vector<int>& preferred);
}

template <class Allowed, class Preferred>
std::vector<Band> decide(const ProfileSection& section, Allowed&& allowed, Preferred&& preferred) {
  std::vector<std::vector<bool>> mask;
  std::vector<int> prefer;
  for (const auto& row : section.rows) {
    std::vector<bool> m;
    for (Candidate c : section.candidates) m.push_back(allowed(c, row.bytes));
    mask.push_back(std::move(m));
    const std::optional<Candidate> p = preferred(row.bytes);
    int column = -1;
    for (std::size_t i = 0; p && i < section.candidates.size(); ++i)
      if (section.candidates[i] == *p) column = static_cast<int>(i);
    prefer.push_back(column);
  }
  return detail::bands_of(section, mask, prefer);
}

}  // namespace kizuna::comm
