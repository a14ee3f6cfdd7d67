#include "kizuna_work.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/core/jit_type.h>

#include <utility>

namespace kizuna_torch {

KizunaWork::KizunaWork(int rank, c10d::OpType type, const char* profiling_title,
                       std::vector<at::Tensor> outputs, int source_rank)
    : c10d::Work(rank, type, profiling_title),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
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
    part.on_complete([work](const kizuna::Work& done) { work->part_done(done.error()); });
  }
}

void KizunaWork::part_done(const std::exception_ptr& error) {
  if (error) {
    std::lock_guard lock(error_mutex_);
    if (!first_error_) first_error_ = error;
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
  if (error)
    future_->setError(error);
  else
    future_->markCompleted(c10::IValue(outputs_));
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
  return c10d::Work::wait(timeout);
}

c10::intrusive_ptr<c10::ivalue::Future> KizunaWork::getFuture() { return future_; }

std::vector<at::Tensor> KizunaWork::result() { return outputs_; }

int KizunaWork::sourceRank() const {
  TORCH_CHECK(source_rank_ >= 0, "kizuna: sourceRank() is defined only for the Work of a recv");
  return source_rank_;
}

}  // namespace kizuna_torch
