#include "core/reduce_f16_x86.hpp"

#include "kernels/reduce.cuh"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KIZUNA_F16X86 1
#else
#define KIZUNA_F16X86 0
#endif

namespace kizuna::core::f16x86 {

#if KIZUNA_F16X86
namespace {

#define KIZUNA_AVX2 __attribute__((target("avx2,f16c,fma")))
#define KIZUNA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

enum Kind { kSum, kProd, kMin, kMax };

// Min/Max keep a where a < b (or a > b) or a is NaN, else b: NaN from either
// side propagates, as in kernels::MinOp / MaxOp.
template <Kind K>
KIZUNA_AVX2 inline __m256 op(__m256 a, __m256 b) {
  if constexpr (K == kSum) return _mm256_add_ps(a, b);
  else if constexpr (K == kProd) return _mm256_mul_ps(a, b);
  else {
    const __m256 keep_a = _mm256_or_ps(
        _mm256_cmp_ps(a, b, K == kMin ? _CMP_LT_OQ : _CMP_GT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    return _mm256_blendv_ps(b, a, keep_a);
  }
}

template <Kind K>
KIZUNA_AVX512 inline __m512 op(__m512 a, __m512 b) {
  if constexpr (K == kSum) return _mm512_add_ps(a, b);
  else if constexpr (K == kProd) return _mm512_mul_ps(a, b);
  else {
    const __mmask16 keep_a = _mm512_cmp_ps_mask(a, b, K == kMin ? _CMP_LT_OQ : _CMP_GT_OQ) |
                             _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(keep_a, b, a);
  }
}

template <Kind K>
struct ScalarOp;
template <> struct ScalarOp<kSum> : kernels::SumOp {};
template <> struct ScalarOp<kProd> : kernels::ProdOp {};
template <> struct ScalarOp<kMin> : kernels::MinOp {};
template <> struct ScalarOp<kMax> : kernels::MaxOp {};

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

template <Kind K>
void tail(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b, std::size_t i,
          std::size_t n) {
  for (; i < n; ++i) dst[i] = kernels::reduce_element<kernels::Half, ScalarOp<K>>(a[i], b[i]);
}

template <Kind K>
KIZUNA_AVX2 void reduce_avx2(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b,
                             std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 a1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i + 8)));
    const __m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    const __m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i + 8)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(op<K>(a0, b0), kRound));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 8), _mm256_cvtps_ph(op<K>(a1, b1), kRound));
  }
  tail<K>(dst, a, b, i, n);
}

template <Kind K>
KIZUNA_AVX512 void reduce_avx512(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b,
                                 std::size_t n) {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)));
    const __m512 a1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i + 16)));
    const __m512 b0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    const __m512 b1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i + 16)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtps_ph(op<K>(a0, b0), kRound));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 16), _mm512_cvtps_ph(op<K>(a1, b1), kRound));
  }
  tail<K>(dst, a, b, i, n);
}

KIZUNA_AVX2 void scale_avx2(std::uint16_t* dst, std::size_t n, float divisor) {
  const __m256 d = _mm256_set1_ps(divisor);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dst + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_div_ps(x, d), kRound));
  }
  for (; i < n; ++i) dst[i] = kernels::float_to_half(kernels::half_to_float(dst[i]) / divisor);
}

KIZUNA_AVX512 void scale_avx512(std::uint16_t* dst, std::size_t n, float divisor) {
  const __m512 d = _mm512_set1_ps(divisor);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtps_ph(_mm512_div_ps(x, d), kRound));
  }
  for (; i < n; ++i) dst[i] = kernels::float_to_half(kernels::half_to_float(dst[i]) / divisor);
}

enum class Level { None, Avx2, Avx512 };

Level cpu_level() {
  static const Level level = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      return Level::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") &&
        __builtin_cpu_supports("fma"))
      return Level::Avx2;
    return Level::None;
  }();
  return level;
}

template <Kind K>
bool dispatch(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b, std::size_t n) {
  switch (cpu_level()) {
    case Level::Avx512: reduce_avx512<K>(dst, a, b, n); return true;
    case Level::Avx2: reduce_avx2<K>(dst, a, b, n); return true;
    case Level::None: return false;
  }
  return false;
}

}  // namespace

bool reduce(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b, std::size_t n,
            ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return dispatch<kSum>(dst, a, b, n);
    case ReduceOp::Prod: return dispatch<kProd>(dst, a, b, n);
    case ReduceOp::Min: return dispatch<kMin>(dst, a, b, n);
    case ReduceOp::Max: return dispatch<kMax>(dst, a, b, n);
  }
  return false;
}

bool scale(std::uint16_t* dst, std::size_t n, float divisor) {
  switch (cpu_level()) {
    case Level::Avx512: scale_avx512(dst, n, divisor); return true;
    case Level::Avx2: scale_avx2(dst, n, divisor); return true;
    case Level::None: return false;
  }
  return false;
}

#else  // not x86-64

bool reduce(std::uint16_t*, const std::uint16_t*, const std::uint16_t*, std::size_t, ReduceOp) {
  return false;
}
bool scale(std::uint16_t*, std::size_t, float) { return false; }

#endif

}  // namespace kizuna::core::f16x86
