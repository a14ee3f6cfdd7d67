#include "cuda/staging.hpp"

#include <cuda_runtime.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <vector>

#include "core/check.hpp"
#include "cuda/runtime.hpp"

namespace kizuna::cuda {
namespace {

// Pinned buffers by size, reused across calls: cudaHostAlloc costs far more
// than a collective. Returned from CUDA's callback thread, where no CUDA
// call is allowed, so freeing waits for the process's end.
class PinnedPool {
 public:
  void* take(std::size_t bytes) {
    {
      std::lock_guard lock(mutex_);
      auto it = free_.lower_bound(bytes);
      if (it != free_.end() && it->first <= bytes * 2) {
        void* p = it->second;
        sizes_[p] = it->first;
        free_.erase(it);
        return p;
      }
    }
    void* p = nullptr;
    KIZUNA_CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable));
    std::lock_guard lock(mutex_);
    sizes_[p] = bytes;
    return p;
  }
  void give(void* p) {
    std::lock_guard lock(mutex_);
    free_.emplace(sizes_.at(p), p);
  }

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;
  std::map<void*, std::size_t> sizes_;
};

PinnedPool& pool() {
  static PinnedPool* p = new PinnedPool();
  return *p;
}

}  // namespace

struct StagedCall::State {
  void* host = nullptr;
  std::mutex mutex;
  std::condition_variable cv;
  bool input_ready = false;
  bool released = false;
  std::exception_ptr error;
  std::chrono::steady_clock::time_point gate_deadline;
  Done on_done;
  std::shared_ptr<StagedCall> self;  // alive until `finish` has run
};

int select_device(int requested, int local_rank) {
  const Availability& a = probe();
  if (a.device_count == 0) KIZUNA_THROW(ErrorCode::CudaError, "a CUDA device was asked for, but ", a.reason);
  int index = requested;
  if (index < 0) index = (local_rank < 0 ? 0 : local_rank) % a.device_count;
  KIZUNA_CHECK_ARG(index < a.device_count, "CUDA device ", index, " does not exist; this machine has ",
                   a.device_count);
  set_device(index);
  return index;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "unknown GPU";
  return prop.name;
}

void set_device(int index) { KIZUNA_CUDA_CHECK(cudaSetDevice(index)); }

StagedCall::StagedCall(std::unique_ptr<State> state) : state_(std::move(state)) {}

StagedCall::~StagedCall() {
  if (state_ && state_->host) pool().give(state_->host);
}

void* StagedCall::host() const { return state_->host; }

// On CUDA's callback thread: the input is in pinned memory; hold the stream
// until the worker has run the collective.
static void CUDART_CB gate(void* p) {
  auto* s = static_cast<StagedCall::State*>(p);
  std::unique_lock lock(s->mutex);
  s->input_ready = true;
  s->cv.notify_all();
  if (!s->cv.wait_until(lock, s->gate_deadline, [&] { return s->released; })) {
    s->error = std::make_exception_ptr(
        Error(ErrorCode::Timeout, "a staged CUDA collective was not run before its deadline"));
    s->released = true;
  }
}

// On CUDA's callback thread, after the H2D copy: the result is in place.
static void CUDART_CB finish(void* p) {
  auto* s = static_cast<StagedCall::State*>(p);
  std::exception_ptr error;
  StagedCall::Done done;
  std::shared_ptr<StagedCall> self;
  {
    std::lock_guard lock(s->mutex);
    error = s->error;
    done = std::move(s->on_done);
    self = std::move(s->self);
  }
  if (done) done(error);
}

std::shared_ptr<StagedCall> StagedCall::start(int device, void* stream_handle, const void* send,
                                              std::size_t send_bytes, std::size_t in_offset, void* recv,
                                              std::size_t recv_bytes, std::size_t out_offset,
                                              std::size_t host_bytes, std::chrono::milliseconds timeout,
                                              Done on_done) {
  KIZUNA_CHECK_ARG(in_offset + send_bytes <= host_bytes && out_offset + recv_bytes <= host_bytes,
                   "staged CUDA call: buffer sizes do not fit");
  set_device(device);
  auto state = std::make_unique<State>();
  state->host = pool().take(host_bytes);
  state->on_done = std::move(on_done);
  // The gate waits for the worker for the collective's own deadline plus
  // the time the stream may take to get there.
  state->gate_deadline = std::chrono::steady_clock::now() + 2 * timeout + std::chrono::seconds(10);
  std::shared_ptr<StagedCall> call(new StagedCall(std::move(state)));
  State* s = call->state_.get();
  s->self = call;
  auto stream = static_cast<cudaStream_t>(stream_handle);
  try {
    if (send_bytes)
      KIZUNA_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(s->host) + in_offset, send, send_bytes,
                                        cudaMemcpyDeviceToHost, stream));
    KIZUNA_CUDA_CHECK(cudaLaunchHostFunc(stream, gate, s));
    if (recv_bytes)
      KIZUNA_CUDA_CHECK(cudaMemcpyAsync(recv, static_cast<char*>(s->host) + out_offset, recv_bytes,
                                        cudaMemcpyHostToDevice, stream));
    KIZUNA_CUDA_CHECK(cudaLaunchHostFunc(stream, finish, s));
  } catch (...) {
    s->self.reset();
    throw;
  }
  return call;
}

bool StagedCall::wait_input(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(state_->mutex);
  return state_->cv.wait_until(lock, deadline, [&] { return state_->input_ready; });
}

void StagedCall::release(std::exception_ptr error) {
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->error) state_->error = std::move(error);
    state_->released = true;
  }
  state_->cv.notify_all();
}

}  // namespace kizuna::cuda
