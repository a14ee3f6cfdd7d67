// kernels/step_table.cuh: a rank's schedule as the GPU reads it, and the
// element-level work of every step, for the CPU and the GPU alike.
//
// algo/ produces schedules as lists of Steps; the CUDA executor uploads a
// rank's list as a table of DeviceSteps (fixed size, trivially copyable,
// offsets in elements) and its kernel walks the table. What one step does
// to a range of elements is run_step() below, a __host__ __device__
// function: the kernel calls it with each thread's range, and the CPU unit
// tests call it to execute whole schedules against the simulator, so the
// interpreter's logic is proved without a GPU.
//
//   op              incoming (a received slice)   outgoing (the slice to send)
//   Send            -                             out = src
//   Recv            dst = in                      -
//   RecvReduce      dst = src op in               -
//   RecvReduceSend  dst = src op in               out = dst
//   RecvCopySend    dst = in                      out = dst
//   Copy            dst = src                     -
//   LocalReduce     dst = dst op src              -
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/reduce.cuh"

namespace kizuna::kernels {

enum class DeviceOp : std::uint8_t {
  Send = 0,
  Recv = 1,
  RecvReduce = 2,
  RecvReduceSend = 3,
  RecvCopySend = 4,
  Copy = 5,
  LocalReduce = 6,
};

enum class DeviceBuffer : std::uint8_t { Input = 0, Output = 1, Scratch = 2 };

struct DeviceStep {
  DeviceOp op;
  DeviceBuffer src;
  DeviceBuffer dst;
  std::uint8_t reserved0;
  std::int32_t recv_peer;  // -1: none
  std::int32_t send_peer;  // -1: none
  std::uint32_t reserved1;
  std::uint64_t src_offset;  // elements
  std::uint64_t dst_offset;  // elements
  std::uint64_t count;       // elements
};
static_assert(sizeof(DeviceStep) == 40);
static_assert(std::is_trivially_copyable_v<DeviceStep>);

KIZUNA_HD bool step_receives(DeviceOp op) {
  return op == DeviceOp::Recv || op == DeviceOp::RecvReduce || op == DeviceOp::RecvReduceSend ||
         op == DeviceOp::RecvCopySend;
}
KIZUNA_HD bool step_sends(DeviceOp op) {
  return op == DeviceOp::Send || op == DeviceOp::RecvReduceSend || op == DeviceOp::RecvCopySend;
}

// The three buffers of one rank, by DeviceBuffer index.
template <typename Storage>
struct StepBuffers {
  Storage* buffer[3];
};

// Runs elements [begin, end) of `step`: `in` is the received slice (indexed
// from the step's first element), `out` the slice to send.
template <typename Codec, typename Op>
KIZUNA_HD void run_step(const DeviceStep& step, const StepBuffers<typename Codec::Storage>& b,
                        const typename Codec::Storage* in, typename Codec::Storage* out,
                        std::uint64_t begin, std::uint64_t end) {
  using S = typename Codec::Storage;
  // Only the buffers the op uses are addressed: the unused side's offset is
  // not checked by the decoder (comm/device_steps.hpp) and may be anything.
  const bool reads_src = step.op != DeviceOp::Recv && step.op != DeviceOp::RecvCopySend;
  const bool writes_dst = step.op != DeviceOp::Send;
  const S* src = reads_src ? b.buffer[static_cast<int>(step.src)] + step.src_offset : nullptr;
  S* dst = writes_dst ? b.buffer[static_cast<int>(step.dst)] + step.dst_offset : nullptr;
  for (std::uint64_t i = begin; i < end; ++i) {
    switch (step.op) {
      case DeviceOp::Send: out[i] = src[i]; break;
      case DeviceOp::Recv: dst[i] = in[i]; break;
      case DeviceOp::RecvReduce: dst[i] = reduce_element<Codec, Op>(src[i], in[i]); break;
      case DeviceOp::RecvReduceSend: {
        const S v = reduce_element<Codec, Op>(src[i], in[i]);
        dst[i] = v;
        out[i] = v;
        break;
      }
      case DeviceOp::RecvCopySend: {
        const S v = in[i];
        dst[i] = v;
        out[i] = v;
        break;
      }
      case DeviceOp::Copy: dst[i] = src[i]; break;
      case DeviceOp::LocalReduce: dst[i] = reduce_element<Codec, Op>(dst[i], src[i]); break;
    }
  }
}

}  // namespace kizuna::kernels
