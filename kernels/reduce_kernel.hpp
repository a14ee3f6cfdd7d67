// kernels/reduce_kernel.hpp: host launcher of the element-wise reduction
// kernel (kernels/reduce_kernel.cu), for device memory.
//
// reduce(dst, src, count, dtype, op, stream) enqueues dst[i] = dst[i] op src[i]
// on `stream` (a cudaStream_t passed opaquely; nullptr = the legacy default
// stream) and returns at once. The element arithmetic is kernels/reduce.cuh,
// the same functors the CPU reductions use. Throws kizuna::Error(CudaError)
// when the launch fails, InvalidArgument for a bad dtype or op.
// Built only when KIZUNA_HAS_CUDA.
#pragma once

#include <kizuna/types.hpp>

#include <cstddef>

namespace kizuna::kernels {

void reduce(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op,
            void* stream);

}  // namespace kizuna::kernels
