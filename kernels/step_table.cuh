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

// A step's element work as streams: v = x, or x op y when y is set; v is
// stored to w1 and, when set, to w2. Only the buffers the op uses are
// addressed: the unused side's offset is not checked by the decoder
// (comm/device_steps.hpp) and may be anything.
template <typename S>
struct StepStreams {
  const S* x;
  const S* y;
  S* w1;
  S* w2;
};

// `in` is the received slice (indexed from the step's first element), `out`
// the slice to send.
template <typename S>
KIZUNA_HD StepStreams<S> step_streams(const DeviceStep& step, const StepBuffers<S>& b, const S* in, S* out) {
  const bool reads_src = step.op != DeviceOp::Recv && step.op != DeviceOp::RecvCopySend;
  const bool writes_dst = step.op != DeviceOp::Send;
  const S* src = reads_src ? b.buffer[static_cast<int>(step.src)] + step.src_offset : nullptr;
  S* dst = writes_dst ? b.buffer[static_cast<int>(step.dst)] + step.dst_offset : nullptr;
  switch (step.op) {
    case DeviceOp::Send: return {src, nullptr, out, nullptr};
    case DeviceOp::Recv: return {in, nullptr, dst, nullptr};
    case DeviceOp::RecvReduce: return {src, in, dst, nullptr};
    case DeviceOp::RecvReduceSend: return {src, in, dst, out};
    case DeviceOp::RecvCopySend: return {in, nullptr, dst, out};
    case DeviceOp::Copy: return {src, nullptr, dst, nullptr};
    case DeviceOp::LocalReduce: return {dst, src, dst, nullptr};  // dst = dst op src
  }
  return {nullptr, nullptr, nullptr, nullptr};
}

// Elements [begin, end) of the streams, one at a time.
template <typename Codec, typename Op>
KIZUNA_HD void run_streams(const StepStreams<typename Codec::Storage>& s, std::uint64_t begin, std::uint64_t end) {
  for (std::uint64_t i = begin; i < end; ++i) {
    const auto v = s.y ? reduce_element<Codec, Op>(s.x[i], s.y[i]) : s.x[i];
    s.w1[i] = v;
    if (s.w2) s.w2[i] = v;
  }
}

// 16 bytes moved as one load or store (ld.global.v2.u64 on the GPU).
struct alignas(16) Raw16 {
  std::uint64_t lo, hi;
};
template <typename S>
union Pack16 {
  Raw16 raw;
  S v[16 / sizeof(S)];
};

// Whether every stream's address is 16-byte aligned (then run_packs may
// serve them).
template <typename S>
KIZUNA_HD bool packs_aligned(const StepStreams<S>& s) {
  const auto a = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  return a(s.x) && a(s.y) && a(s.w1) && a(s.w2);
}

#if defined(__CUDA_ARCH__)
#define KIZUNA_UNROLL _Pragma("unroll")
#else
#define KIZUNA_UNROLL
#endif

// U packs of 16 bytes (the groups first, first + stride, ..., those below
// `groups`): every load is issued before any store, so that a thread keeps
// U (or 2U) loads in flight; a pack's stores go where its loads came from
// or elsewhere, never into another thread's packs. Streams aligned to 16.
// The order in the source gives the compiler what __restrict__ would,
// which the streams cannot promise: in place, x and w1 are one buffer.
template <typename Codec, typename Op, int U>
KIZUNA_HD void run_packs(const StepStreams<typename Codec::Storage>& s, std::uint64_t first, std::uint64_t stride,
                         std::uint64_t groups) {
  using S = typename Codec::Storage;
  constexpr int kElems = 16 / sizeof(S);
  Pack16<S> a[U], c[U];
  KIZUNA_UNROLL
  for (int j = 0; j < U; ++j) {
    const std::uint64_t g = first + j * stride;
    if (g >= groups) break;
    a[j].raw = *reinterpret_cast<const Raw16*>(s.x + g * kElems);
    if (s.y) c[j].raw = *reinterpret_cast<const Raw16*>(s.y + g * kElems);
  }
  KIZUNA_UNROLL
  for (int j = 0; j < U; ++j) {
    const std::uint64_t g = first + j * stride;
    if (g >= groups) break;
    if (s.y) {
      KIZUNA_UNROLL
      for (int e = 0; e < kElems; ++e) a[j].v[e] = reduce_element<Codec, Op>(a[j].v[e], c[j].v[e]);
    }
    *reinterpret_cast<Raw16*>(s.w1 + g * kElems) = a[j].raw;
    if (s.w2) *reinterpret_cast<Raw16*>(s.w2 + g * kElems) = a[j].raw;
  }
}

// Runs elements [begin, end) of `step`: `in` is the received slice (indexed
// from the step's first element), `out` the slice to send.
template <typename Codec, typename Op>
KIZUNA_HD void run_step(const DeviceStep& step, const StepBuffers<typename Codec::Storage>& b,
                        const typename Codec::Storage* in, typename Codec::Storage* out,
                        std::uint64_t begin, std::uint64_t end) {
  run_streams<Codec, Op>(step_streams(step, b, in, out), begin, end);
}

}  // namespace kizuna::kernels
