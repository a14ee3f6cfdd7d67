// bench_reduce: host reduction throughput, next to the two loops it must be
// judged against, in the same binary and on the same buffers:
//   memcpy          the machine's copy rate
//   plain_float_add c[i] = a[i] + b[i], a plain float loop, default flags
//   reduce_into     kizuna's dst = a op b (Sum) for float32, bfloat16, float16
//   reduce          kizuna's dst op= src (Sum), the form collectives use
// Throughput is in bytes of one operand per second (count x element size),
// so a bfloat16 reduction must process twice the elements per second of a
// float32 one to score the same.
//
//   bench_reduce --benchmark_filter=16777216 --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "core/reduce.hpp"

namespace {

using kizuna::DataType;
using kizuna::ReduceOp;

constexpr std::int64_t kMinBytes = 4 << 10;
constexpr std::int64_t kMaxBytes = 64 << 20;

struct Buffers {
  std::vector<unsigned char> a, b, c;
  explicit Buffers(std::size_t bytes) : a(bytes, 1), b(bytes, 2), c(bytes, 3) {
    // Small, finite values in every 16-bit float format, so no NaN/Inf paths.
    for (std::size_t i = 0; i + 1 < bytes; i += 2) {
      a[i] = 0x00, a[i + 1] = 0x3c;
      b[i] = 0x00, b[i + 1] = 0x3c;
    }
  }
};

__attribute__((noinline)) void plain_float_add(float* c, const float* a, const float* b,
                                               std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

void BM_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Buffers buf(bytes);
  for (auto _ : state) {
    std::memcpy(buf.c.data(), buf.a.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void BM_plain_float_add(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Buffers buf(bytes);
  const std::size_t n = bytes / sizeof(float);
  for (auto _ : state) {
    plain_float_add(reinterpret_cast<float*>(buf.c.data()),
                    reinterpret_cast<const float*>(buf.a.data()),
                    reinterpret_cast<const float*>(buf.b.data()), n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

template <DataType T>
void BM_reduce_into(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Buffers buf(bytes);
  const std::size_t n = bytes / kizuna::size_of(T);
  for (auto _ : state) {
    kizuna::core::reduce_into(buf.c.data(), buf.a.data(), buf.b.data(), n, T, ReduceOp::Sum);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.SetLabel(kizuna::core::reduce_isa());
}

template <DataType T>
void BM_reduce(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Buffers buf(bytes);
  const std::size_t n = bytes / kizuna::size_of(T);
  for (auto _ : state) {
    kizuna::core::reduce(buf.c.data(), buf.a.data(), n, T, ReduceOp::Sum);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.SetLabel(kizuna::core::reduce_isa());
}

#define KIZUNA_SIZES RangeMultiplier(4)->Range(kMinBytes, kMaxBytes)

BENCHMARK(BM_memcpy)->KIZUNA_SIZES;
BENCHMARK(BM_plain_float_add)->KIZUNA_SIZES;
BENCHMARK(BM_reduce_into<DataType::Float32>)->Name("BM_reduce_into/float32")->KIZUNA_SIZES;
BENCHMARK(BM_reduce_into<DataType::BFloat16>)->Name("BM_reduce_into/bfloat16")->KIZUNA_SIZES;
BENCHMARK(BM_reduce_into<DataType::Float16>)->Name("BM_reduce_into/float16")->KIZUNA_SIZES;
BENCHMARK(BM_reduce<DataType::Float32>)->Name("BM_reduce/float32")->KIZUNA_SIZES;
BENCHMARK(BM_reduce<DataType::BFloat16>)->Name("BM_reduce/bfloat16")->KIZUNA_SIZES;
BENCHMARK(BM_reduce<DataType::Float16>)->Name("BM_reduce/float16")->KIZUNA_SIZES;

}  // namespace

BENCHMARK_MAIN();
