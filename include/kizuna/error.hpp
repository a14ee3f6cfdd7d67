// kizuna/error.hpp: the one exception type of the C++ API.
//
// Every failure reaches the caller as kizuna::Error: a code, for programs
// that react to the kind of failure, and a message, for people, that says
// what failed, on which rank, in which collective and after how long
// ("timed out after 30000 ms waiting for rank 3 in all_reduce #17 ...").
// The C ABI maps the code onto kzResult_t and keeps the message for
// kzGetLastError().
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace kizuna {

enum class ErrorCode {
  InvalidArgument,  // the caller passed something wrong; nothing was sent
  Timeout,          // a deadline passed (KIZUNA_TIMEOUT, a store timeout, a wait)
  PeerLost,         // a peer's connection closed or its process died
  Mismatch,         // ranks disagree about a call (KIZUNA_CHECK=1) or a registration
  SystemError,      // the OS refused (socket, mmap, file); errno text in the message
  CudaError,        // a CUDA runtime call failed
  Aborted,          // the communicator was aborted, or is unusable after an earlier error
  Internal,         // a broken invariant inside kizuna: a bug, please report it
};

std::string_view name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);

  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace kizuna
