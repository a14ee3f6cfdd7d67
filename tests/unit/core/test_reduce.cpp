// core::reduce / reduce_into / scale: every dtype x op against the scalar
// reference, for counts 0, 1, 7, 1000003 and either side of multiples of
// the vector widths (32, 64, 256 elements), through every entry point
// (two-operand, three-operand, dst == a, dst == b, unaligned pointers).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <kizuna/error.hpp>

#include "core/reduce.hpp"
#include "reference.hpp"

using namespace kizuna;
using namespace kizuna::test;

namespace {

constexpr DataType kAllTypes[] = {DataType::Int8,    DataType::UInt8,    DataType::Int32,
                                  DataType::UInt32,  DataType::Int64,    DataType::UInt64,
                                  DataType::Float16, DataType::BFloat16, DataType::Float32,
                                  DataType::Float64};
constexpr ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                                ReduceOp::Avg};

// Element `i` of input `which` as raw bytes: integers are arbitrary bit
// patterns (so Sum and Prod wrap); floats are small values with a NaN and
// infinities sprinkled in.
void fill(std::vector<unsigned char>& bytes, DataType t, std::size_t count, int which) {
  const std::size_t elem = size_of(t);
  bytes.assign(count * elem, 0);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t h = mix(which, i);
    unsigned char* p = bytes.data() + i * elem;
    double value = (static_cast<double>(h % 2001) - 1000.0) / 16.0;
    if (i % 97 == 13) value = std::numeric_limits<double>::quiet_NaN();
    if (i % 89 == 7) value = which ? INFINITY : -INFINITY;
    switch (t) {
      case DataType::Float16: {
        const std::uint16_t v = ref_double_to_half(value);
        std::memcpy(p, &v, 2);
        break;
      }
      case DataType::BFloat16: {
        const std::uint16_t v = ref_double_to_bf16(value);
        std::memcpy(p, &v, 2);
        break;
      }
      case DataType::Float32: {
        const float v = static_cast<float>(value);
        std::memcpy(p, &v, 4);
        break;
      }
      case DataType::Float64: std::memcpy(p, &value, 8); break;
      default: std::memcpy(p, &h, elem); break;  // integers: the low bytes of the hash
    }
  }
}

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Expected dst[i] = a[i] op b[i], as bytes, and whether it is a NaN.
void expected_element(DataType t, ReduceOp op, const unsigned char* a, const unsigned char* b,
                      unsigned char* out) {
  switch (t) {
    case DataType::Int8: { auto r = ref_apply_int(op, load<std::int8_t>(a), load<std::int8_t>(b)); std::memcpy(out, &r, 1); break; }
    case DataType::UInt8: { auto r = ref_apply_int(op, load<std::uint8_t>(a), load<std::uint8_t>(b)); std::memcpy(out, &r, 1); break; }
    case DataType::Int32: { auto r = ref_apply_int(op, load<std::int32_t>(a), load<std::int32_t>(b)); std::memcpy(out, &r, 4); break; }
    case DataType::UInt32: { auto r = ref_apply_int(op, load<std::uint32_t>(a), load<std::uint32_t>(b)); std::memcpy(out, &r, 4); break; }
    case DataType::Int64: { auto r = ref_apply_int(op, load<std::int64_t>(a), load<std::int64_t>(b)); std::memcpy(out, &r, 8); break; }
    case DataType::UInt64: { auto r = ref_apply_int(op, load<std::uint64_t>(a), load<std::uint64_t>(b)); std::memcpy(out, &r, 8); break; }
    case DataType::Float16: {
      // computed in float32, then rounded once
      const float r = ref_apply(op, static_cast<float>(ref_half_to_double(load<std::uint16_t>(a))),
                                static_cast<float>(ref_half_to_double(load<std::uint16_t>(b))));
      const std::uint16_t v = ref_double_to_half(r);
      std::memcpy(out, &v, 2);
      break;
    }
    case DataType::BFloat16: {
      const float r = ref_apply(op, ref_bf16_to_float(load<std::uint16_t>(a)),
                                ref_bf16_to_float(load<std::uint16_t>(b)));
      const std::uint16_t v = ref_double_to_bf16(r);
      std::memcpy(out, &v, 2);
      break;
    }
    case DataType::Float32: { auto r = ref_apply(op, load<float>(a), load<float>(b)); std::memcpy(out, &r, 4); break; }
    case DataType::Float64: { auto r = ref_apply(op, load<double>(a), load<double>(b)); std::memcpy(out, &r, 8); break; }
  }
}

bool is_nan(DataType t, const unsigned char* p) {
  switch (t) {
    case DataType::Float16: return half_is_nan(load<std::uint16_t>(p));
    case DataType::BFloat16: return bf16_is_nan(load<std::uint16_t>(p));
    case DataType::Float32: return std::isnan(load<float>(p));
    case DataType::Float64: return std::isnan(load<double>(p));
    default: return false;
  }
}

std::string hex(const unsigned char* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  for (std::size_t i = n; i-- > 0;) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// Compares element by element; reports the first wrong index.
void check_result(DataType t, ReduceOp op, const unsigned char* got, const unsigned char* a,
                  const unsigned char* b, std::size_t count) {
  const std::size_t elem = size_of(t);
  unsigned char want[8];
  for (std::size_t i = 0; i < count; ++i) {
    expected_element(t, op, a + i * elem, b + i * elem, want);
    const unsigned char* g = got + i * elem;
    const bool ok = is_nan(t, want) ? is_nan(t, g) : std::memcmp(g, want, elem) == 0;
    if (!ok)
      FAIL(name(t) << " " << name(op) << " count " << count << ": first wrong index " << i
                   << ", got " << hex(g, elem) << ", expected " << hex(want, elem));
  }
}

}  // namespace

TEST_CASE("reduce matches the scalar reference for every dtype x op", "[reduce]") {
  const DataType t = GENERATE(from_range(std::begin(kAllTypes), std::end(kAllTypes)));
  const ReduceOp op = GENERATE(from_range(std::begin(kAllOps), std::end(kAllOps)));
  const std::size_t count = GENERATE(0, 1, 7, 32, 33, 64, 65, 256, 257, 1000003);
  const std::size_t elem = size_of(t);
  CAPTURE(name(t), name(op), count);

  std::vector<unsigned char> a, b;
  fill(a, t, count, 0);
  fill(b, t, count, 1);

  SECTION("two operands: dst op= src") {
    std::vector<unsigned char> dst = a;
    core::reduce(dst.data(), b.data(), count, t, op);
    check_result(t, op, dst.data(), a.data(), b.data(), count);
  }
  SECTION("three operands: dst = a op b") {
    std::vector<unsigned char> dst(count * elem + 1, 0xcd);
    core::reduce_into(dst.data(), a.data(), b.data(), count, t, op);
    check_result(t, op, dst.data(), a.data(), b.data(), count);
    CHECK(dst.back() == 0xcd);  // nothing written past the end
  }
  SECTION("portable loops (no ISA-specific fast path)") {
    std::vector<unsigned char> dst(count * elem);
    core::reduce_into_portable(dst.data(), a.data(), b.data(), count, t, op);
    check_result(t, op, dst.data(), a.data(), b.data(), count);
  }
  SECTION("aliasing: dst == a") {
    std::vector<unsigned char> dst = a;
    core::reduce_into(dst.data(), dst.data(), b.data(), count, t, op);
    check_result(t, op, dst.data(), a.data(), b.data(), count);
  }
  SECTION("aliasing: dst == b") {
    std::vector<unsigned char> dst = b;
    core::reduce_into(dst.data(), a.data(), dst.data(), count, t, op);
    check_result(t, op, dst.data(), a.data(), b.data(), count);
  }
  SECTION("aliasing: dst == src (x op x)") {
    std::vector<unsigned char> dst = a;
    core::reduce(dst.data(), dst.data(), count, t, op);
    check_result(t, op, dst.data(), a.data(), a.data(), count);
  }
  SECTION("unaligned pointers") {
    // Every buffer one byte past an aligned address.
    std::vector<unsigned char> ua(count * elem + 1), ub(count * elem + 1), ud(count * elem + 1);
    if (count) {
      std::memcpy(ua.data() + 1, a.data(), count * elem);
      std::memcpy(ub.data() + 1, b.data(), count * elem);
    }
    core::reduce_into(ud.data() + 1, ua.data() + 1, ub.data() + 1, count, t, op);
    check_result(t, op, ud.data() + 1, a.data(), b.data(), count);
    core::reduce(ua.data() + 1, ub.data() + 1, count, t, op);
    check_result(t, op, ua.data() + 1, a.data(), b.data(), count);
  }
}

TEST_CASE("integer reductions wrap around", "[reduce]") {
  std::int8_t a[] = {127, -128, 100};
  const std::int8_t b[] = {1, -1, 100};
  core::reduce(a, b, 3, DataType::Int8, ReduceOp::Sum);
  CHECK(a[0] == -128);
  CHECK(a[1] == 127);
  CHECK(a[2] == -56);
  std::int64_t big[] = {std::numeric_limits<std::int64_t>::max()};
  const std::int64_t two[] = {2};
  core::reduce(big, two, 1, DataType::Int64, ReduceOp::Prod);
  CHECK(big[0] == -2);
  std::uint32_t u[] = {0};
  const std::uint32_t one[] = {0xffffffffu};
  core::reduce(u, one, 1, DataType::UInt32, ReduceOp::Max);
  CHECK(u[0] == 0xffffffffu);
}

TEST_CASE("NaN and infinities propagate through float reductions", "[reduce]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (ReduceOp op : kAllOps) {
    CAPTURE(name(op));
    float a[] = {nan, 1.0f, inf, 2.0f};
    const float b[] = {1.0f, nan, 1.0f, -inf};
    core::reduce(a, b, 4, DataType::Float32, op);
    CHECK(std::isnan(a[0]));
    CHECK(std::isnan(a[1]));
  }
  float s[] = {INFINITY};
  const float minus[] = {-INFINITY};
  core::reduce(s, minus, 1, DataType::Float32, ReduceOp::Sum);
  CHECK(std::isnan(s[0]));
}

TEST_CASE("scale divides floating types and rejects integers", "[reduce]") {
  const DataType t = GENERATE(DataType::Float16, DataType::BFloat16, DataType::Float32,
                              DataType::Float64);
  const std::size_t count = GENERATE(0, 1, 7, 100003);
  CAPTURE(name(t), count);
  std::vector<unsigned char> data;
  fill(data, t, count, 3);
  const std::vector<unsigned char> original = data;
  const std::size_t elem = size_of(t);
  core::scale(data.data(), count, t, 3.0);
  for (std::size_t i = 0; i < count; ++i) {
    const unsigned char* in = original.data() + i * elem;
    const unsigned char* g = data.data() + i * elem;
    unsigned char want[8];
    switch (t) {
      case DataType::Float16: { auto v = ref_double_to_half(static_cast<float>(ref_half_to_double(load<std::uint16_t>(in))) / 3.0f); std::memcpy(want, &v, 2); break; }
      case DataType::BFloat16: { auto v = ref_double_to_bf16(ref_bf16_to_float(load<std::uint16_t>(in)) / 3.0f); std::memcpy(want, &v, 2); break; }
      case DataType::Float32: { float v = load<float>(in) / 3.0f; std::memcpy(want, &v, 4); break; }
      default: { double v = load<double>(in) / 3.0; std::memcpy(want, &v, 8); break; }
    }
    const bool ok = is_nan(t, want) ? is_nan(t, g) : std::memcmp(g, want, elem) == 0;
    if (!ok) FAIL("index " << i << ": got " << hex(g, elem) << ", expected " << hex(want, elem));
  }
  std::int32_t ints[] = {6};
  REQUIRE_THROWS_AS(core::scale(ints, 1, DataType::Int32, 2.0), Error);
}

TEST_CASE("invalid dtype, op or null buffers are InvalidArgument", "[reduce]") {
  float x[1] = {1};
  auto code_of = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;
  };
  CHECK(code_of([&] { core::reduce(x, x, 1, static_cast<DataType>(42), ReduceOp::Sum); }) ==
        ErrorCode::InvalidArgument);
  CHECK(code_of([&] { core::reduce(x, x, 1, DataType::Float32, static_cast<ReduceOp>(9)); }) ==
        ErrorCode::InvalidArgument);
  CHECK(code_of([&] { core::reduce(nullptr, x, 1, DataType::Float32, ReduceOp::Sum); }) ==
        ErrorCode::InvalidArgument);
  // count 0 with null pointers is a no-op, as for memcpy
  core::reduce(nullptr, nullptr, 0, DataType::Float32, ReduceOp::Sum);
  CHECK(std::string(core::reduce_isa()).size() > 0);
}
