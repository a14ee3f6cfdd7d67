// integrations/torch/csrc/kizuna_work.hpp: one torch.distributed call in
// flight, as c10d sees it.
//
// A torch call becomes one or more kizuna Works ("parts": one collective, or
// the send/recv pairs of an all-to-all) plus an optional epilogue that runs
// once every part has succeeded (copying results out of staging buffers into
// the caller's tensors). KizunaWork finishes when the last part does:
//
//   parts done ──► epilogue (on success) ──► c10d::Work::finish(error)
//                                        └──► future: value = the output
//                                             tensors, or the error
//
// Completion runs on the thread that finished the last part: kizuna's worker,
// or a thread inside wait() that ran its own collective inline. The
// epilogue's buffers are released right after it runs. The future is
// completed on a thread of its own, so that its callbacks (which may call a
// collective on the same group and wait for it, as DDP's PowerSGD hook
// does) never hold kizuna's worker; wait() returns once it is.
//
// wait() without a timeout first waits on the parts with kizuna's
// Work::wait(), which lets this thread run the collective itself when it is
// next in line (no thread switch), then on completion; with a timeout it
// only waits (the collective runs on kizuna's worker) and throws c10d's
// "Operation timed out!" when the timeout passes. A failed part's
// kizuna::Error (its message names the rank, the collective and its
// sequence number) is rethrown by wait(), returned by exception(), and set on
// the future, so Python sees it as a RuntimeError carrying that message.
// isCompleted(), isSuccess() and exception() are c10d::Work's, over the
// state that finish() sets.
//
// getFuture() is what DDP waits on: its value is the list of output tensors
// (for all-reduce the reduced tensor, as DDP's reducer expects).
//
// This file depends only on c10d::Work and c10::ivalue::Future, which are the
// same in torch 1.13 and 2.x.
#pragma once

#include <kizuna/work.hpp>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

namespace kizuna_torch {

class KizunaWork final : public c10d::Work {
 public:
  // `outputs`: the caller's tensors that hold the result (the future's
  // value). `profiling_title` must outlive the Work (a string literal).
  KizunaWork(int rank, c10d::OpType type, const char* profiling_title, std::vector<at::Tensor> outputs,
             int source_rank = -1);

  // Ties `work` to its parts; `epilogue` (may be empty) runs after all of
  // them succeeded. Completes at once when `parts` is empty.
  static void start(const c10::intrusive_ptr<KizunaWork>& work, std::vector<kizuna::Work> parts,
                    std::function<void()> epilogue);

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  // CPU tensors: results are in place once the Work has completed.
  void synchronize() override {}

 private:
  void part_done(const std::exception_ptr& error);
  void complete();

  std::vector<kizuna::Work> parts_;
  std::vector<at::Tensor> outputs_;
  std::function<void()> epilogue_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<std::size_t> pending_{0};
  std::mutex error_mutex_;
  std::exception_ptr first_error_;
  int source_rank_;
};

}  // namespace kizuna_torch
