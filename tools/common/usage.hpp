// tools/common/usage.hpp: bad usage, the one error every tool reports alike.
//
// A UsageError is a command line the tool cannot run with: an unknown flag,
// a bad value, a missing argument. The tools print its message and exit
// with kUsageExit, where a failure while running exits 1, so that a script
// can tell a wrong invocation from a job that failed.
#pragma once

#include <stdexcept>

namespace kizuna::tools {

inline constexpr int kUsageExit = 2;

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kizuna::tools
