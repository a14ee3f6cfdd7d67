// tests/support/error_of.hpp: the kizuna::Error a Work ends with, or a call
// throws; Internal "no error", as a sentinel, when there is none.
#pragma once

#include <kizuna/error.hpp>
#include <kizuna/work.hpp>

namespace kizuna::test {

inline Error error_of(const Work& w) {
  try {
    w.wait();
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorCode::Internal, "no error");
}

template <typename Fn>
Error error_of_call(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorCode::Internal, "no error");
}

}  // namespace kizuna::test
