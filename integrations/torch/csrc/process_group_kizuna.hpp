// integrations/torch/csrc/process_group_kizuna.hpp: the backend object torch
// holds, and its creator.
//
// bind_process_group() adds `create_process_group(store, rank, size,
// timeout)` to the Python module: the creator that
// torch.distributed.Backend.register_backend("kizuna", ...) calls with the
// group's c10d::PrefixStore, the rank and size within the group, and
// init_process_group's timeout. It returns a ProcessGroupKizuna, whose
// every virtual method forwards to a TorchComm (torch_comm.hpp): a
// c10d::ProcessGroup in torch 1.13, a c10d::Backend in torch 2.x, which
// torch's ProcessGroup then holds for the devices it was registered for
// (torch_compat.hpp).
#pragma once

#include <pybind11/pybind11.h>

namespace kizuna_torch {

void bind_process_group(pybind11::module_& m);

}  // namespace kizuna_torch
