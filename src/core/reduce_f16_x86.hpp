// core/reduce_f16_x86.hpp: float16 reductions with the CPU's own converters.
//
// The portable float16 codec (bit tricks, kernels/reduce.cuh) vectorises but
// costs a dozen instructions per conversion. x86 CPUs since Haswell convert
// 8 (F16C) or 16 (AVX-512F) halves per instruction, with the same rounding
// (to nearest even). These entry points use them when the running CPU has
// them and return false otherwise, so the caller falls back to the portable
// loop. Results are bit-identical to the portable path; the unit tests check
// both against the same reference.
#pragma once

#include <kizuna/types.hpp>

#include <cstddef>
#include <cstdint>

namespace kizuna::core::f16x86 {

// dst[i] = a[i] op b[i]; dst may equal a or b. Pointers 2-byte aligned.
bool reduce(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b, std::size_t n,
            ReduceOp op);
// dst[i] = dst[i] / divisor
bool scale(std::uint16_t* dst, std::size_t n, float divisor);

}  // namespace kizuna::core::f16x86
