// tests/support/collective_reference.hpp: closed-form inputs and expected
// results for collective tests, so a check needs no communication.
//
// Inputs are computed from (rank, index). They are chosen so that every
// reduction is exact in every type whatever the order ranks are combined in:
//   integers   arbitrary bit patterns (Sum and Prod wrap, which is exact)
//   floats     small integers in [-4, 4] (sums of up to 64 ranks are exact
//              even in bfloat16), and for Prod only +-1, 2 and 0.5 placed so
//              that products stay far from overflow
// So results are compared bit for bit, floats included; Avg is the exact sum
// divided once with core::scale, as the communicator does.
#pragma once

#include <kizuna/error.hpp>
#include <kizuna/types.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/reduce.hpp"
#include "reference.hpp"

namespace kizuna::test {

class CollectiveReference {
 public:
  CollectiveReference(DataType dtype, ReduceOp op) : dtype_(dtype), op_(op) {}

  std::size_t elem() const { return size_of(dtype_); }

  // Element `i` of rank `rank`'s input, written as bytes to `out`.
  void input(int rank, std::uint64_t i, unsigned char* out) const {
    if (!is_floating(dtype_)) {
      const std::uint64_t bits = mix(static_cast<std::uint64_t>(rank) + 1, i);
      std::memcpy(out, &bits, elem());
      return;
    }
    encode(float_input(rank, i), out);
  }

  std::vector<unsigned char> input_buffer(int rank, std::uint64_t count,
                                          std::uint64_t first = 0) const {
    std::vector<unsigned char> buf(count * elem());
    for (std::uint64_t i = 0; i < count; ++i) input(rank, first + i, buf.data() + i * elem());
    return buf;
  }

  // Element `i` reduced over ranks 0..world-1 (with Avg's division).
  void reduced(int world, std::uint64_t i, unsigned char* out) const {
    if (!is_floating(dtype_)) {
      std::uint64_t acc = 0;
      unsigned char a[8], b[8];
      input(0, i, a);
      for (int r = 1; r < world; ++r) {
        input(r, i, b);
        combine_int(a, b);
      }
      std::memcpy(&acc, a, elem());
      std::memcpy(out, &acc, elem());
      return;
    }
    double acc = float_input(0, i);
    for (int r = 1; r < world; ++r) acc = ref_apply(op_, acc, float_input(r, i));
    encode(acc, out);
    if (op_ == ReduceOp::Avg) core::scale(out, 1, dtype_, world);
  }

  bool equal(const unsigned char* got, const unsigned char* want) const {
    return std::memcmp(got, want, elem()) == 0;
  }

  // "" when got[0..count) == expected(first + i) for every i; otherwise a
  // message naming the first wrong index, got and expected.
  template <typename Expected>
  std::string compare(const unsigned char* got, std::uint64_t count, Expected&& expected) const {
    unsigned char want[8];
    for (std::uint64_t i = 0; i < count; ++i) {
      expected(i, want);
      if (!equal(got + i * elem(), want))
        return "first wrong index " + std::to_string(i) + ": got " + hex(got + i * elem()) +
               ", expected " + hex(want);
    }
    return "";
  }

  std::string hex(const unsigned char* p) const {
    static const char* digits = "0123456789abcdef";
    std::string s = "0x";
    for (std::size_t i = elem(); i-- > 0;) {
      s += digits[p[i] >> 4];
      s += digits[p[i] & 15];
    }
    return s;
  }

 private:
  double float_input(int rank, std::uint64_t i) const {
    const std::uint64_t h = mix(static_cast<std::uint64_t>(rank) + 101, i);
    if (op_ == ReduceOp::Prod) {
      const int k = static_cast<int>((static_cast<std::uint64_t>(rank) * 7 + i) % 11);
      const double magnitude = k == 0 ? 2.0 : k == 5 ? 0.5 : 1.0;
      return (h & 1) ? -magnitude : magnitude;
    }
    return static_cast<double>(static_cast<int>(h % 9) - 4);
  }

  void encode(double v, unsigned char* out) const {
    switch (dtype_) {
      case DataType::Float16: { const std::uint16_t h = ref_double_to_half(v); std::memcpy(out, &h, 2); break; }
      case DataType::BFloat16: { const std::uint16_t h = ref_double_to_bf16(v); std::memcpy(out, &h, 2); break; }
      case DataType::Float32: { const float f = static_cast<float>(v); std::memcpy(out, &f, 4); break; }
      default: std::memcpy(out, &v, 8); break;
    }
  }

  template <typename T>
  void combine_typed(unsigned char* a, const unsigned char* b) const {
    T x, y;
    std::memcpy(&x, a, sizeof x);
    std::memcpy(&y, b, sizeof y);
    x = ref_apply_int(op_, x, y);
    std::memcpy(a, &x, sizeof x);
  }

  void combine_int(unsigned char* a, const unsigned char* b) const {
    switch (dtype_) {
      case DataType::Int8: return combine_typed<std::int8_t>(a, b);
      case DataType::UInt8: return combine_typed<std::uint8_t>(a, b);
      case DataType::Int32: return combine_typed<std::int32_t>(a, b);
      case DataType::UInt32: return combine_typed<std::uint32_t>(a, b);
      case DataType::Int64: return combine_typed<std::int64_t>(a, b);
      default: return combine_typed<std::uint64_t>(a, b);
    }
  }

  DataType dtype_;
  ReduceOp op_;
};

inline constexpr DataType kAllDataTypes[] = {
    DataType::Int8,    DataType::UInt8,    DataType::Int32,   DataType::UInt32,
    DataType::Int64,   DataType::UInt64,   DataType::Float16, DataType::BFloat16,
    DataType::Float32, DataType::Float64};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min,
                                             ReduceOp::Max, ReduceOp::Avg};

}  // namespace kizuna::test
