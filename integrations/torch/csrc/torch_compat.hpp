// integrations/torch/csrc/torch_compat.hpp: the differences between the
// torch versions the backend is built for, in one place.
//
// One source tree builds against Debian's torch 1.13 and against the current
// 2.x release from PyPI; everything else in csrc/ is written against what
// the two share (c10d::Store, c10d::Work, the *Options structs, ReduceOp).
// What differs:
//
//                      torch 1.13                    torch 2.x
//   backend base       c10d::ProcessGroup            c10d::Backend (a ProcessGroup
//                                                    holds one per device type)
//   registration       register_backend(name, fn)    register_backend(name, fn,
//                                                    devices=["cpu", "cuda"])
//   errors for Python  c10::Error -> RuntimeError    c10::DistBackendError ->
//                                                    torch.distributed.DistBackendError
//                                                    (a RuntimeError)
//   2.x-only virtuals  -                             allgather_into_tensor_coalesced,
//                                                    reduce_scatter_tensor_coalesced,
//                                                    Work::getFutureResult, shutdown, abort
//   their OpTypes      (UNKNOWN)                     ALLGATHER_INTO_TENSOR_COALESCED,
//                                                    REDUCE_SCATTER_TENSOR_COALESCED
//
// KIZUNA_TORCH2 is 1 when building for torch 2.x, and guards the overrides
// of the 2.x-only virtuals (process_group_kizuna.cpp, kizuna_work.*).
#pragma once

#include <c10/util/Exception.h>
#include <torch/version.h>

#include <exception>
#include <string>

#if TORCH_VERSION_MAJOR >= 2
#define KIZUNA_TORCH2 1
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#define KIZUNA_TORCH2 0
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace kizuna_torch::compat {

#if KIZUNA_TORCH2
using BackendBase = c10d::Backend;
using BackendError = c10::DistBackendError;
inline constexpr c10d::OpType kAllgatherIntoTensorCoalesced = c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED;
inline constexpr c10d::OpType kReduceScatterTensorCoalesced = c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED;
#else
using BackendBase = c10d::ProcessGroup;
using BackendError = c10::Error;
// Only torch 2.x makes these calls.
inline constexpr c10d::OpType kAllgatherIntoTensorCoalesced = c10d::OpType::UNKNOWN;
inline constexpr c10d::OpType kReduceScatterTensorCoalesced = c10d::OpType::UNKNOWN;
#endif

// A failure of the backend, as Python should see it (see the table above).
inline std::exception_ptr backend_error(const std::string& message) {
  return std::make_exception_ptr(BackendError(c10::SourceLocation{__func__, __FILE__, __LINE__}, message));
}

}  // namespace kizuna_torch::compat
