// perf/device_memory.hpp: kizuna-perf's buffers on a GPU (--device cuda).
//
// DeviceMemory holds a send and a receive buffer of the same size as the
// host PerfBuffers on one CUDA device, and the stream the timed calls are
// ordered on. The host buffers stay the place where inputs are computed
// and results checked; upload() and download() move them, synchronously.
// Every call throws kizuna::Error(CudaError) naming the CUDA call that
// failed.
//
// Built from perf/device_memory_cuda.cpp where CUDA is present; elsewhere
// from perf/device_memory_none.cpp, whose functions report that this build
// has no CUDA.
#pragma once

#include <kizuna/comm.hpp>

#include <cstddef>
#include <memory>
#include <string>

namespace kizuna::perf {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual unsigned char* send() = 0;  // device pointers
  virtual unsigned char* recv() = 0;
  virtual DeviceStream stream() = 0;
  virtual void upload(void* device_dst, const void* host_src, std::size_t bytes) = 0;
  virtual void download(void* host_dst, const void* device_src, std::size_t bytes) = 0;
};

// The CUDA devices this process sees; throws when CUDA cannot be used here
// (no driver, no GPU, or a build without CUDA), naming the cause.
int cuda_device_count();

// Two buffers of `bytes` on CUDA device `index`, zeroed, and a stream.
std::unique_ptr<DeviceMemory> make_device_memory(int index, std::size_t bytes);

}  // namespace kizuna::perf
