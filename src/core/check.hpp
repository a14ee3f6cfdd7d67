// core/check.hpp: building and throwing kizuna::Error.
//
//   KIZUNA_THROW(code, parts...)        throw Error(code, parts streamed together)
//   KIZUNA_CHECK(cond, parts...)        Internal error naming file:line and the expression
//   KIZUNA_CHECK_ARG(cond, parts...)    InvalidArgument with the message parts only
//   KIZUNA_CHECK_EQ(a, b, parts...)     also _NE _LT _LE _GT _GE: both values in the message
//
// The parts are anything with an operator<<; they are only evaluated when the
// check fails.
#pragma once

#include <kizuna/error.hpp>

#include <sstream>
#include <string>
#include <utility>

namespace kizuna::core {

template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

[[noreturn]] void throw_check_failure(ErrorCode code, const char* file, int line,
                                      const char* expression, const std::string& detail);

}  // namespace kizuna::core

#define KIZUNA_THROW(code, ...) \
  throw ::kizuna::Error((code), ::kizuna::core::concat(__VA_ARGS__))

#define KIZUNA_CHECK(cond, ...)                                                      \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::kizuna::core::throw_check_failure(::kizuna::ErrorCode::Internal, __FILE__,   \
                                          __LINE__, #cond,                           \
                                          ::kizuna::core::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

#define KIZUNA_CHECK_ARG(cond, ...)                                           \
  do {                                                                        \
    if (!(cond)) [[unlikely]]                                                 \
      KIZUNA_THROW(::kizuna::ErrorCode::InvalidArgument, __VA_ARGS__);        \
  } while (0)

#define KIZUNA_CHECK_OP_(a, b, op, ...)                                                   \
  do {                                                                                    \
    const auto& kz_a_ = (a);                                                              \
    const auto& kz_b_ = (b);                                                              \
    if (!(kz_a_ op kz_b_)) [[unlikely]]                                                   \
      ::kizuna::core::throw_check_failure(                                                \
          ::kizuna::ErrorCode::Internal, __FILE__, __LINE__, #a " " #op " " #b,           \
          ::kizuna::core::concat("(", kz_a_, " vs ", kz_b_, ")" __VA_OPT__(, " ", ) __VA_ARGS__)); \
  } while (0)

#define KIZUNA_CHECK_EQ(a, b, ...) KIZUNA_CHECK_OP_(a, b, ==, __VA_ARGS__)
#define KIZUNA_CHECK_NE(a, b, ...) KIZUNA_CHECK_OP_(a, b, !=, __VA_ARGS__)
#define KIZUNA_CHECK_LT(a, b, ...) KIZUNA_CHECK_OP_(a, b, <, __VA_ARGS__)
#define KIZUNA_CHECK_LE(a, b, ...) KIZUNA_CHECK_OP_(a, b, <=, __VA_ARGS__)
#define KIZUNA_CHECK_GT(a, b, ...) KIZUNA_CHECK_OP_(a, b, >, __VA_ARGS__)
#define KIZUNA_CHECK_GE(a, b, ...) KIZUNA_CHECK_OP_(a, b, >=, __VA_ARGS__)
