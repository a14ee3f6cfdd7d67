// The FIFO walk as a kernel: each block of kThreads threads runs one part's
// program (fifo_program.cuh) with the GPU's Sync policy. Flags are read
// with ld.acquire.sys; a batch's ready words are written after one
// fence.sc.sys (publish) and credits with st.release.sys, so a peer on
// another process (CUDA IPC) sees a slot's data before its flag; the
// block's barrier orders every thread's writes before thread 0's fence.
#include <cuda_runtime.h>

#include "core/check.hpp"
#include "kernels/fifo_kernel.hpp"
#include "kernels/reduce.cuh"

namespace kizuna::kernels {
namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct DeviceSync {
  std::uint64_t timeout_ns;          // without progress
  const volatile std::uint32_t* abort;
  std::uint32_t polls = 0;           // since the last progress
  std::uint32_t nap_ns = kFirstNapNs;
  std::uint64_t waiting_since = 0;  // GPU clock; 0: not waiting

  // Looks without progress before thread 0 naps between looks, and its
  // naps: doubling from the first to the longest.
  static constexpr std::uint32_t kSpinPolls = 4096, kFirstNapNs = 32, kLongestNapNs = 1000;

  __device__ int thread() const { return threadIdx.x; }
  __device__ int threads() const { return blockDim.x; }
  __device__ void barrier() const { __syncthreads(); }
  __device__ std::uint64_t load_acquire(const std::uint64_t* p) const {
    std::uint64_t v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
  }
  // After the block's barrier: the fence makes every thread's writes to
  // the slot visible system-wide before the flag (belt and braces over the
  // release's cumulativity).
  __device__ void store_release(std::uint64_t* p, std::uint64_t v) const {
    __threadfence_system();
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  }
  // A batch of slots: one fence (fence.sc.sys), then plain strong stores,
  // which the fence before them makes releases (the PTX memory model's
  // release pattern), so the batch pays one wait for the block's writes to
  // reach the peer instead of one per slot.
  __device__ void publish(std::uint64_t* p, std::uint64_t v, std::uint32_t k) const {
    __threadfence_system();
    for (std::uint32_t i = 0; i < k; ++i) asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p + i), "l"(v + i) : "memory");
  }
  // Thread 0, when nothing can move: the clock and the abort word are read
  // every 64th time (the clock read is not free). The deadline counts from
  // the first such read since the last progress, so a long collective that
  // keeps moving never times out, and a stalled one stops within
  // timeout_ns of its stall, not of its start. After kSpinPolls looks it
  // naps between them, so that a long wait leaves the multiprocessor's
  // issue slots to the blocks that share it (ranks as threads of one
  // process run on one GPU); a wait that ends sooner costs nothing more,
  // and one that ends during a nap at most kLongestNapNs.
  __device__ bool keep_waiting() {
    if (++polls > kSpinPolls) {
      __nanosleep(nap_ns);
      nap_ns = nap_ns * 2 < kLongestNapNs ? nap_ns * 2 : kLongestNapNs;
    }
    if (polls % 64 != 0) return true;
    if (abort != nullptr && *abort != 0) return false;
    const std::uint64_t now = global_ns();
    if (waiting_since == 0) waiting_since = now;
    return now - waiting_since < timeout_ns;
  }
  __device__ void progressed() {
    waiting_since = 0;
    polls = 0;
    nap_ns = kFirstNapNs;
  }
};

template <typename Codec, typename Op>
__global__ void __launch_bounds__(kThreads) fifo_kernel(FifoLaunch l) {
  using S = typename Codec::Storage;
  __shared__ FifoState<S> state;
  const FifoBlock& mine = l.blocks[blockIdx.x];
  const StepBuffers<S> buffers{{static_cast<S*>(const_cast<void*>(mine.input)), static_cast<S*>(mine.output),
                                static_cast<S*>(mine.scratch)}};
  DeviceSync sync{l.timeout_ns, l.abort};
  const FifoStatus result = run_fifo_program<Codec, Op>(mine.program, buffers, state, sync);
  if (threadIdx.x == 0) {
    std::uint32_t* status = l.status + blockIdx.x;
    asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(status), "r"(static_cast<std::uint32_t>(result)) : "memory");
  }
}

template <typename Codec, typename Op>
void launch(const FifoLaunch& l, cudaStream_t stream) {
  fifo_kernel<Codec, Op><<<l.block_count, kThreads, 0, stream>>>(l);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) KIZUNA_THROW(ErrorCode::CudaError, "fifo_kernel launch failed: ", cudaGetErrorString(e));
}

template <typename Arith, typename Order>
void launch_op(const FifoLaunch& l, cudaStream_t stream) {
  switch (l.op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return launch<Arith, SumOp>(l, stream);
    case ReduceOp::Prod: return launch<Arith, ProdOp>(l, stream);
    case ReduceOp::Min: return launch<Order, MinOp>(l, stream);
    case ReduceOp::Max: return launch<Order, MaxOp>(l, stream);
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, "invalid reduction code ", static_cast<int>(l.op));
}

template <typename Codec, typename Divisor>
__global__ void scale_kernel(typename Codec::Storage* data, std::size_t count, Divisor d) {
  const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    data[i] = Codec::store(Codec::load(data[i]) / d);
}

template <typename Codec, typename Divisor>
void launch_scale(void* data, std::size_t count, Divisor d, cudaStream_t stream) {
  const std::size_t blocks = (count + 255) / 256;
  scale_kernel<Codec, Divisor><<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(
      static_cast<typename Codec::Storage*>(data), count, d);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) KIZUNA_THROW(ErrorCode::CudaError, "scale_kernel launch failed: ", cudaGetErrorString(e));
}

}  // namespace

void launch_fifo(const FifoLaunch& l, void* stream_handle) {
  auto stream = static_cast<cudaStream_t>(stream_handle);
  switch (l.dtype) {
    case DataType::Int8: return launch_op<Plain<std::uint8_t>, Plain<std::int8_t>>(l, stream);
    case DataType::UInt8: return launch_op<Plain<std::uint8_t>, Plain<std::uint8_t>>(l, stream);
    case DataType::Int32: return launch_op<Plain<std::uint32_t>, Plain<std::int32_t>>(l, stream);
    case DataType::UInt32: return launch_op<Plain<std::uint32_t>, Plain<std::uint32_t>>(l, stream);
    case DataType::Int64: return launch_op<Plain<std::uint64_t>, Plain<std::int64_t>>(l, stream);
    case DataType::UInt64: return launch_op<Plain<std::uint64_t>, Plain<std::uint64_t>>(l, stream);
    case DataType::Float16: return launch_op<Half, Half>(l, stream);
    case DataType::BFloat16: return launch_op<BFloat, BFloat>(l, stream);
    case DataType::Float32: return launch_op<Plain<float>, Plain<float>>(l, stream);
    case DataType::Float64: return launch_op<Plain<double>, Plain<double>>(l, stream);
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, "invalid data type code ", static_cast<int>(l.dtype));
}

void scale(void* data, std::size_t count, DataType dtype, double divisor, void* stream_handle) {
  if (count == 0) return;
  auto stream = static_cast<cudaStream_t>(stream_handle);
  const float f = static_cast<float>(divisor);
  switch (dtype) {
    case DataType::Float16: return launch_scale<Half>(data, count, f, stream);
    case DataType::BFloat16: return launch_scale<BFloat>(data, count, f, stream);
    case DataType::Float32: return launch_scale<Plain<float>>(data, count, f, stream);
    case DataType::Float64: return launch_scale<Plain<double>>(data, count, divisor, stream);
    default: break;
  }
  KIZUNA_THROW(ErrorCode::InvalidArgument, "scale (Avg) is defined for floating types only, not ", name(dtype));
}

}  // namespace kizuna::kernels
