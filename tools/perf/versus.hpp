// perf/versus.hpp: kizuna-perf --versus PROFILE (make bench-auto).
//
// Is auto the fastest way to run an all-reduce here? In these same
// processes, with communicators alive at once: "auto" (the tuning profile
// PROFILE loaded, docs/tuning.md#tuner), "rules" (auto without a profile)
// and one communicator forcing each candidate that applies
// (comm::forced_communicators). They are raced as calibrate() races the
// candidates (comm::race): rounds over every size, each size's contenders
// taking turns slice by slice, the slowest rank's mean per call; each
// measurement fills about 30 ms, three times the calibration's, so that the
// judge's figures spread less than what they judge. One set of processes,
// so one placement of the ranks on the CPUs for every contender: across
// launches the host places them differently, and the same code then differs
// by more than the 10% the comparison looks for
// (docs/performance.md#auto-against-every-forced-choice-make-bench-auto).
//
// Before the race every contender's result is checked once at every size
// (inputs from perf/data.hpp, compared bit for bit). Rank 0 writes `json`:
//   {"world": N, "transport": "...", "buffers": "private"|"symmetric",
//    "wrong": W, "sizes": [bytes...],
//    "contenders": {"auto": [[us per round] per size], "rules": ..., "ring": ...},
//    "took": {"auto": [candidate per size], "rules": [...]},
//    "placement": ["near"|"far"|"unknown" per round]}
// with [] where a contender does not run a size (the mailboxes past 1 KiB);
// "took" is what auto and the rules decide at each size (comm::taken);
// "placement" where the ranks' CPUs were after each round, as the staged
// candidate's probes agreed (unknown: none told), as the profile records
// it for the calibration (comm/calibrate.hpp).
#pragma once

#include <kizuna/comm_options.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace kizuna::perf {

struct VersusArgs {
  std::string profile;              // loaded by "auto"
  std::string json;                 // written by rank 0; empty: none
  std::string transport;            // for the record
  std::vector<std::uint64_t> sizes;  // bytes, ascending, multiples of 4
  bool symmetric = false;           // -R 2: every contender's buffer in symmetric memory
  int rounds = 5;
  std::chrono::microseconds per_measurement{30'000};
};

// Collective. Returns the exit status: 0, or 1 when a result was wrong or
// rank 0 could not write `json` (every rank learns it). Throws
// kizuna::Error on failure.
int run_versus(const CommOptions& base, const VersusArgs& args);

}  // namespace kizuna::perf
