// perf/calibration.hpp: kizuna-perf --calibrate FILE.
//
// Every rank measures every way an all-reduce can go on this machine at
// each size of the sweep (comm/calibrate.hpp), and rank 0 adds the result
// to FILE as one section of a tuning profile (comm/profile.hpp), replacing
// a section measured before for the same ranks, transport and buffers, so
// that one file can hold a machine's profiles for several worlds. It
// prints the section and the choices auto will make from it. Loading the
// file with KIZUNA_TUNING_FILE (on rank 0) makes every communicator of a
// matching world decide from it (docs/tuning.md#tuner).
#pragma once

#include <kizuna/comm_options.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace kizuna::perf {

struct CalibrationArgs {
  std::string path;
  std::vector<std::size_t> sizes;  // of the sweep (-b, -e, -f)
  bool symmetric = false;          // -R 2
  int rounds = 5;
  std::chrono::milliseconds placement_wait{0};  // --placement-wait
};

// Collective; returns the exit status (0, or 1 when rank 0 could not
// write the file: every rank learns it). Throws kizuna::Error on failure.
int run_calibration(const CommOptions& base, const CalibrationArgs& args);

}  // namespace kizuna::perf
