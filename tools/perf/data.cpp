#include "data.hpp"

#include <kizuna/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/reduce.hpp"

namespace kizuna::perf {

namespace {

constexpr std::size_t kBlock = 4096;  // elements compared per reference block

std::uint64_t mix(std::uint64_t rank, std::uint64_t i) {
  std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (rank + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return x;
}

template <typename T>
T int_input(int rank, std::uint64_t i) {
  return static_cast<T>(mix(static_cast<std::uint64_t>(rank), i));
}

template <typename T>
T int_combine(ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::Prod: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
  }
  return a;
}

double float_combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return a + b;
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
  }
  return a;
}

void encode(DataType t, double v, unsigned char* out) {
  switch (t) {
    case DataType::Float16: { const std::uint16_t h = float_to_half(static_cast<float>(v)); std::memcpy(out, &h, 2); return; }
    case DataType::BFloat16: { const std::uint16_t h = float_to_bfloat16(static_cast<float>(v)); std::memcpy(out, &h, 2); return; }
    case DataType::Float32: { const float f = static_cast<float>(v); std::memcpy(out, &f, 4); return; }
    default: std::memcpy(out, &v, 8); return;
  }
}

std::string hex(const unsigned char* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (std::size_t k = n; k-- > 0;) s += digits[p[k] >> 4], s += digits[p[k] & 15];
  return s;
}

// Calls fn.template operator()<T>() with T the integer type of `t`.
template <typename Fn>
void with_int_type(DataType t, Fn&& fn) {
  switch (t) {
    case DataType::Int8: return fn(std::int8_t{});
    case DataType::UInt8: return fn(std::uint8_t{});
    case DataType::Int32: return fn(std::int32_t{});
    case DataType::UInt32: return fn(std::uint32_t{});
    case DataType::Int64: return fn(std::int64_t{});
    default: return fn(std::uint64_t{});
  }
}

}  // namespace

std::uint16_t float_to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000);
  const std::uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) return sign | (mag > 0x7f800000u ? 0x7e00 : 0x7c00);  // NaN, inf
  if (mag >= 0x477ff000u) return sign | 0x7c00;                                 // rounds to inf
  if (mag < 0x38800000u) {
    // Subnormal half (or zero): units of 2^-24, rounded to nearest even.
    const float units = std::fabs(f) * 16777216.0f;
    return sign | static_cast<std::uint16_t>(std::nearbyint(units));
  }
  std::uint32_t h = (((mag >> 23) - 112) << 10) | ((mag >> 13) & 0x3ff);
  const std::uint32_t rest = mag & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return sign | static_cast<std::uint16_t>(h);
}

std::uint16_t float_to_bfloat16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1);
  return static_cast<std::uint16_t>(x >> 16);
}

ClosedForm::ClosedForm(DataType dtype, ReduceOp op, int world)
    : dtype_(dtype), op_(op), world_(world), magnitude_(4) {
  if (!is_valid(dtype) || !is_valid(op) || world < 1)
    throw Error(ErrorCode::InvalidArgument, "ClosedForm: invalid dtype, op or world size");
  if (op == ReduceOp::Avg && !is_floating(dtype))
    throw Error(ErrorCode::InvalidArgument,
                "avg is defined for floating types only, not " + std::string(name(dtype)));
  const int exact_limit = dtype == DataType::BFloat16 ? 256 : dtype == DataType::Float16 ? 2048 : 1 << 24;
  magnitude_ = std::clamp(exact_limit / world, 1, 4);
}

double ClosedForm::float_input(int rank, std::uint64_t i) const {
  const std::uint64_t h = mix(static_cast<std::uint64_t>(rank) + 101, i);
  if (op_ == ReduceOp::Prod) {
    const double sign = (h & 1) ? -1.0 : 1.0;
    if (static_cast<std::uint64_t>(rank) != i % static_cast<std::uint64_t>(world_)) return sign;
    return sign * ((h & 2) ? 2.0 : 0.5);
  }
  // (h >> 32) * (2m + 1) >> 32 is uniform in [0, 2m].
  const std::uint64_t span = 2 * static_cast<std::uint64_t>(magnitude_) + 1;
  return static_cast<double>(static_cast<std::int64_t>(((h >> 32) * span) >> 32) - magnitude_);
}

void ClosedForm::input(int rank, std::uint64_t first, std::size_t n, void* out) const {
  auto* p = static_cast<unsigned char*>(out);
  if (!is_floating(dtype_)) {
    with_int_type(dtype_, [&](auto zero) {
      using T = decltype(zero);
      for (std::size_t k = 0; k < n; ++k) {
        const T v = int_input<T>(rank, first + k);
        std::memcpy(p + k * sizeof(T), &v, sizeof(T));
      }
    });
    return;
  }
  const std::size_t e = elem();
  if (dtype_ == DataType::Float32) {
    auto* f = static_cast<float*>(out);
    for (std::size_t k = 0; k < n; ++k) f[k] = static_cast<float>(float_input(rank, first + k));
    return;
  }
  for (std::size_t k = 0; k < n; ++k) encode(dtype_, float_input(rank, first + k), p + k * e);
}

void ClosedForm::reduced(std::uint64_t first, std::size_t n, void* out) const {
  auto* p = static_cast<unsigned char*>(out);
  if (!is_floating(dtype_)) {
    with_int_type(dtype_, [&](auto zero) {
      using T = decltype(zero);
      for (std::size_t k = 0; k < n; ++k) {
        T acc = int_input<T>(0, first + k);
        for (int r = 1; r < world_; ++r) acc = int_combine(op_, acc, int_input<T>(r, first + k));
        std::memcpy(p + k * sizeof(T), &acc, sizeof(T));
      }
    });
    return;
  }
  const std::size_t e = elem();
  for (std::size_t k = 0; k < n; ++k) {
    double acc = float_input(0, first + k);
    for (int r = 1; r < world_; ++r) acc = float_combine(op_, acc, float_input(r, first + k));
    encode(dtype_, acc, p + k * e);
  }
  if (op_ == ReduceOp::Avg) core::scale(out, n, dtype_, world_);
}

template <typename Expected>
std::uint64_t ClosedForm::compare(const void* got, std::uint64_t first, std::size_t n,
                                  std::string* first_wrong, Expected&& expected) const {
  const std::size_t e = elem();
  const auto* g = static_cast<const unsigned char*>(got);
  std::vector<unsigned char> want(std::min(n, kBlock) * e);
  std::uint64_t wrong = 0;
  for (std::size_t done = 0; done < n; done += kBlock) {
    const std::size_t len = std::min(kBlock, n - done);
    expected(first + done, len, want.data());
    const unsigned char* block = g + done * e;
    if (std::memcmp(block, want.data(), len * e) == 0) continue;
    for (std::size_t k = 0; k < len; ++k) {
      if (std::memcmp(block + k * e, want.data() + k * e, e) == 0) continue;
      if (wrong++ == 0 && first_wrong && first_wrong->empty())
        *first_wrong = "index " + std::to_string(first + done + k) + ": got " + hex(block + k * e, e) +
                       ", expected " + hex(want.data() + k * e, e);
    }
  }
  return wrong;
}

std::uint64_t ClosedForm::wrong_input(const void* got, int rank, std::uint64_t first, std::size_t n,
                                      std::string* first_wrong) const {
  return compare(got, first, n, first_wrong,
                 [&](std::uint64_t at, std::size_t len, void* out) { input(rank, at, len, out); });
}

std::uint64_t ClosedForm::wrong_reduced(const void* got, std::uint64_t first, std::size_t n,
                                        std::string* first_wrong) const {
  return compare(got, first, n, first_wrong,
                 [&](std::uint64_t at, std::size_t len, void* out) { reduced(at, len, out); });
}

}  // namespace kizuna::perf
