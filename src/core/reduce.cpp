#include "core/reduce.hpp"

#include <cstdint>
#include <cstring>

#include "core/check.hpp"
#include "core/reduce_f16_x86.hpp"
#include "kernels/reduce.cuh"

// Runtime dispatch: GCC compiles each KIZUNA_CLONES function for three
// instruction sets and an ifunc resolver picks one when libkizuna loads.
// Sanitizer builds go without: ifunc resolvers run before the sanitizer
// runtime is up and crash it.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(KIZUNA_NO_CLONES)
#define KIZUNA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define KIZUNA_HAVE_CLONES 1
#else
#define KIZUNA_CLONES
#define KIZUNA_HAVE_CLONES 0
#endif

#define KIZUNA_INLINE inline __attribute__((always_inline))

namespace kizuna::core {
namespace {

using kernels::BFloat;
using kernels::Half;
using kernels::MaxOp;
using kernels::MinOp;
using kernels::Plain;
using kernels::ProdOp;
using kernels::SumOp;

// ---- loops ------------------------------------------------------------------
// __restrict lets the vectoriser skip run-time overlap checks; the public
// entry points route dst == a / dst == b to the two-operand form first.

template <typename Codec, typename Op>
KIZUNA_INLINE void loop2(typename Codec::Storage* __restrict dst,
                         const typename Codec::Storage* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = kernels::reduce_element<Codec, Op>(dst[i], src[i]);
}

template <typename Codec, typename Op>
KIZUNA_INLINE void loop3(typename Codec::Storage* __restrict dst,
                         const typename Codec::Storage* __restrict a,
                         const typename Codec::Storage* __restrict b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = kernels::reduce_element<Codec, Op>(a[i], b[i]);
}

// ArithCodec runs Sum/Prod (unsigned for integers, so they wrap), OrderCodec
// runs Min/Max (signed for signed integers). Both share the storage width.
template <typename ArithCodec, typename OrderCodec>
KIZUNA_INLINE void run2(void* dst, const void* src, std::size_t n, ReduceOp op) {
  using A = typename ArithCodec::Storage;
  using O = typename OrderCodec::Storage;
  static_assert(sizeof(A) == sizeof(O));
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: loop2<ArithCodec, SumOp>(static_cast<A*>(dst), static_cast<const A*>(src), n); break;
    case ReduceOp::Prod: loop2<ArithCodec, ProdOp>(static_cast<A*>(dst), static_cast<const A*>(src), n); break;
    case ReduceOp::Min: loop2<OrderCodec, MinOp>(static_cast<O*>(dst), static_cast<const O*>(src), n); break;
    case ReduceOp::Max: loop2<OrderCodec, MaxOp>(static_cast<O*>(dst), static_cast<const O*>(src), n); break;
  }
}

template <typename ArithCodec, typename OrderCodec>
KIZUNA_INLINE void run3(void* dst, const void* a, const void* b, std::size_t n, ReduceOp op) {
  using A = typename ArithCodec::Storage;
  using O = typename OrderCodec::Storage;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      loop3<ArithCodec, SumOp>(static_cast<A*>(dst), static_cast<const A*>(a), static_cast<const A*>(b), n);
      break;
    case ReduceOp::Prod:
      loop3<ArithCodec, ProdOp>(static_cast<A*>(dst), static_cast<const A*>(a), static_cast<const A*>(b), n);
      break;
    case ReduceOp::Min:
      loop3<OrderCodec, MinOp>(static_cast<O*>(dst), static_cast<const O*>(a), static_cast<const O*>(b), n);
      break;
    case ReduceOp::Max:
      loop3<OrderCodec, MaxOp>(static_cast<O*>(dst), static_cast<const O*>(a), static_cast<const O*>(b), n);
      break;
  }
}

template <typename Codec, typename Divisor>
KIZUNA_INLINE void scale_loop(typename Codec::Storage* __restrict dst, std::size_t n, Divisor d) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = Codec::store(Codec::load(dst[i]) / d);
}

// ---- one cloned entry per storage type ---------------------------------------

#define KIZUNA_DEFINE_REDUCE(suffix, ArithCodec, OrderCodec)                                  \
  KIZUNA_CLONES void reduce2_##suffix(void* dst, const void* src, std::size_t n, ReduceOp op) { \
    run2<ArithCodec, OrderCodec>(dst, src, n, op);                                            \
  }                                                                                           \
  KIZUNA_CLONES void reduce3_##suffix(void* dst, const void* a, const void* b, std::size_t n, \
                                      ReduceOp op) {                                          \
    run3<ArithCodec, OrderCodec>(dst, a, b, n, op);                                           \
  }

KIZUNA_DEFINE_REDUCE(i8, Plain<std::uint8_t>, Plain<std::int8_t>)
KIZUNA_DEFINE_REDUCE(u8, Plain<std::uint8_t>, Plain<std::uint8_t>)
KIZUNA_DEFINE_REDUCE(i32, Plain<std::uint32_t>, Plain<std::int32_t>)
KIZUNA_DEFINE_REDUCE(u32, Plain<std::uint32_t>, Plain<std::uint32_t>)
KIZUNA_DEFINE_REDUCE(i64, Plain<std::uint64_t>, Plain<std::int64_t>)
KIZUNA_DEFINE_REDUCE(u64, Plain<std::uint64_t>, Plain<std::uint64_t>)
KIZUNA_DEFINE_REDUCE(f16_portable, Half, Half)
KIZUNA_DEFINE_REDUCE(bf16, BFloat, BFloat)
KIZUNA_DEFINE_REDUCE(f32, Plain<float>, Plain<float>)
KIZUNA_DEFINE_REDUCE(f64, Plain<double>, Plain<double>)
#undef KIZUNA_DEFINE_REDUCE

KIZUNA_CLONES void scale_f16_portable(void* dst, std::size_t n, float d) {
  scale_loop<Half>(static_cast<std::uint16_t*>(dst), n, d);
}

// float16 prefers the CPU's converters (core/reduce_f16_x86.hpp).
void reduce2_f16(void* dst, const void* src, std::size_t n, ReduceOp op) {
  auto* d = static_cast<std::uint16_t*>(dst);
  if (!f16x86::reduce(d, d, static_cast<const std::uint16_t*>(src), n, op))
    reduce2_f16_portable(dst, src, n, op);
}
void reduce3_f16(void* dst, const void* a, const void* b, std::size_t n, ReduceOp op) {
  if (!f16x86::reduce(static_cast<std::uint16_t*>(dst), static_cast<const std::uint16_t*>(a),
                      static_cast<const std::uint16_t*>(b), n, op))
    reduce3_f16_portable(dst, a, b, n, op);
}
void scale_f16(void* dst, std::size_t n, float d) {
  if (!f16x86::scale(static_cast<std::uint16_t*>(dst), n, d)) scale_f16_portable(dst, n, d);
}
KIZUNA_CLONES void scale_bf16(void* dst, std::size_t n, float d) {
  scale_loop<BFloat>(static_cast<std::uint16_t*>(dst), n, d);
}
KIZUNA_CLONES void scale_f32(void* dst, std::size_t n, float d) {
  scale_loop<Plain<float>>(static_cast<float*>(dst), n, d);
}
KIZUNA_CLONES void scale_f64(void* dst, std::size_t n, double d) {
  scale_loop<Plain<double>>(static_cast<double*>(dst), n, d);
}

using Reduce2 = void (*)(void*, const void*, std::size_t, ReduceOp);
using Reduce3 = void (*)(void*, const void*, const void*, std::size_t, ReduceOp);

struct Kernels {
  Reduce2 reduce2;
  Reduce3 reduce3;
};

Kernels kernels_for(DataType dtype) {
  switch (dtype) {
    case DataType::Int8: return {reduce2_i8, reduce3_i8};
    case DataType::UInt8: return {reduce2_u8, reduce3_u8};
    case DataType::Int32: return {reduce2_i32, reduce3_i32};
    case DataType::UInt32: return {reduce2_u32, reduce3_u32};
    case DataType::Int64: return {reduce2_i64, reduce3_i64};
    case DataType::UInt64: return {reduce2_u64, reduce3_u64};
    case DataType::Float16: return {reduce2_f16, reduce3_f16};
    case DataType::BFloat16: return {reduce2_bf16, reduce3_bf16};
    case DataType::Float32: return {reduce2_f32, reduce3_f32};
    case DataType::Float64: return {reduce2_f64, reduce3_f64};
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, "invalid data type code ", static_cast<int>(dtype));
}

void check_args(DataType dtype, ReduceOp op) {
  KIZUNA_CHECK_ARG(is_valid(dtype), "invalid data type code ", static_cast<int>(dtype));
  KIZUNA_CHECK_ARG(is_valid(op), "invalid reduction code ", static_cast<int>(op));
}

// `alignment` is an element size, a power of two: a mask, not a division.
// A 64-bit division costs about 10 ns on this project's machine, and
// reduce_into() tests three pointers: 2 float32 took 44-49 ns a call with
// the remainder, 11-19 ns with the mask (bench/bench_reduce).
bool aligned(const void* p, std::size_t alignment) {
  return (reinterpret_cast<std::uintptr_t>(p) & (alignment - 1)) == 0;
}

// Pointers that are not aligned to their element size (a byte offset into a
// packed message, say) go through aligned bounce buffers a block at a time:
// the vectorised loops may assume natural alignment, the callers may not.
constexpr std::size_t kBounceBytes = 4096;

template <typename Fn>
void bounce(void* dst, const void* a, const void* b, std::size_t count, std::size_t elem, Fn&& fn) {
  alignas(64) unsigned char da[kBounceBytes];
  alignas(64) unsigned char db[kBounceBytes];
  const std::size_t per_block = kBounceBytes / elem;
  auto* out = static_cast<unsigned char*>(dst);
  auto* ina = static_cast<const unsigned char*>(a);
  auto* inb = static_cast<const unsigned char*>(b);
  for (std::size_t done = 0; done < count; done += per_block) {
    const std::size_t n = count - done < per_block ? count - done : per_block;
    const std::size_t bytes = n * elem;
    std::memcpy(da, ina + done * elem, bytes);
    std::memcpy(db, inb + done * elem, bytes);
    fn(static_cast<void*>(da), static_cast<const void*>(db), n);
    std::memcpy(out + done * elem, da, bytes);
  }
}

}  // namespace

void reduce(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op) {
  check_args(dtype, op);
  if (count == 0) return;
  KIZUNA_CHECK_ARG(dst != nullptr && src != nullptr, "reduce: null buffer with count ", count);
  const Kernels k = kernels_for(dtype);
  const std::size_t elem = size_of(dtype);
  if (dst == src) {
    // x op x: fold through a copy so the restrict loop never sees aliasing.
    bounce(dst, src, src, count, elem,
           [&](void* d, const void* s, std::size_t n) { k.reduce2(d, s, n, op); });
    return;
  }
  if (!aligned(dst, elem) || !aligned(src, elem)) {
    bounce(dst, dst, src, count, elem,
           [&](void* d, const void* s, std::size_t n) { k.reduce2(d, s, n, op); });
    return;
  }
  k.reduce2(dst, src, count, op);
}

void reduce_into(void* dst, const void* a, const void* b, std::size_t count, DataType dtype,
                 ReduceOp op) {
  check_args(dtype, op);
  if (count == 0) return;
  KIZUNA_CHECK_ARG(dst != nullptr && a != nullptr && b != nullptr,
                   "reduce_into: null buffer with count ", count);
  // Every operator is commutative, so dst == b folds a into dst.
  if (dst == a) return reduce(dst, b, count, dtype, op);
  if (dst == b) return reduce(dst, a, count, dtype, op);
  const Kernels k = kernels_for(dtype);
  const std::size_t elem = size_of(dtype);
  if (!aligned(dst, elem) || !aligned(a, elem) || !aligned(b, elem)) {
    bounce(dst, a, b, count, elem,
           [&](void* d, const void* s, std::size_t n) { k.reduce2(d, s, n, op); });
    return;
  }
  k.reduce3(dst, a, b, count, op);
}

void reduce_into_portable(void* dst, const void* a, const void* b, std::size_t count,
                          DataType dtype, ReduceOp op) {
  if (dtype == DataType::Float16 && is_valid(op) && count > 0 && dst != a && dst != b &&
      aligned(dst, 2) && aligned(a, 2) && aligned(b, 2)) {
    reduce3_f16_portable(dst, a, b, count, op);
    return;
  }
  reduce_into(dst, a, b, count, dtype, op);
}

void scale(void* dst, std::size_t count, DataType dtype, double divisor) {
  KIZUNA_CHECK_ARG(is_valid(dtype), "invalid data type code ", static_cast<int>(dtype));
  KIZUNA_CHECK_ARG(is_floating(dtype), "scale (Avg) is defined for floating types only, not ",
                   name(dtype));
  if (count == 0) return;
  KIZUNA_CHECK_ARG(dst != nullptr, "scale: null buffer with count ", count);
  const std::size_t elem = size_of(dtype);
  auto run = [&](void* p, std::size_t n) {
    switch (dtype) {
      case DataType::Float16: scale_f16(p, n, static_cast<float>(divisor)); break;
      case DataType::BFloat16: scale_bf16(p, n, static_cast<float>(divisor)); break;
      case DataType::Float32: scale_f32(p, n, static_cast<float>(divisor)); break;
      default: scale_f64(p, n, divisor); break;
    }
  };
  if (!aligned(dst, elem)) {
    bounce(dst, dst, dst, count, elem, [&](void* d, const void*, std::size_t n) { run(d, n); });
    return;
  }
  run(dst, count);
}

const char* reduce_isa() {
#if KIZUNA_HAVE_CLONES
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
#endif
  return "baseline";
}

}  // namespace kizuna::core
