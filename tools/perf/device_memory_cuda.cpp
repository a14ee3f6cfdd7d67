#include <kizuna/error.hpp>

#include <cuda_runtime.h>

#include <string>

#include "device_memory.hpp"

namespace kizuna::perf {
namespace {

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    throw Error(ErrorCode::CudaError, std::string(call) + " failed: " + cudaGetErrorString(status) + " (" +
                                          std::to_string(static_cast<int>(status)) + ")");
}

class CudaMemory final : public DeviceMemory {
 public:
  CudaMemory(int index, std::size_t bytes) : index_(index) {
    check(cudaSetDevice(index_), "cudaSetDevice");
    const std::size_t n = bytes ? bytes : 1;
    check(cudaMalloc(&send_, n), "cudaMalloc");
    check(cudaMalloc(&recv_, n), "cudaMalloc");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    check(cudaMemsetAsync(send_, 0, n, stream_), "cudaMemsetAsync");
    check(cudaMemsetAsync(recv_, 0, n, stream_), "cudaMemsetAsync");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  ~CudaMemory() override {
    cudaSetDevice(index_);
    if (stream_) cudaStreamSynchronize(stream_), cudaStreamDestroy(stream_);
    cudaFree(send_);
    cudaFree(recv_);
  }

  unsigned char* send() override { return static_cast<unsigned char*>(send_); }
  unsigned char* recv() override { return static_cast<unsigned char*>(recv_); }
  DeviceStream stream() override { return DeviceStream{stream_}; }

  void upload(void* device_dst, const void* host_src, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (upload)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void download(void* host_dst, const void* device_src, std::size_t bytes) override {
    if (bytes == 0) return;
    check(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync (download)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

 private:
  int index_;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status == cudaErrorNoDevice || (status == cudaSuccess && n == 0))
    throw Error(ErrorCode::CudaError, "--device cuda: no CUDA device on this machine");
  if (status == cudaErrorInsufficientDriver)
    throw Error(ErrorCode::CudaError, "--device cuda: CUDA cannot be used here: no NVIDIA driver, or one "
                                      "older than this CUDA runtime (cudaGetDeviceCount)");
  if (status != cudaSuccess)
    throw Error(ErrorCode::CudaError, std::string("--device cuda: CUDA cannot be used here: ") +
                                          cudaGetErrorString(status) + " (cudaGetDeviceCount)");
  return n;
}

std::unique_ptr<DeviceMemory> make_device_memory(int index, std::size_t bytes) {
  return std::make_unique<CudaMemory>(index, bytes);
}

}  // namespace kizuna::perf
