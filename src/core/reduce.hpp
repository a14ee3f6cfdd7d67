// core/reduce.hpp: element-wise reductions on host memory, for every
// DataType x ReduceOp.
//
// These are the inner loops of every CPU collective: a received slice is
// folded into the local buffer with reduce(), and Avg divides once at the
// end with scale(). They are written so the compiler vectorises them and are
// compiled three times (x86-64, x86-64-v3 = AVX2+F16C+FMA, x86-64-v4 =
// AVX-512); the loader picks the best one for the running CPU, so the
// portable build runs on any x86-64.
//
// Semantics are those of kernels/reduce.cuh: 16-bit floats computed in
// float32 and rounded to nearest-even when stored, NaN propagates, integers
// wrap. Avg reduces as Sum. Pointers need no alignment. reduce_into allows
// dst == a or dst == b; any other overlap is undefined, as for memcpy.
// Thread-safe (no state); throws InvalidArgument for an invalid dtype/op.
#pragma once

#include <kizuna/types.hpp>

#include <cstddef>

namespace kizuna::core {

// dst[i] = dst[i] op src[i]
void reduce(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op);

// dst[i] = a[i] op b[i]
void reduce_into(void* dst, const void* a, const void* b, std::size_t count, DataType dtype,
                 ReduceOp op);

// reduce_into through the generic loops only, skipping hand-written fast
// paths (float16's F16C/AVX-512 converters); the tests compare both.
void reduce_into_portable(void* dst, const void* a, const void* b, std::size_t count,
                          DataType dtype, ReduceOp op);

// dst[i] = dst[i] / divisor, for floating types (Avg's final step). Integer
// types are an InvalidArgument: Avg is defined for floating types only.
void scale(void* dst, std::size_t count, DataType dtype, double divisor);

// Name of the instruction set the reductions run with on this CPU
// ("avx512", "avx2" or "baseline"), for logs and benchmarks.
const char* reduce_isa();

}  // namespace kizuna::core
