// tools/common/usage.hpp: bad usage, the one error every tool reports alike.
//
// A UsageError is a command line or an environment the tool cannot run with:
// an unknown flag, a bad value, a missing argument, a bad KIZUNA_* variable.
// The tools print its message and exit with kUsageExit, where a failure while
// running exits 1, so that a script can tell a wrong invocation from a job
// that failed.
#pragma once

#include <kizuna/error.hpp>

#include <stdexcept>

#include "core/env.hpp"

namespace kizuna::tools {

inline constexpr int kUsageExit = 2;

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses the KIZUNA_* variables as the library will (core::Env::get(), once
// per process); a bad one is a UsageError naming it and what it accepts.
inline void check_environment() {
  try {
    core::Env::get();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace kizuna::tools
