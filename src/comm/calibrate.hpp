// comm/calibrate.hpp: measuring every way an all-reduce can go on this
// machine, for a tuning profile (comm/profile.hpp, docs/tuning.md#tuner).
//
// calibrate() is collective over the ranks that `base` describes. It
// creates one communicator per candidate that applies here, each forcing
// its candidate (an algorithm through the links; the mailboxes, the staged
// or the symmetric route by their thresholds), and for the sizes up to
// `twins_upto` a second one (a twin), all alive at once. Then in
// `repetitions` rounds, each over every size, it times each candidate's
// loop of in-place float32 sums: as many calls as fill about
// `per_measurement` (decided once per size and candidate from a batch of
// calls that grows tenfold until it lasts a tenth of that with 100 calls
// or more, or half of it: the slowest rank's mean), each waited for, the
// slowest rank's mean per call. A size's loops are cut into ten slices and
// the candidates take turns slice by slice, in another order each slice,
// so that every candidate meets the same changes of the host's pace. A
// candidate's time at a size is the median of its rounds (with a twin,
// the faster of the two medians); the rounds of a size lie far apart in
// time, so a burst of noise lands on one of them and does not decide.
//
// The section says where the ranks' CPUs were meanwhile
// (ProfileSection::placement), as sampled after each round:
// agreed_placement(), rank 0's verdict of its own pair of CPUs; unknown
// where there is no staged candidate or no probe told. Where some rounds
// were near and some far, there are two sections, one of each
// (sections_from). With `placement_wait`, more rounds follow the first
// ones while a placement lacks rounds (placements_short), so that on a
// host that moves the CPUs between caches the profile can hold a table of
// each placement (docs/tuning.md#tuner).
//
// The candidates' buffers are buffers_of()'s. The profile of
// this communicator's creation is not loaded: each candidate is forced.
// Every rank returns the same sections (the times are reduced across ranks).
#pragma once

#include <kizuna/comm.hpp>
#include <kizuna/comm_options.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/placement_probe.hpp"
#include "comm/profile.hpp"

namespace kizuna::comm {

struct CalibrateOptions {
  std::vector<std::uint64_t> sizes;  // bytes, ascending, multiples of 4
  int repetitions = 5;
  std::chrono::microseconds per_measurement{10'000};
  bool symmetric = false;
  // After the `repetitions` rounds, more rounds follow while
  // placements_short() and until this long has passed since the first
  // ones ended (the slowest rank's clock); zero: none follow.
  std::chrono::milliseconds placement_wait{0};
  // Called on rank 0 with a line as each round is done, then one per size
  // with its times; may be empty.
  std::function<void(const std::string&)> progress;
  // Up to this size (bytes), every candidate is timed on two communicators
  // of its own, each with its own memory, and the faster one's median is
  // its time: one communicator's memory can read slow all along, and a
  // call of a few microseconds shows it (docs/tuning.md#tuner). Zero:
  // one communicator each.
  std::uint64_t twins_upto = 64 * 1024;
};

// One section, or, where some rounds found the CPUs near and some far, two:
// one of each, from its own rounds.
std::vector<ProfileSection> calibrate(const CommOptions& base, const CalibrateOptions& options);

// The sections of a calibration: `blank` (key and candidates), `runs`
// [size][candidate] -> a time per round, `rounds` the placement agreed
// after each round. One section, the medians of every round, with the
// placement they agree on (unknown where none told); or, where some rounds
// were near and some far, one section of the near rounds and one of the
// far (rounds that no probe told are left out of both).
std::vector<ProfileSection> sections_from(const ProfileSection& blank, const std::vector<std::uint64_t>& sizes,
                                         const std::vector<std::vector<std::vector<double>>>& runs,
                                         const std::vector<Placement>& rounds);

// Each time of `a` where `b` has none, else the smaller of the two: the
// sections of a calibration's candidates and of their twins (the same
// candidates, sizes and placements), as one.
std::vector<ProfileSection> faster_of(std::vector<ProfileSection> a, const std::vector<ProfileSection>& b);

// Whether more rounds could complete a calibration's pair of placements:
// some of `rounds` (the placement agreed after each) found the CPUs near
// or far, and near or far has fewer than `repetitions` rounds. Rounds that
// no probe told count for neither; where none told, there is nothing to
// wait for.
bool placements_short(const std::vector<Placement>& rounds, int repetitions);

// The parts calibrate() is made of, for tools that race other communicators
// the same way (kizuna-perf --versus: auto against every forced candidate).

// One communicator per candidate that applies here, each forcing it, named
// "<base.name>/<tag>/<candidate>"; collective. With `symmetric`, the
// symmetric route is a candidate where symmetric memory can be had.
struct Forced {
  Candidate candidate = Candidate::Ring;
  std::shared_ptr<Communicator::Impl> impl;
  std::shared_ptr<Communicator> comm;
};
std::vector<Forced> forced_communicators(const CommOptions& base, bool symmetric, const std::string& tag);

// Each of `ways`' buffer, of `bytes` (the mailboxes' up to their
// capacity), zeroed. With a symmetric candidate among them, one each:
// symmetric memory of its communicator (the others see it as ordinary
// memory of the same kind). Not one for all, for a buffer the others
// share is still in the caches from the turn before, where a buffer of
// one's own (as auto has on symmetric memory) is not: with 4 and 8 ranks
// at 2-4 MiB, the symmetric route read 15% faster on the shared one
// (docs/tuning.md#tuner). Where symmetric memory cannot be had, the
// symmetric candidate leaves `ways`. Otherwise one private buffer, the
// same for every candidate.
std::vector<std::shared_ptr<void>> buffers_of(std::vector<Forced>& ways, std::uint64_t bytes);

// Where the ranks' CPUs are, as the staged candidate among `ways` last
// agreed: its calls hold the placement probes (comm/symmetric.hpp), and
// every rank reads rank 0's verdict, the same after the same calls.
// Unknown without a staged candidate or before a probe told. Call it
// between calls.
Placement agreed_placement(const std::vector<Forced>& ways);

// The candidate that `impl`, left to auto, takes for an in-place float32
// sum of `bytes` on private buffers, or on its own symmetric memory with
// `symmetric`: its route, and on the Schedule route its algorithm, as a
// call's would be decided now (the placement the ranks last agreed on).
Candidate taken(const Communicator::Impl& impl, std::uint64_t bytes, bool symmetric);

// How many calls of an in-place float32 sum of `count` elements on `comm`
// over `buffer` fill about `per_measurement`, found by timing batches of
// calls: the same on every rank (the slowest rank's time decides), and 3
// or more, however long a call. Collective.
int calls_to_fill(Communicator& comm, float* buffer, std::size_t count, std::chrono::microseconds per_measurement);

// The slices race() cuts each measurement into: each lasts a tenth of it,
// a few milliseconds, far shorter than the host's changes of pace.
inline constexpr int kRaceSlices = 10;

// The calls of slice `slice` (0 .. kRaceSlices - 1) of a measurement of
// `calls`: spread over the slices as evenly as they go (two slices differ
// by one call at most), none left out; slices of no call where there are
// fewer calls than slices.
int calls_in_slice(int calls, int slice);

// One runner of race(): in-place float32 sums on `comm` over `buffer`
// (at least the largest size), at the sizes up to `upto` bytes.
struct Entrant {
  Communicator* comm = nullptr;
  float* buffer = nullptr;
  std::uint64_t upto = UINT64_MAX;
};

// Times every entrant at every size as calibrate() times its candidates:
// calls fill about `per_measurement`, `repetitions` rounds over every size,
// a size's measurements cut into slices that the entrants take in turn,
// shuffled anew each slice (alike on every rank), the slowest rank's mean
// per call.
// Returns [size][entrant] -> one time per round (us), empty where an
// entrant does not run that size. Collective over every entrant's ranks.
// `after_round`, when given, is called on every rank after each round; what
// it returns, when not empty, is added to that round's progress line.
// After `repetitions` rounds, another follows while `more`, when given and
// called on every rank after each, returns true; it must return the same
// on every rank (it may be collective).
std::vector<std::vector<std::vector<double>>> race(const std::vector<Entrant>& entrants,
                                                   const std::vector<std::uint64_t>& sizes, int repetitions,
                                                   std::chrono::microseconds per_measurement,
                                                   const std::function<void(const std::string&)>& progress,
                                                   const std::function<std::string()>& after_round = {},
                                                   const std::function<bool()>& more = {});

}  // namespace kizuna::comm
