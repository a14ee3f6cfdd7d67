"""kizuna as a torch.distributed backend.

Importing this package registers the backend name ``"kizuna"``::

    import torch.distributed as dist
    import kizuna_torch  # noqa: F401  (registers the backend)

    dist.init_process_group("kizuna", init_method="env://")

after which every torch.distributed call on CPU tensors, and
DistributedDataParallel, run over kizuna. Rendezvous goes through the store
torch creates for the process group (env://, tcp://, file:// or a store
passed in), so kizuna opens no rendezvous port of its own; each process
group, including each ``new_group()``, gets its own kizuna communicator.

Supported: all_reduce (SUM, AVG, PRODUCT, MIN, MAX), all_reduce_coalesced,
broadcast, reduce, all_gather, all_gather_into_tensor (_all_gather_base),
all_gather_coalesced, gather, scatter, reduce_scatter,
reduce_scatter_tensor (_reduce_scatter_base), all_to_all_single,
all_to_all, barrier, send/recv (tag 0), and with torch 2.x
monitored_barrier and the coalesced all_gather_into_tensor /
reduce_scatter_tensor of torch's coalescing manager; on float16, bfloat16,
float32, float64, int8, uint8, int32, int64 and bool CPU tensors. AVG needs a
floating-point dtype. CUDA tensors and unsupported calls raise RuntimeError
naming the call. See docs/torch.md.

The same package is built for Debian's torch 1.13 and for torch 2.x
(integrations/torch/README.md); it registers the backend the way the
running torch expects: with torch 2.x, for the "cpu" and "cuda" device
types (CUDA tensors are refused with a message saying so).
"""

import torch as _torch
import torch.distributed as _dist

from ._C import create_process_group as _create_process_group

__all__ = ["BACKEND", "create_process_group"]

#: The name to pass to torch.distributed.init_process_group / new_group.
BACKEND = "kizuna"


def create_process_group(store, rank, world_size, timeout):
    """The backend creator torch.distributed calls for ``backend="kizuna"``.

    Collective: every rank of the group calls it with the group's store;
    returns once all of them are connected, and raises RuntimeError (with
    kizuna's message) if they are not within ``timeout`` (a timedelta).
    """
    return _create_process_group(store, rank, world_size, timeout)


def _register():
    # Idempotent: a second import (e.g. under another module name) must not
    # trip torch's "backend already exists" assertion.
    if BACKEND.upper() in getattr(_dist.Backend, "_plugins", {}):
        return
    if int(_torch.__version__.split(".")[0]) >= 2:
        # torch 2.x keeps one backend per device type in a ProcessGroup;
        # naming both lets a CUDA tensor reach kizuna, which refuses it
        # with a message, instead of torch's "no backend for cuda".
        _dist.Backend.register_backend(BACKEND, create_process_group, devices=["cpu", "cuda"])
    else:
        _dist.Backend.register_backend(BACKEND, create_process_group)


_register()
