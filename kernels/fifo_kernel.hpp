// kernels/fifo_kernel.hpp: the FIFO walk (fifo_program.cuh) launched as a
// CUDA kernel on a stream, and the scaling that finishes an average.
//
// launch_fifo() enqueues one block per part of the collective (each part a
// program of its own, on its own channels: comm/device_parts.hpp) and
// returns at once. A block stops early when `*abort` becomes non-zero or
// `timeout_ns` passes without progress being possible (GPU clock), and
// leaves its FifoStatus in `status[block]` (memory the host can read while
// the stream runs: mapped pinned memory). Built only when KIZUNA_HAS_CUDA.
#pragma once

#include <kizuna/types.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/fifo_program.cuh"

namespace kizuna::kernels {

// Channel sets (blocks) a launch may run: NCCL runs up to 32 channels on
// one NVLink-connected GPU, where one block's copy rate is a fraction of
// the link's (docs/tuning.md#device-parts).
inline constexpr int kFifoMaxBlocks = 32;

// One block's program and buffers (device pointers).
struct FifoBlock {
  FifoProgram program;
  const void* input = nullptr;
  void* output = nullptr;
  void* scratch = nullptr;
};

struct FifoLaunch {
  FifoBlock blocks[kFifoMaxBlocks];
  int block_count = 1;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;  // Avg runs as Sum; scale() divides after
  std::uint64_t timeout_ns = 0;
  const volatile std::uint32_t* abort = nullptr;
  std::uint32_t* status = nullptr;  // [block_count]
};

static_assert(std::is_trivially_copyable_v<FifoLaunch>);  // a kernel parameter
static_assert(sizeof(FifoLaunch) <= 4096);                 // within every driver's parameter limit

// Throws kizuna::Error(CudaError) when the launch fails.
void launch_fifo(const FifoLaunch& launch, void* stream);

// data[i] /= divisor for the floating types (Avg's last step).
void scale(void* data, std::size_t count, DataType dtype, double divisor, void* stream);

}  // namespace kizuna::kernels
