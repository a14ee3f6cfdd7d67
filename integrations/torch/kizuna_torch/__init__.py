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
broadcast, reduce, all_gather, _all_gather_base, gather, scatter,
reduce_scatter, _reduce_scatter_base, all_to_all_single, all_to_all,
barrier, send/recv (tag 0), on float16, bfloat16, float32, float64, int8,
uint8, int32, int64 and bool CPU tensors. AVG needs a floating-point dtype.
CUDA tensors and unsupported calls raise RuntimeError naming the call.
See docs/torch.md.
"""

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
    _dist.Backend.register_backend(BACKEND, create_process_group)


_register()
