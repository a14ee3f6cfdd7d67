// cuda/runtime.hpp: finding out, at run time, whether CUDA can be used here.
//
// A libkizuna built with CUDA still runs on machines without a driver or a
// GPU: probe() never throws and reports the number of devices, or zero and
// the reason ("no CUDA driver", "no CUDA device", ...). The result is
// computed once per process. Public headers never see cuda_runtime.h;
// streams cross interfaces as void*.
#pragma once

#include <string>

namespace kizuna::cuda {

struct Availability {
  int device_count = 0;
  std::string reason;  // why device_count is 0; empty otherwise
};

const Availability& probe();

}  // namespace kizuna::cuda

// Throws kizuna::Error(CudaError) naming the failed call and CUDA's message.
#define KIZUNA_CUDA_CHECK(expr)                                                            \
  do {                                                                                     \
    const auto kz_status_ = (expr);                                                        \
    if (kz_status_ != cudaSuccess) [[unlikely]]                                            \
      KIZUNA_THROW(::kizuna::ErrorCode::CudaError, #expr, " failed: ",                    \
                   cudaGetErrorString(kz_status_), " (", static_cast<int>(kz_status_), ")"); \
  } while (0)
