#include "cuda/copy_queue.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "core/check.hpp"
#include "core/log.hpp"
#include "cuda/event_pool.hpp"
#include "cuda/runtime.hpp"

namespace kizuna::cuda {
namespace {

// Pinned buffers by size, reused across calls. Given back from CUDA's
// callback thread, where no CUDA call is allowed, so freeing waits for the
// process's end.
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

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

}  // namespace

struct CopyQueue::Shared {
  // The gate word, in mapped pinned memory: the device reads it, open()
  // raises it. `opened` is the same ticket at full width.
  volatile std::uint32_t* word = nullptr;
  std::atomic<std::uint64_t> opened{0};
  std::mutex mutex;
  std::condition_variable cv;
  EventPool events;

  ~Shared() {
    // Events and the word die with the queue, once nothing uses them (the
    // last owner is never CUDA's callback thread: see ~CopyQueue).
    if (word) cudaFreeHost(const_cast<std::uint32_t*>(word));
  }
};

namespace {

struct HostGate {
  std::shared_ptr<CopyQueue::Shared> shared;
  std::uint64_t ticket;
  std::chrono::steady_clock::time_point deadline;
};

// On CUDA's callback thread: holds the queue's stream until the ticket is
// opened or the patience runs out.
void CUDART_CB host_gate(void* p) {
  std::unique_ptr<HostGate> g(static_cast<HostGate*>(p));
  std::unique_lock lock(g->shared->mutex);
  if (!g->shared->cv.wait_until(lock, g->deadline, [&] { return g->shared->opened.load() >= g->ticket; })) {
    KIZUNA_LOG(Error) << "a staged CUDA collective's result went back unreduced: the host did not release it in time";
  }
}

}  // namespace

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

CopyQueue::CopyQueue(int device, bool stream_wait)
    : device_(device), shared_(std::make_shared<Shared>()), completions_(std::make_unique<core::CompletionPoller>()) {
  set_device(device_);
  cudaStream_t s = nullptr;
  KIZUNA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  void* word = nullptr;
  KIZUNA_CUDA_CHECK(cudaHostAlloc(&word, sizeof(std::uint32_t), cudaHostAllocMapped | cudaHostAllocPortable));
  shared_->word = static_cast<volatile std::uint32_t*>(word);
  *shared_->word = 0;
  KIZUNA_CUDA_CHECK(cudaHostGetDevicePointer(&word_device_, word, 0));
  if (stream_wait) {
    cudaDriverEntryPointQueryResult found{};
    void* fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      wait_value_ = fn;
    cudaGetLastError();
  }
}

CopyQueue::~CopyQueue() {
  auto s = static_cast<cudaStream_t>(stream_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  cudaError_t status = cudaErrorNotReady;
  while ((status = cudaStreamQuery(s)) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // What is still watched ends now: done where the stream got there, else
  // Aborted.
  completions_.reset();
  if (status == cudaErrorNotReady) {
    // Destroying the stream now would leave its gates waiting on a word
    // that is freed: keep both for the rest of the process.
    KIZUNA_LOG(Error) << "a CUDA copy queue still had work after 10 s; it is left running";
    new std::shared_ptr<Shared>(shared_);
    return;
  }
  cudaStreamDestroy(s);
}

const char* CopyQueue::gate_kind() const { return wait_value_ ? "cuStreamWaitValue32" : "host function"; }

std::shared_ptr<unsigned char> CopyQueue::host_buffer(std::size_t bytes) {
  auto* p = static_cast<unsigned char*>(pool().take(bytes));
  return {p, [](unsigned char* q) { pool().give(q); }};
}

// `after` waits for everything `before` was given so far. The event may
// be recorded again as soon as the wait is enqueued.
static void order(CopyQueue::Shared& shared, cudaStream_t before, cudaStream_t after) {
  cudaEvent_t e = shared.events.take();
  cudaError_t status = cudaEventRecord(e, before);
  if (status == cudaSuccess) status = cudaStreamWaitEvent(after, e, 0);
  shared.events.give(e);
  KIZUNA_CUDA_CHECK(status);
}

void CopyQueue::follow(void* stream) {
  order(*shared_, static_cast<cudaStream_t>(stream), static_cast<cudaStream_t>(stream_));
}

void CopyQueue::copy_to_host(void* host, const void* device, std::size_t bytes) {
  KIZUNA_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream_)));
}

void CopyQueue::copy_to_device(void* device, const void* host, std::size_t bytes) {
  KIZUNA_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)));
}

std::function<bool()> CopyQueue::mark() {
  cudaEvent_t e = shared_->events.take();
  // The event goes back to the pool with the last copy of the mark.
  std::shared_ptr<CUevent_st> event(e, [shared = shared_](cudaEvent_t ev) { shared->events.give(ev); });
  KIZUNA_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(stream_)));
  return [event] {
    const cudaError_t status = cudaEventQuery(event.get());
    if (status == cudaErrorNotReady) return false;
    KIZUNA_CUDA_CHECK(status);
    return true;
  };
}

std::uint64_t CopyQueue::gate(std::chrono::milliseconds patience) {
  const std::uint64_t ticket = ++next_ticket_;
  auto s = static_cast<cudaStream_t>(stream_);
  if (wait_value_) {
    const CUresult r = reinterpret_cast<WaitValue32>(wait_value_)(
        reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(word_device_),
        static_cast<cuuint32_t>(ticket), CU_STREAM_WAIT_VALUE_GEQ);
    KIZUNA_CHECK(r == CUDA_SUCCESS, "cuStreamWaitValue32 failed with CUresult ", static_cast<int>(r),
                 " (KIZUNA_CUDA_STREAM_WAIT=0 uses a host function instead)");
    // Bounded, as the host-function gate is by its own patience: a gate the
    // host never opens (its call lost, its thread stuck) is opened at the
    // deadline, so that the stream, the user's behind it, goes on. The call
    // itself reports its failure through then().
    std::shared_ptr<Shared> shared = shared_;
    completions_->watch({[shared, ticket] { return shared->opened.load() >= ticket; },
                         std::chrono::steady_clock::now() + patience, "a staged call's gate",
                         [](std::exception_ptr) {}, [shared, ticket] { open_gate(*shared, ticket); }});
    return ticket;
  }
  auto* g = new HostGate{shared_, ticket, std::chrono::steady_clock::now() + patience};
  const cudaError_t launched = cudaLaunchHostFunc(s, host_gate, g);
  if (launched != cudaSuccess) delete g;
  KIZUNA_CUDA_CHECK(launched);
  return ticket;
}

void CopyQueue::open_gate(Shared& shared, std::uint64_t ticket) {
  {
    std::lock_guard lock(shared.mutex);
    if (ticket <= shared.opened.load()) return;
    shared.opened.store(ticket);
    // The staged result is in host memory already: order those writes
    // before the word that lets the device copy it.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *shared.word = static_cast<std::uint32_t>(ticket);
  }
  shared.cv.notify_all();
}

void CopyQueue::open(std::uint64_t ticket) { open_gate(*shared_, ticket); }

void CopyQueue::then(std::chrono::milliseconds patience, const std::string& what,
                     std::function<void(std::exception_ptr)> fn) {
  // Polled, not a host function: CUDA never calls one once the context has
  // an error, and the call would then hang (core/completion_poller.hpp).
  std::function<bool()> reached = mark();
  const int device = device_;
  completions_->watch({[reached = std::move(reached), device] {
                         set_device(device);
                         return reached();
                       },
                       std::chrono::steady_clock::now() + patience, what, std::move(fn), nullptr});
}

void CopyQueue::lead(void* stream) {
  order(*shared_, static_cast<cudaStream_t>(stream_), static_cast<cudaStream_t>(stream));
}

}  // namespace kizuna::cuda
