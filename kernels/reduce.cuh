// kernels/reduce.cuh: the element-level arithmetic of every reduction, once,
// for the CPU and the GPU.
//
// Everything here is a header-only __host__ __device__ function of plain
// integers and floats: the CPU reductions in core/reduce.cpp are built from
// these functors, the CUDA reduce kernel and the schedule interpreter
// instantiate the same ones, and the CPU unit tests check them without a GPU.
//
// Semantics (shared by every backend):
//   - float16 and bfloat16 are computed in float32 and rounded to nearest,
//     ties to even, when stored; NaN stays NaN (as the canonical quiet NaN).
//   - NaN propagates through Sum, Prod, Min and Max.
//   - integers wrap (Sum and Prod are computed on the unsigned type of the
//     same width, so signed overflow is defined).
//
// The conversions are branch-free (selects, not jumps) so that compilers
// vectorise loops over them; they follow F. Giesen's well-known
// half<->float bit recipes.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KIZUNA_HD __host__ __device__ __forceinline__
#else
#define KIZUNA_HD inline __attribute__((always_inline))
#endif

namespace kizuna::kernels {

KIZUNA_HD float bits_to_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

KIZUNA_HD std::uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

// IEEE binary16 (stored as its 16 bits) -> float32. Exact.
KIZUNA_HD float half_to_float(std::uint16_t h) {
  constexpr std::uint32_t kShiftedExp = 0x7c00u << 13;  // exponent mask after the shift
  const std::uint32_t magnitude = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t exp = magnitude & kShiftedExp;
  std::uint32_t normal = magnitude + ((127u - 15u) << 23);  // rebias the exponent
  // Inf/NaN: push the exponent to 255.
  const std::uint32_t inf_nan = normal + ((128u - 16u) << 23);
  // Subnormal: let the FPU normalise it (adding an implicit 1 and subtracting 2^-14).
  const float sub = bits_to_float(normal + (1u << 23)) - bits_to_float(113u << 23);
  std::uint32_t out = exp == kShiftedExp ? inf_nan : normal;
  out = exp == 0 ? float_to_bits(sub) : out;
  return bits_to_float(out | (static_cast<std::uint32_t>(h & 0x8000u) << 16));
}

// float32 -> IEEE binary16, round to nearest even; overflow -> Inf, NaN -> 0x7e00.
KIZUNA_HD std::uint16_t float_to_half(float value) {
  constexpr std::uint32_t kF32Inf = 255u << 23;
  constexpr std::uint32_t kF16Max = (127u + 16u) << 23;  // first float that rounds to Inf
  constexpr std::uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  std::uint32_t u = float_to_bits(value);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  // Too large, Inf or NaN.
  const std::uint32_t big = u > kF32Inf ? 0x7e00u : 0x7c00u;
  // Subnormal result: an FPU add aligns the mantissa and rounds it for us.
  const std::uint32_t sub = float_to_bits(bits_to_float(u) + bits_to_float(kDenormMagic)) - kDenormMagic;
  // Normal result: rebias, then round to nearest even on the 13 dropped bits.
  const std::uint32_t mant_odd = (u >> 13) & 1u;
  const std::uint32_t normal = (u + ((15u - 127u) << 23) + 0xfffu + mant_odd) >> 13;
  std::uint32_t out = u < (113u << 23) ? sub : normal;
  out = u >= kF16Max ? big : out;
  return static_cast<std::uint16_t>(out | (sign >> 16));
}

// bfloat16 (the high 16 bits of a float32) -> float32. Exact.
KIZUNA_HD float bf16_to_float(std::uint16_t b) {
  return bits_to_float(static_cast<std::uint32_t>(b) << 16);
}

// float32 -> bfloat16, round to nearest even; NaN stays a (quiet) NaN.
KIZUNA_HD std::uint16_t float_to_bf16(float value) {
  const std::uint32_t u = float_to_bits(value);
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<std::uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
}

// ---- operators ------------------------------------------------------------
// apply(a, b) for T in {uint8..uint64 (wrapping), int8..int64 (Min/Max only),
// float, double}. Callers map signed Sum/Prod to the unsigned type.

struct SumOp {
  template <typename T>
  KIZUNA_HD static T apply(T a, T b) { return static_cast<T>(a + b); }
};

struct ProdOp {
  template <typename T>
  KIZUNA_HD static T apply(T a, T b) { return static_cast<T>(a * b); }
};

// Min and Max return a when a is NaN, and b when b is NaN (a < NaN is false),
// so NaN propagates from either side. For integers `a != a` is always false.
struct MinOp {
  template <typename T>
  KIZUNA_HD static T apply(T a, T b) { return (a < b || a != a) ? a : b; }
};

struct MaxOp {
  template <typename T>
  KIZUNA_HD static T apply(T a, T b) { return (a > b || a != a) ? a : b; }
};

// ---- storage codecs ---------------------------------------------------------
// How an element is loaded into the type the arithmetic runs in, and stored
// back. Plain types are their own compute type; the 16-bit floats compute in
// float32.

template <typename T>
struct Plain {
  using Storage = T;
  using Compute = T;
  KIZUNA_HD static Compute load(Storage s) { return s; }
  KIZUNA_HD static Storage store(Compute c) { return c; }
};

struct Half {
  using Storage = std::uint16_t;
  using Compute = float;
  KIZUNA_HD static Compute load(Storage s) { return half_to_float(s); }
  KIZUNA_HD static Storage store(Compute c) { return float_to_half(c); }
};

struct BFloat {
  using Storage = std::uint16_t;
  using Compute = float;
  KIZUNA_HD static Compute load(Storage s) { return bf16_to_float(s); }
  KIZUNA_HD static Storage store(Compute c) { return float_to_bf16(c); }
};

// One element of dst = a op b.
template <typename Codec, typename Op>
KIZUNA_HD typename Codec::Storage reduce_element(typename Codec::Storage a,
                                                 typename Codec::Storage b) {
  return Codec::store(Op::apply(Codec::load(a), Codec::load(b)));
}

}  // namespace kizuna::kernels
