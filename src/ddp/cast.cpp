// Compression casts. Two paths:
//   float32 <-> float16 on a CPU with F16C: explicit AVX2 loops, eight
//     conversions per vcvtps2ph / vcvtph2ps (GCC does not vectorise the
//     portable codec into them);
//   everything else: the portable codecs of kernels/reduce.cuh in plain
//     loops that GCC vectorises, compiled for x86-64-v4, -v3 and baseline
//     (target_clones; the loader picks one for the running CPU).
// Both round to nearest even; they agree on every value but NaN payloads
// (F16C keeps the top payload bits where the codec writes 0x7e00): NaN stays
// NaN either way.
#include "ddp/cast.hpp"

#include "core/check.hpp"
#include "kernels/reduce.cuh"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(KIZUNA_NO_CLONES)
#define KIZUNA_DDP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KIZUNA_DDP_CLONES
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KIZUNA_DDP_F16C 1
#define KIZUNA_DDP_AVX2 __attribute__((target("avx2,f16c")))
#else
#define KIZUNA_DDP_F16C 0
#endif

namespace kizuna::ddp {

namespace {

template <typename Src>
KIZUNA_DDP_CLONES void compress_loop(std::uint16_t* __restrict dst, const Src* __restrict src,
                                     std::size_t n, bool half, float divisor) {
  if (half) {
    for (std::size_t i = 0; i < n; ++i)
      dst[i] = kernels::float_to_half(static_cast<float>(src[i]) / divisor);
  } else {
    for (std::size_t i = 0; i < n; ++i)
      dst[i] = kernels::float_to_bf16(static_cast<float>(src[i]) / divisor);
  }
}

template <typename Dst>
KIZUNA_DDP_CLONES void decompress_loop(Dst* __restrict dst, const std::uint16_t* __restrict src,
                                       std::size_t n, bool half) {
  if (half) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(kernels::half_to_float(src[i]));
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(kernels::bf16_to_float(src[i]));
  }
}

#if KIZUNA_DDP_F16C
bool has_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  }();
  return yes;
}

KIZUNA_DDP_AVX2 void compress_f16c(std::uint16_t* dst, const float* src, std::size_t n, float divisor) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256 d = _mm256_set1_ps(divisor);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_div_ps(_mm256_loadu_ps(src + i), d);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(x, kRound));
  }
  for (; i < n; ++i) dst[i] = kernels::float_to_half(src[i] / divisor);
}

KIZUNA_DDP_AVX2 void decompress_f16c(float* dst, const std::uint16_t* src, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = kernels::half_to_float(src[i]);
}
#endif

}  // namespace

void compress(std::uint16_t* dst, const void* src, std::size_t count, DataType from, DataType to,
              double divisor) {
  KIZUNA_CHECK(to == DataType::Float16 || to == DataType::BFloat16, "to ", name(to));
  const bool half = to == DataType::Float16;
  const float d = static_cast<float>(divisor);
  switch (from) {
    case DataType::Float32:
#if KIZUNA_DDP_F16C
      if (half && has_f16c()) return compress_f16c(dst, static_cast<const float*>(src), count, d);
#endif
      return compress_loop(dst, static_cast<const float*>(src), count, half, d);
    case DataType::Float64:
      return compress_loop(dst, static_cast<const double*>(src), count, half, d);
    default: KIZUNA_CHECK(false, "compress from ", name(from));
  }
}

void decompress(void* dst, const std::uint16_t* src, std::size_t count, DataType to, DataType from) {
  KIZUNA_CHECK(from == DataType::Float16 || from == DataType::BFloat16, "from ", name(from));
  const bool half = from == DataType::Float16;
  switch (to) {
    case DataType::Float32:
#if KIZUNA_DDP_F16C
      if (half && has_f16c()) return decompress_f16c(static_cast<float*>(dst), src, count);
#endif
      return decompress_loop(static_cast<float*>(dst), src, count, half);
    case DataType::Float64: return decompress_loop(static_cast<double*>(dst), src, count, half);
    default: KIZUNA_CHECK(false, "decompress to ", name(to));
  }
}

}  // namespace kizuna::ddp
