// ddp/cast.hpp: the compression hooks' conversions between a bucket's
// float32/float64 gradients and the 16-bit floats that travel.
//
// Rounding is to nearest even, as in the codecs of kernels/reduce.cuh (the
// ones every reduction uses); float32 <-> float16 uses the CPU's F16C
// instructions where it has them (same rounding). float64 goes through
// float32 on the way down (a second rounding, far below 16-bit precision).
// Vectorised loops (see cast.cpp); thread-safe.
#pragma once

#include <kizuna/types.hpp>

#include <cstddef>
#include <cstdint>

namespace kizuna::ddp {

// dst[i] = to_16(src[i] / divisor); `from` is Float32 or Float64, `to`
// Float16 or BFloat16.
void compress(std::uint16_t* dst, const void* src, std::size_t count, DataType from, DataType to,
              double divisor);

// dst[i] = from_16(src[i]) in dst's type (Float32 or Float64).
void decompress(void* dst, const std::uint16_t* src, std::size_t count, DataType to, DataType from);

}  // namespace kizuna::ddp
