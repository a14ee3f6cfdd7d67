// kizuna-d2d-bandwidth: the GPU's device-to-device cudaMemcpy rate, the
// yardstick of the device all-reduce's memory traffic (issue 9's target).
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  for (size_t bytes = 1 << 20; bytes <= (1ull << 30); bytes <<= 3) {
    void *a = nullptr, *b = nullptr;
    cudaMalloc(&a, bytes);
    cudaMalloc(&b, bytes);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    const int iters = 20;
    cudaEventRecord(start);
    for (int i = 0; i < iters; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    // read + write traffic per copy
    std::printf("%12zu B  copy %8.1f GB/s  traffic %8.1f GB/s\n", bytes, bytes * iters / (ms * 1e6),
                2.0 * bytes * iters / (ms * 1e6));
    cudaFree(a);
    cudaFree(b);
  }
  return 0;
}
