// test_gpu: every check that needs a GPU, in one executable.
// Exit codes: 0 all passed, 1 a check failed, 77 no usable GPU (skipped).
//
// Each check compares the device result with the CPU reductions (which the
// unit tests pin to a scalar reference), bit for bit.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "core/reduce.hpp"
#include "cuda/runtime.hpp"
#include "kernels/reduce_kernel.hpp"

using namespace kizuna;

namespace {

int g_failures = 0;

#define GPU_EXPECT(cond, ...)                 \
  do {                                        \
    if (!(cond)) {                            \
      std::printf("FAIL: " __VA_ARGS__);      \
      std::printf("\n");                      \
      ++g_failures;                           \
    }                                         \
  } while (0)

void check_reduce_kernel() {
  const std::size_t counts[] = {0, 1, 7, 1000003};
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      for (std::size_t count : counts) {
        const auto dtype = static_cast<DataType>(t);
        const auto op = static_cast<ReduceOp>(o);
        const std::size_t bytes = count * size_of(dtype);
        std::vector<unsigned char> a(bytes), b(bytes), want(bytes), got(bytes);
        for (std::size_t i = 0; i < bytes; ++i) {
          a[i] = static_cast<unsigned char>(i * 7 + 3);
          b[i] = static_cast<unsigned char>(i * 13 + 5);
        }
        // Keep 16/32/64-bit float exponents moderate so values are finite.
        if (is_floating(dtype))
          for (std::size_t i = size_of(dtype) - 1; i < bytes; i += size_of(dtype)) a[i] = b[i] = 0x3c;
        want = a;
        core::reduce(want.data(), b.data(), count, dtype, op);
        void *da = nullptr, *db = nullptr;
        cudaMalloc(&da, bytes + 1);
        cudaMalloc(&db, bytes + 1);
        cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice);
        cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice);
        kernels::reduce(da, db, count, dtype, op, nullptr);
        cudaMemcpy(got.data(), da, bytes, cudaMemcpyDeviceToHost);
        const cudaError_t status = cudaDeviceSynchronize();
        GPU_EXPECT(status == cudaSuccess, "reduce_kernel %s %s: %s", name(dtype).data(),
                   name(op).data(), cudaGetErrorString(status));
        for (std::size_t i = 0; i < bytes; ++i)
          if (got[i] != want[i]) {
            GPU_EXPECT(false, "reduce_kernel %s %s count %zu: first wrong byte %zu", name(dtype).data(),
                       name(op).data(), count, i);
            break;
          }
        cudaFree(da);
        cudaFree(db);
      }
    }
  }
  std::printf("reduce_kernel: every dtype x op checked against the CPU reduction\n");
}

}  // namespace

int main() {
  const cuda::Availability& gpu = cuda::probe();
  if (gpu.device_count == 0) {
    std::printf("skipped: %s\n", gpu.reason.c_str());
    return 77;
  }
  check_reduce_kernel();
  std::printf("%s\n", g_failures ? "GPU checks FAILED" : "GPU checks passed");
  return g_failures ? 1 : 0;
}
