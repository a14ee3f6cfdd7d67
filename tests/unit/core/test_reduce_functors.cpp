// The element functors and 16-bit float codecs of kernels/reduce.cuh, which
// the CPU reductions and the CUDA kernels share, against the first-principles
// reference in tests/support/reference.hpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/reduce.cuh"
#include "reference.hpp"

using namespace kizuna;
using namespace kizuna::test;
namespace k = kizuna::kernels;

static std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST_CASE("half_to_float is exact for all 65536 half values", "[functors]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float got = k::half_to_float(static_cast<std::uint16_t>(h));
    const double want = ref_half_to_double(static_cast<std::uint16_t>(h));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
    } else if (static_cast<double>(got) != want || std::signbit(got) != std::signbit(want)) {
      FAIL("half 0x" << std::hex << h << ": got " << got << " expected " << want);
    }
  }
}

TEST_CASE("float_to_half round-trips every half and rounds to nearest even", "[functors]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const std::uint16_t back = k::float_to_half(k::half_to_float(half));
    if (half_is_nan(half)) REQUIRE(half_is_nan(back));
    else if (back != half) FAIL("0x" << std::hex << h << " came back as 0x" << back);
  }
  // Every 4099th float bit pattern (~1M floats across all exponents).
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) {
    const float f = from_bits(static_cast<std::uint32_t>(u));
    const std::uint16_t got = k::float_to_half(f);
    const std::uint16_t want = ref_double_to_half(f);
    if (std::isnan(f)) REQUIRE(half_is_nan(got));
    else if (got != want)
      FAIL("float " << f << " (0x" << std::hex << u << "): got 0x" << got << " expected 0x" << want);
  }
}

TEST_CASE("16-bit float ties round to even", "[functors]") {
  // half: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 -> 1 (even mantissa)
  CHECK(k::float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9 -> 1 + 2^-9
  CHECK(k::float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  // the largest finite half and the tie that rounds to infinity
  CHECK(k::float_to_half(65504.0f) == 0x7bff);
  CHECK(k::float_to_half(65519.99f) == 0x7bff);
  CHECK(k::float_to_half(65520.0f) == 0x7c00);
  // subnormal ties: 2^-25 is halfway between 0 and 2^-24 -> 0; 3 * 2^-25 -> 2 * 2^-24
  CHECK(k::float_to_half(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(k::float_to_half(3 * std::ldexp(1.0f, -25)) == 0x0002);
  // bfloat16: 1 + 2^-8 -> 1; 1 + 3 * 2^-8 -> 1 + 2^-6
  CHECK(k::float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(k::float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(k::float_to_bf16(-(1.0f + 3 * std::ldexp(1.0f, -8))) == 0xbf82);
}

TEST_CASE("float_to_bf16 rounds to nearest even and keeps NaN", "[functors]") {
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) {
    const float f = from_bits(static_cast<std::uint32_t>(u));
    const std::uint16_t got = k::float_to_bf16(f);
    if (std::isnan(f)) {
      REQUIRE(bf16_is_nan(got));
      continue;
    }
    const std::uint16_t want = ref_double_to_bf16(f);
    if (got != want)
      FAIL("float " << f << " (0x" << std::hex << u << "): got 0x" << got << " expected 0x" << want);
  }
  // A NaN whose payload sits only in the low 16 bits must not become Inf.
  CHECK(bf16_is_nan(k::float_to_bf16(from_bits(0x7f800001u))));
  CHECK(k::bf16_to_float(0x3f80) == 1.0f);
  CHECK(bits(k::bf16_to_float(0x8000)) == 0x80000000u);
}

TEST_CASE("operators propagate NaN and wrap integers", "[functors]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(k::MinOp::apply(nan, 1.0f)));
  CHECK(std::isnan(k::MinOp::apply(1.0f, nan)));
  CHECK(std::isnan(k::MaxOp::apply(nan, 1.0f)));
  CHECK(std::isnan(k::MaxOp::apply(1.0f, nan)));
  CHECK(std::isnan(k::SumOp::apply(nan, 1.0f)));
  CHECK(k::MinOp::apply(-3, 2) == -3);
  CHECK(k::MaxOp::apply(-3, 2) == 2);
  CHECK(k::SumOp::apply<std::uint8_t>(250, 10) == 4);
  CHECK(k::ProdOp::apply<std::uint32_t>(0x80000000u, 2u) == 0u);
  CHECK(std::isinf(k::SumOp::apply(std::numeric_limits<float>::infinity(), 1.0f)));
}
