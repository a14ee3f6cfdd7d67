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

After a lost rank, ``shrink(group)`` gives the survivors a new process
group and training goes on (examples/elastic_ddp.py).

The same package is built for Debian's torch 1.13 and for torch 2.x
(integrations/torch/README.md); it registers the backend the way the
running torch expects: with torch 2.x, for the "cpu" and "cuda" device
types (CUDA tensors are refused with a message saying so).
"""

import atexit as _atexit
import datetime as _datetime
import os as _os
import sys as _sys

import torch as _torch
import torch.distributed as _dist
import torch.distributed.distributed_c10d as _c10d

from ._C import _shrink
from ._C import _wait_for_threads_to_release
from ._C import create_process_group as _create_process_group

__all__ = ["BACKEND", "create_process_group", "shrink"]

#: The name to pass to torch.distributed.init_process_group / new_group.
BACKEND = "kizuna"

_TORCH2 = int(_torch.__version__.split(".")[0]) >= 2

# A backend shrink() made, which the next call of the creator hands to
# torch instead of creating one: shrink() builds its ProcessGroup through
# torch's own helper, so the group is registered as new_group() would
# register it, under either torch.
_adopt = []


def create_process_group(store, rank, world_size, timeout):
    """The backend creator torch.distributed calls for ``backend="kizuna"``.

    Collective: every rank of the group calls it with the group's store;
    returns once all of them are connected, and raises RuntimeError (with
    kizuna's message) if they are not within ``timeout`` (a timedelta).
    """
    if _adopt:
        return _adopt.pop()
    return _create_process_group(store, rank, world_size, timeout)


def shrink(group=None):
    """A process group of the survivors of ``group`` (default: the world).

    Call it on every surviving rank once a call on ``group`` has raised
    because a rank was lost (kizuna's PeerLost, "rank N ... lost"): the
    survivors agree on the failed ranks and get a new group of the others,
    numbered in their old order, with kizuna's transports set up afresh
    (kizuna's Communicator::shrink, docs/reliability.md#shrinking). Pass
    the new group explicitly (``group=``, ``DistributedDataParallel(...,
    process_group=...)``); ``group`` itself stays failed, and every call
    on it raises. ``dist.get_rank(new)`` is this rank's place in the new
    group; global ranks (``dist.get_rank()``, ``src=``/``dst=`` of the
    collectives) keep their old numbers.

    Collective over the survivors and bounded by the group's timeout: it
    raises RuntimeError naming a rank that neither calls shrink() nor is
    seen to fail, or the store's error when the store is gone (with
    ``env://`` torch's store lives in rank 0's process, so a lost rank 0
    cannot be survived). A rank the others decided without raises too.
    """
    group = group if group is not None else _c10d._get_default_group()
    backend = group._get_backend(_torch.device("cpu")) if _TORCH2 else group
    survivors, old_ranks, name, timeout_ms = _shrink(backend)
    if group is _c10d._get_default_group():
        global_ranks = list(old_ranks)
    else:
        global_ranks = [_c10d.get_global_rank(group, r) for r in old_ranks]
    # Unique in this process, and the same on every survivor: the old
    # group's torch name and the shrunk communicator's.
    names = _c10d._world.pg_names if _TORCH2 else _c10d._pg_names
    name = f"{names[group]}/{name}"
    timeout = (_datetime.timedelta(milliseconds=timeout_ms) if timeout_ms > 0
               else _c10d.default_pg_timeout)
    _adopt.append(survivors)
    try:
        made = _c10d._new_process_group_helper(
            len(global_ranks), survivors.rank(), global_ranks, BACKEND,
            _c10d._get_default_store(), group_name=name, timeout=timeout)
    finally:
        _adopt.clear()
    pg = made[0] if isinstance(made, tuple) else made
    ranks = {g: i for i, g in enumerate(global_ranks)}
    if _TORCH2:
        _c10d._world.pg_group_ranks[pg] = ranks
    else:
        _c10d._pg_group_ranks[pg] = ranks
    return pg


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


# How long exit waits for calls still in flight (see _let_threads_release).
_EXIT_WAIT_S = 10.0


def _let_threads_release():
    """Run at exit, before Python finalizes: waits until kizuna's threads
    hold no reference to a call (its Work, its tensors, its future).

    They often hold the last reference to a tensor: Python drops its own as
    soon as a call returns, or leaves a call in flight (async_op=True, no
    wait). Dropping that reference takes the GIL, and a thread that asks for
    the GIL once Python has begun to finalize is ended by CPython
    mid-destructor, which aborts the process ("terminate called without an
    active exception", pytorch/pytorch#190489 for Gloo's threads). Here,
    before finalization, other threads may still take the GIL; calls in
    flight finish, or fail once their peers have gone.
    """
    left = _wait_for_threads_to_release(_EXIT_WAIT_S)
    if left:
        print(f"kizuna_torch: {left} call(s) still in flight at exit after {_EXIT_WAIT_S:g} s; "
              "the process may abort while Python finalizes", file=_sys.stderr, flush=True)


def _forked_child():
    # A forked child has none of the parent's threads, only their count.
    _atexit.unregister(_let_threads_release)


_register()
_atexit.register(_let_threads_release)
_os.register_at_fork(after_in_child=_forked_child)
