// The compression casts against the independent reference codecs of
// tests/support/reference.hpp: every float16 and bfloat16 value, ties,
// subnormals, overflow and NaN, through both the F16C and the portable path,
// at lengths that exercise the vector loops' tails.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "ddp/cast.hpp"
#include "ddp_scenario.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

// Every finite and special 16-bit pattern's value, the midpoints between
// neighbours (ties round to even), a little either side, and huge values.
std::vector<float> interesting(DataType wire) {
  std::vector<float> out;
  auto decode = [&](std::uint16_t h) {
    return wire == DataType::Float16 ? ref_half_to_double(h) : static_cast<double>(ref_bf16_to_float(h));
  };
  for (std::uint32_t h = 0; h < 0x10000; h += (wire == DataType::Float16 ? 1 : 7)) {
    const double v = decode(static_cast<std::uint16_t>(h));
    out.push_back(static_cast<float>(v));
    const double next = decode(static_cast<std::uint16_t>(h + 1));
    if (std::isfinite(v) && std::isfinite(next) && (h & 0x7fff) != 0x7fff) {
      const double mid = 0.5 * (v + next);
      out.push_back(static_cast<float>(mid));
      out.push_back(std::nextafter(static_cast<float>(mid), 0.0f));
      out.push_back(std::nextafter(static_cast<float>(mid), 1e30f));
    }
  }
  out.push_back(1e10f);
  out.push_back(-1e10f);
  out.push_back(65519.0f);
  out.push_back(65520.0f);
  out.push_back(std::numeric_limits<float>::infinity());
  out.push_back(std::numeric_limits<float>::quiet_NaN());
  return out;
}

std::uint16_t reference(double v, DataType wire) {
  return wire == DataType::Float16 ? ref_double_to_half(v) : ref_double_to_bf16(v);
}

bool same(std::uint16_t got, std::uint16_t want, DataType wire) {
  const bool nan_got = wire == DataType::Float16 ? std::isnan(ref_half_to_double(got))
                                                 : std::isnan(ref_bf16_to_float(got));
  const bool nan_want = wire == DataType::Float16 ? std::isnan(ref_half_to_double(want))
                                                  : std::isnan(ref_bf16_to_float(want));
  return nan_got || nan_want ? nan_got == nan_want : got == want;
}

}  // namespace

TEST_CASE("compression casts round to nearest even like the reference", "[ddp][cast]") {
  const DataType wire = GENERATE(DataType::Float16, DataType::BFloat16);
  const double divisor = GENERATE(1.0, 3.0, 8.0);
  CAPTURE(std::string(name(wire)), divisor);
  const std::vector<float> values = interesting(wire);
  for (std::size_t n : {values.size(), std::size_t{7}, std::size_t{13}, std::size_t{0}}) {
    std::vector<std::uint16_t> out(n + 1, 0xdead);
    ddp::compress(out.data(), values.data(), n, DataType::Float32, wire, divisor);
    CHECK(out[n] == 0xdead);  // nothing written past the end
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint16_t want = reference(static_cast<float>(values[i] / static_cast<float>(divisor)), wire);
      CAPTURE(i, values[i], out[i], want);
      REQUIRE(same(out[i], want, wire));
    }
    // float64 sources go through float32.
    std::vector<double> wide(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<std::uint16_t> out64(n);
    ddp::compress(out64.data(), wide.data(), n, DataType::Float64, wire, divisor);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(same(out64[i], out[i], wire));
  }
}

TEST_CASE("decompression is exact for every 16-bit value", "[ddp][cast]") {
  const DataType wire = GENERATE(DataType::Float16, DataType::BFloat16);
  std::vector<std::uint16_t> all(0x10000);
  for (std::uint32_t h = 0; h < 0x10000; ++h) all[h] = static_cast<std::uint16_t>(h);
  std::vector<float> f(all.size() + 1, 42.0f);
  std::vector<double> d(all.size());
  ddp::decompress(f.data(), all.data(), all.size(), DataType::Float32, wire);
  ddp::decompress(d.data(), all.data(), all.size(), DataType::Float64, wire);
  CHECK(f.back() == 42.0f);
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const double want = wire == DataType::Float16 ? ref_half_to_double(all[h]) : ref_bf16_to_float(all[h]);
    CAPTURE(h);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f[h]));
      REQUIRE(std::isnan(d[h]));
    } else {
      REQUIRE(f[h] == want);
      REQUIRE(d[h] == want);
    }
  }
}
