"""Ways into backend "kizuna", process groups, the Work API and errors.

Started by the real torchrun (torch.distributed.run).
1. env:// from torchrun's variables (init_process_group("kizuna") with no
   init_method), then new_group() subsets with their own communicators.
2. tcp://host:port with explicit rank and world size (after
   destroy_process_group), 3. file://.
4. The Work API of an async call.
5. Argument errors raise RuntimeError naming the call.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import kizuna_torch  # noqa: F401
from common import Checker

check = Checker(int(os.environ["RANK"]))
TIMEOUT = datetime.timedelta(seconds=60)


def sum_of_ranks(group=None, ranks=None):
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t, group=group)
    return t.item()


# ---- 1. env:// (the default init_method) from the launcher's variables
dist.init_process_group("kizuna", timeout=TIMEOUT)
rank, world = dist.get_rank(), dist.get_world_size()
check.expect("env:// rank", rank == int(os.environ["RANK"]))
check.expect("torchrun's LOCAL_RANK", int(os.environ["LOCAL_RANK"]) == rank)
check.expect("backend name", dist.get_backend() == "kizuna", dist.get_backend())
check.expect("env:// all_reduce", sum_of_ranks() == world * (world - 1) / 2)

# new_group: every group its own communicator under its own store prefix;
# the default group keeps working in between.
evens = dist.new_group([r for r in range(world) if r % 2 == 0])
odds = dist.new_group([r for r in range(world) if r % 2 == 1])
tail = dist.new_group(list(range(1, world)))
mine = evens if rank % 2 == 0 else odds
members = [r for r in range(world) if r % 2 == rank % 2]
check.expect("new_group all_reduce", sum_of_ranks(mine) == sum(members), f"{sum_of_ranks(mine)}")
check.expect("default group after new_group", sum_of_ranks() == world * (world - 1) / 2)
if rank >= 1:
    t = torch.tensor([float(rank)])
    dist.broadcast(t, src=world - 1, group=tail)  # src is a global rank
    check.expect("new_group broadcast", t.item() == world - 1)
    check.expect("new_group rank", dist.get_rank(tail) == rank - 1)
dist.barrier()
dist.destroy_process_group()

# ---- 2. tcp:// with explicit rank and world size
# (Under torchrun every rank would otherwise be a client of the agent's
# store, which listens on MASTER_PORT, not on this port.)
os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
dist.init_process_group("kizuna", init_method=f"tcp://127.0.0.1:{os.environ['TCP_PORT']}",
                        rank=rank, world_size=world, timeout=TIMEOUT)
check.expect("tcp:// all_reduce", sum_of_ranks() == world * (world - 1) / 2)
dist.destroy_process_group()

# ---- 3. file://
dist.init_process_group("kizuna", init_method=f"file://{os.environ['FILE_STORE']}",
                        rank=rank, world_size=world, timeout=TIMEOUT)
check.expect("file:// all_reduce", sum_of_ranks() == world * (world - 1) / 2)

# ---- 4. the Work API
t = torch.full((1000,), float(rank))
work = dist.all_reduce(t, async_op=True)
check.expect("work.wait", work.wait() is True)
check.expect("work.is_completed", work.is_completed())
check.expect("work.is_success", work.is_success())
# (Work.exception() cannot be called from Python in torch 1.13: its binding
# returns a std::exception_ptr pybind11 cannot convert, for every backend.)
value = work.get_future().wait()
check.expect("future value is the output", len(value) == 1 and value[0].data_ptr() == t.data_ptr())
check.expect("future result", torch.equal(value[0], torch.full((1000,), world * (world - 1) / 2)))
check.expect("work.result", torch.equal(work.result()[0], t))
work = dist.all_reduce(torch.ones(10), async_op=True)
check.expect("wait(timeout)", work.wait(timeout=datetime.timedelta(seconds=30)) is True)
# a chain of async calls on one tensor runs in call order
t = torch.ones(4)
works = [dist.all_reduce(t, async_op=True) for _ in range(3)]
for w in works:
    w.wait()
check.expect("async calls in order", torch.equal(t, torch.full((4,), float(world ** 3))), str(t))
# an async call on a non-contiguous tensor, then a blocking one on it: the
# second reads the first's result, copied back (several rounds: the copy
# back runs on kizuna's worker, and only sometimes late)
for _ in range(5):
    a = torch.ones(400, 300)
    x = a.t()
    w = dist.all_reduce(x, async_op=True)
    dist.all_reduce(x)
    w.wait()
    check.expect("non-contiguous async then blocking, in order", torch.equal(a, torch.full((400, 300), float(world ** 2))),
                 str(a.flatten()[:4]))
# a future callback that runs a collective of its own and waits for it, as
# DDP's PowerSGD hook does
for size in (8, 300000):
    fut = dist.all_reduce(torch.ones(size), async_op=True).get_future().then(
        lambda f: dist.all_reduce(f.value()[0] * 2, async_op=True).get_future().wait()[0])
    check.expect("a collective inside a future callback", torch.equal(fut.wait(), torch.full((size,), 2.0 * world * world)))
futs = [dist.all_reduce(torch.ones(3) * rank, async_op=True).get_future() for _ in range(3)]
check.expect("futures", all(torch.equal(f.wait()[0], torch.full((3,), world * (world - 1) / 2)) for f in futs))


# ---- 5. argument errors name the call
def raises(name, fn, *needles):
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        check.expect(name, all(n in str(e) for n in needles), f"{str(e)[:300]!r} lacks {needles}")
        return
    check.expect(name, False, "nothing raised")


# (The CPU-only check cannot be reached from here: this torch has no CUDA,
# and its dispatcher refuses meta tensors before any backend sees them.)
raises("sparse", lambda: dist.broadcast(torch.eye(3).to_sparse(), src=0), "broadcast", "Sparse")
raises("unsupported dtype", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)),
       "allreduce", "Short", "not supported")
# complex SUM works: torch passes it on as a float view (view_as_real)
z = torch.tensor([complex(rank, 1)], dtype=torch.complex64)
dist.all_reduce(z)
check.expect("complex SUM", z.item() == complex(world * (world - 1) / 2, world), str(z))
raises("integer AVG", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.AVG),
       "allreduce", "AVG", "floating")
raises("BAND", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND),
       "allreduce", "BAND", "not supported")
raises("negative tag", lambda: dist.send(torch.ones(2), (rank + 1) % world, tag=-7), "send", "tag -7")
raises("all_gather list size", lambda: dist.all_gather([torch.ones(2)], torch.ones(2)),
       "allgather", "one per rank")
raises("allgather_coalesced list count", lambda: dist.all_gather_coalesced([[torch.ones(2)] * world], [torch.ones(2)]),
       "allgather_coalesced", "one output list per rank")
dist.barrier()
check.expect("usable after argument errors", sum_of_ranks() == world * (world - 1) / 2)
dist.destroy_process_group()
check.finish(world=world)
