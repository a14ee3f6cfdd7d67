#include "ddp/cast.hpp"

#include "core/check.hpp"
#include "kernels/reduce.cuh"

namespace kizuna::ddp {

namespace {

template <typename Src>
void compress_typed(std::uint16_t* __restrict dst, const Src* __restrict src, std::size_t n,
                    bool half, float divisor) {
  if (half) {
    for (std::size_t i = 0; i < n; ++i)
      dst[i] = kernels::float_to_half(static_cast<float>(src[i]) / divisor);
  } else {
    for (std::size_t i = 0; i < n; ++i)
      dst[i] = kernels::float_to_bf16(static_cast<float>(src[i]) / divisor);
  }
}

template <typename Dst>
void decompress_typed(Dst* __restrict dst, const std::uint16_t* __restrict src, std::size_t n,
                      bool half) {
  if (half) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(kernels::half_to_float(src[i]));
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(kernels::bf16_to_float(src[i]));
  }
}

}  // namespace

void compress(std::uint16_t* dst, const void* src, std::size_t count, DataType from, DataType to,
              double divisor) {
  KIZUNA_CHECK(to == DataType::Float16 || to == DataType::BFloat16, "to ", name(to));
  const bool half = to == DataType::Float16;
  const float d = static_cast<float>(divisor);
  switch (from) {
    case DataType::Float32: return compress_typed(dst, static_cast<const float*>(src), count, half, d);
    case DataType::Float64: return compress_typed(dst, static_cast<const double*>(src), count, half, d);
    default: KIZUNA_CHECK(false, "compress from ", name(from));
  }
}

void decompress(void* dst, const std::uint16_t* src, std::size_t count, DataType to, DataType from) {
  KIZUNA_CHECK(from == DataType::Float16 || from == DataType::BFloat16, "from ", name(from));
  const bool half = from == DataType::Float16;
  switch (to) {
    case DataType::Float32: return decompress_typed(static_cast<float*>(dst), src, count, half);
    case DataType::Float64: return decompress_typed(static_cast<double*>(dst), src, count, half);
    default: KIZUNA_CHECK(false, "decompress to ", name(to));
  }
}

}  // namespace kizuna::ddp
