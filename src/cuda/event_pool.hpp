// cuda/event_pool.hpp: CUDA events without timing, reused.
//
// Creating and destroying an event costs the host a driver call each, on
// the path of every small call that waits for one; a pool hands back
// events it was given instead. Thread-safe: a completion thread gives
// events back while callers take them. The pool destroys the events it
// holds; one still out when it goes is the taker's to destroy.
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "cuda/runtime.hpp"

namespace kizuna::cuda {

class EventPool {
 public:
  EventPool() = default;
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool() {
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  }

  // A spare event, or a new one (throws CudaError when none can be made).
  cudaEvent_t take() {
    {
      std::lock_guard lock(mutex_);
      if (!spare_.empty()) {
        const cudaEvent_t e = spare_.back();
        spare_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    KIZUNA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  void give(cudaEvent_t e) {
    std::lock_guard lock(mutex_);
    spare_.push_back(e);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> spare_;
};

}  // namespace kizuna::cuda
