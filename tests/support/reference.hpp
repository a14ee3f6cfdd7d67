// tests/support/reference.hpp: independent, slow, obviously-correct
// reference arithmetic for the reduction tests.
//
// Nothing here shares code with kernels/reduce.cuh: the 16-bit float
// conversions are done with frexp/ldexp/nearbyint in double precision, so a
// bug in the bit tricks cannot hide behind the same bug in the reference.
#pragma once

#include <kizuna/types.hpp>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kizuna::test {

inline double ref_half_to_double(std::uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 31;
  const int mant = h & 1023;
  double value;
  if (exp == 0) value = std::ldexp(mant, -24);
  else if (exp == 31) value = mant ? NAN : INFINITY;
  else value = std::ldexp(1024 + mant, exp - 25);
  return sign ? -value : value;
}

// Round to nearest even into binary16, from first principles.
inline std::uint16_t ref_double_to_half(double v) {
  const std::uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return sign | 0x7e00;
  const double a = std::fabs(v);
  if (a >= 65520.0) return sign | 0x7c00;  // 65520 is the tie between 65504 and 2^16 -> Inf
  if (a == 0) return sign;
  int e = std::ilogb(a);
  if (e < -14) e = -14;
  const double quantum = std::ldexp(1.0, e - 10);
  const double m = std::nearbyint(a / quantum);  // default rounding: to nearest, ties to even
  const double value = m * quantum;
  if (value < std::ldexp(1.0, -14)) return sign | static_cast<std::uint16_t>(m);  // subnormal
  const int exp = std::ilogb(value);
  const int mant = static_cast<int>(std::ldexp(value, 10 - exp)) - 1024;
  return sign | static_cast<std::uint16_t>(((exp + 15) << 10) | mant);
}

inline float ref_bf16_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint16_t ref_double_to_bf16(double v) {
  const std::uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return sign | 0x7fc0;
  const double a = std::fabs(v);
  if (a == 0) return sign;
  if (std::isinf(a)) return sign | 0x7f80;
  int e = std::ilogb(a);
  if (e < -126) e = -126;
  const double quantum = std::ldexp(1.0, e - 7);
  const double value = std::nearbyint(a / quantum) * quantum;
  if (value >= std::ldexp(1.0, 128)) return sign | 0x7f80;
  const float f = static_cast<float>(value);  // exact: value has 8 significant bits
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return sign | static_cast<std::uint16_t>(u >> 16);
}

inline bool half_is_nan(std::uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
inline bool bf16_is_nan(std::uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// op on two values of a computing type, with the documented semantics.
template <typename T>
T ref_apply(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return a + b;
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min:
      if (a != a || b != b) return a != a ? a : b;
      return a < b ? a : b;
    case ReduceOp::Max:
      if (a != a || b != b) return a != a ? a : b;
      return a > b ? a : b;
  }
  return a;
}

// Integers: Sum/Prod wrap (computed on the unsigned type), Min/Max compare signed.
template <typename T>
T ref_apply_int(ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::Prod: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case ReduceOp::Min: return a < b ? a : b;
    case ReduceOp::Max: return a > b ? a : b;
  }
  return a;
}

// A reproducible 64-bit hash of (seed, index) for closed-form inputs.
inline std::uint64_t mix(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace kizuna::test
