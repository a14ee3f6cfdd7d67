#include "kizuna_work.hpp"

#include <kizuna/error.hpp>
#include <kizuna/types.hpp>

#include <ATen/core/grad_mode.h>
#include <ATen/core/jit_type.h>
#include <c10/util/StringUtil.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <thread>
#include <utility>

namespace kizuna_torch {

namespace {

// The references kizuna's threads hold to torch calls (kizuna_work.hpp,
// "Exit"). Never destroyed, as Completions.
class ThreadHolds {
 public:
  static ThreadHolds& get() {
    static ThreadHolds* holds = new ThreadHolds;
    return *holds;
  }
  void add() {
    const std::lock_guard lock(mutex_);
    ++count_;
  }
  void release() {
    const std::lock_guard lock(mutex_);
    if (--count_ == 0) cv_.notify_all();
  }
  std::int64_t wait(std::chrono::milliseconds bound) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, bound, [this] { return count_ == 0; });
    return count_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::int64_t count_ = 0;
};

// What a part's completion callback holds: the Work, counted while held.
// The Work (and with it the caller's tensors) may be destroyed here.
struct HeldWork {
  explicit HeldWork(c10::intrusive_ptr<KizunaWork> w) : work(std::move(w)) { ThreadHolds::get().add(); }
  ~HeldWork() {
    work.reset();
    ThreadHolds::get().release();
  }
  HeldWork(const HeldWork&) = delete;
  HeldWork& operator=(const HeldWork&) = delete;
  c10::intrusive_ptr<KizunaWork> work;
};

// Where futures are completed: threads of their own, never the thread that
// finished the collective. A future's callbacks run where it completes, and
// one may call a collective on the same group and wait for its future (DDP's
// PowerSGD hook does): on kizuna's worker thread, that call would wait for
// the very thread it blocks. Here a waiting callback only holds its own
// thread; a completion that finds every thread busy starts another, and a
// thread idle for a while ends. Never destroyed (threads may outlive static
// destruction at exit).
class Completions {
 public:
  static Completions& get() {
    static Completions* pool = new Completions;
    return *pool;
  }

  // A task is counted in ThreadHolds from here until its captures are gone.
  void post(std::function<void()> fn) {
    ThreadHolds::get().add();
    std::unique_lock lock(mutex_);
    tasks_.push_back(std::move(fn));
    if (idle_ > 0) {
      cv_.notify_one();
      return;
    }
    ++threads_;
    lock.unlock();
    std::thread([this] { run(); }).detach();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      while (tasks_.empty()) {
        ++idle_;
        const bool woken = cv_.wait_for(lock, std::chrono::seconds(10), [this] { return !tasks_.empty(); });
        --idle_;
        if (!woken) {
          --threads_;
          return;
        }
      }
      std::function<void()> fn = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      fn();
      fn = nullptr;  // its captures released outside the lock
      ThreadHolds::get().release();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  int idle_ = 0;
  int threads_ = 0;
};

}  // namespace

KizunaWork::KizunaWork(int rank, c10d::OpType type, const char* profiling_title,
                       const std::vector<at::Tensor>& inputs, std::vector<at::Tensor> outputs, int source_rank)
    : c10d::Work(rank, type, profiling_title, inputs),
      call_(profiling_title + sizeof("kizuna:") - 1),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
#if KIZUNA_TORCH2
      result_future_(c10::make_intrusive<c10::ivalue::Future>(c10::IntType::get())),
#endif
      source_rank_(source_rank) {}

void KizunaWork::start(const c10::intrusive_ptr<KizunaWork>& work, std::vector<kizuna::Work> parts,
                       std::function<void()> epilogue) {
  work->epilogue_ = std::move(epilogue);
  work->parts_ = std::move(parts);
  if (work->parts_.empty()) {
    work->complete();
    return;
  }
  // Count first: a part may finish (and call back) before the loop ends.
  work->pending_.store(work->parts_.size());
  for (const kizuna::Work& part : work->parts_) {
    // The callback holds a reference, so the Work outlives its parts even
    // when the caller drops it; kizuna drops callbacks once they have run.
    auto held = std::make_shared<HeldWork>(work);
    part.on_complete([held](const kizuna::Work& done) { held->work->part_done(done.error()); });
  }
}

bool KizunaWork::expire(std::exception_ptr error) {
  std::lock_guard lock(error_mutex_);
  if (pending_.load() == 0 || first_error_) return false;
  first_error_ = std::move(error);
  timed_out_ = true;
  return true;
}

KizunaWork::TorchError KizunaWork::for_torch(const std::exception_ptr& error) const {
  try {
    std::rethrow_exception(error);
  } catch (const kizuna::Error& e) {
    if (e.code() == kizuna::ErrorCode::Timeout)
      return {compat::backend_error(c10::str("kizuna: timeout in ", call_, " on rank ", rank_, ": ", e.what())),
              true};
    return {compat::backend_error(c10::str("kizuna: ", e.what())), false};
  } catch (...) {
    return {error, false};
  }
}

void KizunaWork::part_done(const std::exception_ptr& error) {
  if (error) {
    TorchError translated = for_torch(error);
    std::lock_guard lock(error_mutex_);
    if (!first_error_) {
      first_error_ = std::move(translated.error);
      timed_out_ = translated.timeout;
    }
  }
  if (pending_.fetch_sub(1) == 1) complete();
}

void KizunaWork::complete() {
  std::exception_ptr error;
  {
    std::lock_guard lock(error_mutex_);
    error = first_error_;
  }
  if (!error && epilogue_) {
    const at::NoGradGuard no_grad;  // copies into tensors that may require grad
    try {
      epilogue_();
    } catch (...) {
      error = std::current_exception();
    }
  }
  epilogue_ = nullptr;  // release staging buffers now, not when Python drops the Work
  finish(error);
#if KIZUNA_TORCH2
  // Every part has finished: nothing writes timed_out_ any more.
  const c10d::WorkResult result = !error       ? c10d::WorkResult::SUCCESS
                                  : timed_out_ ? c10d::WorkResult::TIMEOUT
                                               : c10d::WorkResult::COMM_ERROR;
  Completions::get().post([future = future_, result_future = result_future_, outputs = outputs_, error, result] {
    result_future->markCompleted(c10::IValue(static_cast<int64_t>(result)));
#else
  Completions::get().post([future = future_, outputs = outputs_, error] {
#endif
    if (error)
      future->setError(error);
    else
      future->markCompleted(c10::IValue(outputs));
  });
}

bool KizunaWork::wait(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) {
    // Run our own collectives inline when they are next in line. Their
    // errors are reported below, once the epilogue has run.
    for (const kizuna::Work& part : parts_) {
      try {
        part.wait();
      } catch (...) {
      }
    }
  }
  const bool done = c10d::Work::wait(timeout);
  // The future completes on a thread of its own a moment later (see
  // Completions); a caller that waited for the Work may read it at once.
  future_->wait();
  return done;
}

c10::intrusive_ptr<c10::ivalue::Future> KizunaWork::getFuture() { return future_; }

std::int64_t wait_for_threads_to_release(std::chrono::milliseconds bound) { return ThreadHolds::get().wait(bound); }

#if KIZUNA_TORCH2
c10::intrusive_ptr<c10::ivalue::Future> KizunaWork::getFutureResult() { return result_future_; }
#endif

std::vector<at::Tensor> KizunaWork::result() { return outputs_; }

int KizunaWork::sourceRank() const {
  TORCH_CHECK(source_rank_ != kNotReceive, "kizuna: sourceRank() is defined only for the Work of a recv");
  if (source_rank_ != kizuna::kAnySource) return source_rank_;
  // parts_ is set once, before the Work is returned to anyone.
  TORCH_CHECK(!parts_.empty() && parts_[0].done(),
              "kizuna: the source of a receive from any source is known once it has completed (wait() first)");
  return parts_[0].source();
}

}  // namespace kizuna_torch
