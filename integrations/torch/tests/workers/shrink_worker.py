"""kizuna_torch.shrink(): a world of 4 loses ranks and goes on.

1. Rank 2 SIGKILLs itself; ranks 0, 1 and 3, calling all_reduce on the
   world, raise (PeerLost naming rank 2), call kizuna_torch.shrink() and
   get a group of 3: new ranks 0, 1, 2 for global 0, 1, 3.
2. On it: all_reduce exact against a serial sum, a broadcast from global
   rank 3 (src= takes global ranks), and DistributedDataParallel rebuilt
   on the new group, whose replicas stay equal.
3. Global rank 3 SIGKILLs itself too; ranks 0 and 1 shrink the shrunk
   group (a group that is not the world) to a group of 2 and all_reduce
   on it exactly.
Ranks that finish report how long each shrink took after the failure.

With the argument "store-host": a world of 3 loses rank 0, whose process
holds torch's env:// store; the survivors' shrink() must raise, naming
the store, well within the group's timeout.
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import kizuna_torch
from common import Checker, init

MODE = sys.argv[1] if len(sys.argv) > 1 else "twice"
rank, world = init(timeout_s=60 if MODE == "twice" else 20)
check = Checker(rank)


def contribution(global_rank, n=1 << 12):
    return torch.arange(n, dtype=torch.float64) * (global_rank + 1)


def fail_then_shrink(group, dying):
    """all_reduce on `group` until it raises; then shrink it. Returns the
    new group, the error and the seconds the shrink took."""
    x = torch.ones(1 << 16)
    if rank == dying:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        for _ in range(1000):
            dist.all_reduce(x, group=group)
    except RuntimeError as e:
        error = str(e)
    else:
        error = ""
    start = time.monotonic()
    shrunk = kizuna_torch.shrink(group)
    return shrunk, error, time.monotonic() - start


def exact_sum(group, survivors):
    t = contribution(rank)
    dist.all_reduce(t, group=group)
    want = sum(contribution(g) for g in survivors)
    check.close(f"all_reduce over {survivors}", t, want, exact=True)


for _ in range(3):
    dist.all_reduce(torch.ones(8))
dist.barrier()

if MODE == "store-host":
    assert world == 3
    start = time.monotonic()
    try:
        fail_then_shrink(None, dying=0)
        check.expect("shrink without the store raises", False, "shrink() returned")
        message = ""
    except RuntimeError as e:
        message = str(e)
    check.finish(seconds=time.monotonic() - start, message=message)
    sys.exit(0)

assert world == 4

# ---- 1. the world loses rank 2
pg, error, first_s = fail_then_shrink(None, dying=2)
check.expect("first error names rank 2", "rank 2" in error, error)
survivors = [0, 1, 3]
check.expect("size", pg.size() == 3, str(pg.size()))
check.expect("new rank", dist.get_rank(pg) == survivors.index(rank), str(dist.get_rank(pg)))
check.expect("global rank kept", dist.get_rank() == rank, str(dist.get_rank()))
try:
    dist.all_reduce(torch.ones(4))
    check.expect("the old world refuses calls", False, "all_reduce on the old world succeeded")
except RuntimeError:
    pass

# ---- 2. collectives and DDP on the shrunk group
exact_sum(pg, survivors)
b = torch.full((16,), float(rank))
dist.broadcast(b, src=3, group=pg)
check.close("broadcast from global rank 3", b, torch.full((16,), 3.0), exact=True)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)
for _ in range(5):
    opt.zero_grad()
    ddp(torch.randn(8, 32, generator=gen)).square().mean().backward()
    opt.step()
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
copies = [torch.empty_like(flat) for _ in survivors]
dist.all_gather(copies, flat, group=pg)
for i, c in enumerate(copies):
    check.close(f"DDP replica of new rank {i}", c, copies[0], exact=True)

# ---- 3. the shrunk group loses global rank 3
pg2, error2, second_s = fail_then_shrink(pg, dying=3)
check.expect("second error names the lost rank", "rank 2" in error2, error2)  # rank 2 of pg
check.expect("second size", pg2.size() == 2, str(pg2.size()))
check.expect("second new rank", dist.get_rank(pg2) == rank, str(dist.get_rank(pg2)))
exact_sum(pg2, [0, 1])
check.finish(first_shrink_s=first_s, second_shrink_s=second_s, first_error=error, second_error=error2)
