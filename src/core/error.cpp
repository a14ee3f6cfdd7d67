#include <kizuna/error.hpp>

#include "core/check.hpp"

namespace kizuna {

std::string_view name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::Timeout: return "Timeout";
    case ErrorCode::PeerLost: return "PeerLost";
    case ErrorCode::Mismatch: return "Mismatch";
    case ErrorCode::SystemError: return "SystemError";
    case ErrorCode::CudaError: return "CudaError";
    case ErrorCode::Aborted: return "Aborted";
    case ErrorCode::Internal: return "Internal";
  }
  return "Unknown";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(message), code_(code) {}

namespace core {

void throw_check_failure(ErrorCode code, const char* file, int line, const char* expression,
                         const std::string& detail) {
  throw Error(code, concat("check failed at ", file, ":", line, ": ", expression,
                           detail.empty() ? "" : " ", detail));
}

}  // namespace core
}  // namespace kizuna
