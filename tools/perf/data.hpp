// perf/data.hpp: benchmark inputs in closed form, so that checking a result
// needs no communication (nccl-tests' way).
//
// Rank r's input element i is a pure function of (r, i); the element every
// rank should hold after a reduction is then computable locally, by folding
// that function over the ranks. The values are chosen so that the reduction
// is exact whatever order the ranks are combined in, which lets the check
// compare bits, floats included:
//   integers   hashed bit patterns; Sum and Prod wrap (exact modulo 2^bits)
//   floats     Sum/Avg/Min/Max: integers in [-m, m], m = 4 shrunk so that
//              world x m stays exact in the type (256 for bfloat16, 2048 for
//              float16); exact for up to 256 (bfloat16) or 2048 (float16)
//              ranks. Prod: +-1 everywhere except that one rank per element
//              (i mod world) holds +-2 or +-0.5, so every partial product is
//              +-1, +-2 or +-0.5.
// Avg is the exact sum divided once by the world size with core::scale,
// which is what the communicator does.
//
// The reference side is written here, independently of kizuna's reduction
// kernels (only Avg's final division is shared).
#pragma once

#include <kizuna/types.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kizuna::perf {

class ClosedForm {
 public:
  // Throws kizuna::Error(InvalidArgument) for Avg on an integer type.
  ClosedForm(DataType dtype, ReduceOp op, int world);

  DataType dtype() const { return dtype_; }
  ReduceOp op() const { return op_; }
  int world() const { return world_; }
  std::size_t elem() const { return size_of(dtype_); }

  // out[k] = rank's input element first + k, for k < n.
  void input(int rank, std::uint64_t first, std::size_t n, void* out) const;
  // out[k] = element first + k reduced over every rank.
  void reduced(std::uint64_t first, std::size_t n, void* out) const;

  // Counts the elements of got[0..n) that differ (bitwise) from
  // input(rank, first + k) or reduced(first + k). When `first_wrong` is not
  // null and nothing has been written to it yet, the first difference is
  // described there ("index 17: got 0x4040, expected 0x4000").
  std::uint64_t wrong_input(const void* got, int rank, std::uint64_t first, std::size_t n,
                            std::string* first_wrong = nullptr) const;
  std::uint64_t wrong_reduced(const void* got, std::uint64_t first, std::size_t n,
                              std::string* first_wrong = nullptr) const;

 private:
  template <typename Expected>
  std::uint64_t compare(const void* got, std::uint64_t first, std::size_t n, std::string* first_wrong,
                        Expected&& expected) const;
  double float_input(int rank, std::uint64_t i) const;

  DataType dtype_;
  ReduceOp op_;
  int world_;
  int magnitude_;  // m, for float Sum/Avg/Min/Max
};

// Round-to-nearest-even conversions of the 16-bit float formats.
std::uint16_t float_to_half(float f);
std::uint16_t float_to_bfloat16(float f);

}  // namespace kizuna::perf
