#include "cuda/runtime.hpp"

#include <cuda_runtime.h>

namespace kizuna::cuda {

const Availability& probe() {
  static const Availability result = [] {
    Availability a;
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      a.reason = std::string("CUDA unavailable: ") + cudaGetErrorString(status);
      cudaGetLastError();  // clear the sticky error so later calls start clean
      return a;
    }
    if (count == 0) {
      a.reason = "no CUDA device is visible";
      return a;
    }
    a.device_count = count;
    return a;
  }();
  return result;
}

}  // namespace kizuna::cuda
