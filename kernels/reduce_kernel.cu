// The element-wise reduction kernel: dst[i] = dst[i] op src[i] on the GPU.
// A grid-stride loop over elements; the arithmetic is reduce.cuh's, so the
// GPU and the CPU agree bit for bit (16-bit floats via float32, RNE).
#include <cuda_runtime.h>

#include "core/check.hpp"
#include "kernels/reduce.cuh"
#include "kernels/reduce_kernel.hpp"

namespace kizuna::kernels {
namespace {

template <typename Codec, typename Op>
__global__ void reduce_kernel(typename Codec::Storage* dst, const typename Codec::Storage* src,
                              std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride)
    dst[i] = reduce_element<Codec, Op>(dst[i], src[i]);
}

template <typename Codec, typename Op>
void launch(void* dst, const void* src, std::size_t count, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const std::size_t blocks = (count + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
  reduce_kernel<Codec, Op><<<grid, kThreads, 0, stream>>>(
      static_cast<typename Codec::Storage*>(dst), static_cast<const typename Codec::Storage*>(src),
      count);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    KIZUNA_THROW(ErrorCode::CudaError, "reduce_kernel launch failed: ", cudaGetErrorString(status));
}

template <typename Arith, typename Order>
void launch_op(void* dst, const void* src, std::size_t count, ReduceOp op, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return launch<Arith, SumOp>(dst, src, count, stream);
    case ReduceOp::Prod: return launch<Arith, ProdOp>(dst, src, count, stream);
    case ReduceOp::Min: return launch<Order, MinOp>(dst, src, count, stream);
    case ReduceOp::Max: return launch<Order, MaxOp>(dst, src, count, stream);
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, "invalid reduction code ", static_cast<int>(op));
}

}  // namespace

void reduce(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op,
            void* stream_handle) {
  if (count == 0) return;
  auto stream = static_cast<cudaStream_t>(stream_handle);
  switch (dtype) {
    case DataType::Int8: return launch_op<Plain<std::uint8_t>, Plain<std::int8_t>>(dst, src, count, op, stream);
    case DataType::UInt8: return launch_op<Plain<std::uint8_t>, Plain<std::uint8_t>>(dst, src, count, op, stream);
    case DataType::Int32: return launch_op<Plain<std::uint32_t>, Plain<std::int32_t>>(dst, src, count, op, stream);
    case DataType::UInt32: return launch_op<Plain<std::uint32_t>, Plain<std::uint32_t>>(dst, src, count, op, stream);
    case DataType::Int64: return launch_op<Plain<std::uint64_t>, Plain<std::int64_t>>(dst, src, count, op, stream);
    case DataType::UInt64: return launch_op<Plain<std::uint64_t>, Plain<std::uint64_t>>(dst, src, count, op, stream);
    case DataType::Float16: return launch_op<Half, Half>(dst, src, count, op, stream);
    case DataType::BFloat16: return launch_op<BFloat, BFloat>(dst, src, count, op, stream);
    case DataType::Float32: return launch_op<Plain<float>, Plain<float>>(dst, src, count, op, stream);
    case DataType::Float64: return launch_op<Plain<double>, Plain<double>>(dst, src, count, op, stream);
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, "invalid data type code ", static_cast<int>(dtype));
}

}  // namespace kizuna::kernels
