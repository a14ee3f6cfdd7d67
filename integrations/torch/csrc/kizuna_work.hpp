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
// "Operation timed out!" when the timeout passes.
//
// Errors: a failed part's kizuna::Error (its message names the rank, the
// collective and its sequence number) becomes the backend error of
// torch_compat.hpp (RuntimeError in 1.13, DistBackendError in 2.x) with
// the message "kizuna: <kizuna's message>"; a Timeout reads
// "kizuna: timeout in <call> on rank <r>: timed out after ...", which holds
// both " timeout " and "timed out", the words torch's tests and users look
// for. It is rethrown by wait(), returned by exception(), and set on the
// future. expire() fails the Work first with an error of its own (a
// per-call timeout, torch_comm.hpp): the parts' later errors are dropped.
// isCompleted(), isSuccess() and exception() are c10d::Work's, over the
// state that finish() sets.
//
// sourceRank() is the rank a receive's message came from: the one asked
// for, or for a receive from any source (kizuna::kAnySource) the one
// kizuna matched, once the Work has completed.
//
// getFuture() is what DDP waits on: its value is the list of output tensors
// (for all-reduce the reduced tensor, as DDP's reducer expects). In torch
// 2.x getFutureResult() completes with the c10d::WorkResult (SUCCESS,
// TIMEOUT or COMM_ERROR) and never with an error.
//
// Exit: kizuna's threads (the communicator's worker, the threads that
// complete futures) hold references to a call until it has finished, and
// often the last one: Python drops a tensor the moment a call returns or
// is left in flight. Dropping the last reference to a tensor Python made
// takes the GIL, and a thread that asks for the GIL while Python
// finalizes is ended by CPython mid-destructor, which aborts the process
// ("terminate called without an active exception"). Every such reference
// is counted; wait_for_threads_to_release() waits until there are none,
// and kizuna_torch calls it from an atexit handler, while other threads
// may still take the GIL.
//
// Profiling: the profiling title ("kizuna:all_reduce", named as Gloo's
// "gloo:all_reduce") and the input tensors go to c10d::Work, which records
// them as an asynchronous profiler event from the call to finish(): the
// events torch's profiler tests look for.
#pragma once

#include "torch_compat.hpp"

#include <kizuna/work.hpp>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

namespace kizuna_torch {

class KizunaWork final : public c10d::Work {
 public:
  // `profiling_title` is "kizuna:<call>" and must outlive the Work (a
  // string literal). `inputs`: what the profiler records. `outputs`: the
  // caller's tensors that hold the result (the future's value).
  // `source_rank`: a receive's source, or kizuna::kAnySource.
  static constexpr int kNotReceive = -2;
  KizunaWork(int rank, c10d::OpType type, const char* profiling_title, const std::vector<at::Tensor>& inputs,
             std::vector<at::Tensor> outputs, int source_rank = kNotReceive);

  // The call's name for messages ("all_reduce").
  const char* call() const { return call_; }

  // Ties `work` to its parts; `epilogue` (may be empty) runs after all of
  // them succeeded. Completes at once when `parts` is empty.
  static void start(const c10::intrusive_ptr<KizunaWork>& work, std::vector<kizuna::Work> parts,
                    std::function<void()> epilogue);

  // Makes `error` the Work's error unless every part has already finished;
  // returns whether it did. The Work still completes when its parts do
  // (the caller then aborts the communicator so that they end at once).
  bool expire(std::exception_ptr error);

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  int sourceRank() const override;
  // CPU tensors: results are in place once the Work has completed.
  void synchronize() override {}
#if KIZUNA_TORCH2
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override;
#endif

 private:
  void part_done(const std::exception_ptr& error);
  void complete();
  // A part's error as Python should see it (see "Errors" above), and
  // whether it was a timeout.
  struct TorchError {
    std::exception_ptr error;
    bool timeout;
  };
  TorchError for_torch(const std::exception_ptr& error) const;

  const char* call_;

  std::vector<kizuna::Work> parts_;
  std::vector<at::Tensor> outputs_;
  std::function<void()> epilogue_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
#if KIZUNA_TORCH2
  c10::intrusive_ptr<c10::ivalue::Future> result_future_;
#endif
  std::atomic<std::size_t> pending_{0};
  std::mutex error_mutex_;  // guards first_error_ and timed_out_
  std::exception_ptr first_error_;
  bool timed_out_ = false;
  int source_rank_;
};

// Waits, at most `bound`, until kizuna's threads hold no reference to a
// torch call (see "Exit" above); returns how many they still hold. Call it
// without the GIL.
std::int64_t wait_for_threads_to_release(std::chrono::milliseconds bound);

}  // namespace kizuna_torch
