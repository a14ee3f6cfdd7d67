// integrations/torch/csrc/process_group_kizuna.hpp: the one torch-version-
// specific piece of the backend.
//
// bind_process_group() adds `create_process_group(store, rank, size,
// timeout)` to the Python module: the creator that
// torch.distributed.Backend.register_backend("kizuna", ...) calls with the
// group's c10d::PrefixStore, the rank and size within the group, and
// init_process_group's timeout. It returns a c10d::ProcessGroup (torch 1.13)
// whose every virtual method forwards to a TorchComm (torch_comm.hpp).
//
// Porting to torch 2.x, where backends derive from c10d::Backend and the
// creator returns one, changes process_group_kizuna.cpp only.
#pragma once

#include <pybind11/pybind11.h>

namespace kizuna_torch {

void bind_process_group(pybind11::module_& m);

}  // namespace kizuna_torch
